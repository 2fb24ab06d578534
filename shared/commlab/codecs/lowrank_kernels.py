"""The products of PowerSGD (powersgd.py) as compiled passes: M Q, M^T P (DDP's exchange,
ddp/lowrank.py), P Q^T with its finiteness check (every decoded frame), and the orthogonalisation
DDP's exchange runs. A frame's own factors: krylov.py.
"""
from __future__ import annotations

import numpy as np

from commlab.codecs.jit import kernel


@kernel(fastmath={"reassoc"})
def _product(m: np.ndarray, q_rows: np.ndarray, out: np.ndarray) -> None:
    """out = m @ q_rows.T (n x r): a dot product of each row of m with each of the r rows, summed
    in the order LLVM vectorises (reassociated: its last bits depend on the vector width, as
    BLAS's kernels do on the CPU)."""
    for i in range(m.shape[0]):
        row = m[i]
        for c in range(q_rows.shape[0]):
            column, total = q_rows[c], np.float32(0)
            for j in range(row.size):
                total += row[j] * column[j]
            out[i, c] = total


def product(m: np.ndarray, q: np.ndarray) -> np.ndarray:
    """m @ q (n x r) for a matrix q of r columns: BLAS on one thread took 1.5 times as long on
    the MNIST CNN's fc1 and 4 times on a 10,000 x 1,000 matrix (make bench-codecs)."""
    out = np.empty((m.shape[0], q.shape[1]), np.float32)
    _product(m, np.ascontiguousarray(q.T), out)
    return out


@kernel
def _transposed_product(m: np.ndarray, p: np.ndarray, out: np.ndarray) -> None:
    """out = p.T @ m (r x cols): each row of m times its r factors, added to the r rows of out in
    turn, in loops along a row that vectorise."""
    out[:] = 0
    for i in range(m.shape[0]):
        row = m[i]
        for c in range(p.shape[1]):
            factor, total = p[i, c], out[c]
            for j in range(row.size):
                total[j] += factor * row[j]


def transposed_product(m: np.ndarray, p: np.ndarray) -> np.ndarray:
    """m.T @ p (cols x r, C-contiguous), summed over m's rows in order: BLAS's transposed product
    on one thread took 1.5 times as long on the MNIST CNN's fc1 and 3 times on a 10,000 x 1,000
    matrix (make bench-codecs)."""
    out = np.empty((p.shape[1], m.shape[1]), np.float32)
    _transposed_product(m, p, out)
    return np.ascontiguousarray(out.T)


@kernel
def _expand(p: np.ndarray, q_rows: np.ndarray, out: np.ndarray) -> np.uint32:
    """out = p @ q_rows (n x cols), row by row, in loops along a row that vectorise: the row's first
    r - 2 terms one after the other (none for r <= 2), then the last two (or one) and the row's
    largest magnitude in the same loop. Returns that magnitude's bits (0x7F800000 and above: an
    inf or NaN). The masked word cast back to uint32: numba widens integer operations to 64 bits,
    which halves the lanes of the maximum."""
    top, r = np.uint32(0), p.shape[1]
    last = max(r - 2, 0)
    for i in range(p.shape[0]):
        row, words = out[i], out[i].view(np.uint32)
        for c in range(last):
            factor, q_row = p[i, c], q_rows[c]
            if c == 0:
                for j in range(row.size):
                    row[j] = factor * q_row[j]
            else:
                for j in range(row.size):
                    row[j] += factor * q_row[j]
        fa, qa = p[i, last], q_rows[last]
        fb, qb = (p[i, r - 1], q_rows[r - 1]) if r > 1 else (np.float32(0), qa)
        if last == 0:
            for j in range(row.size):
                row[j] = fa * qa[j] + fb * qb[j]
                top = max(top, np.uint32(words[j] & np.uint32(0x7FFFFFFF)))
        else:
            for j in range(row.size):
                row[j] += fa * qa[j] + fb * qb[j]
                top = max(top, np.uint32(words[j] & np.uint32(0x7FFFFFFF)))
    return top


def expand(p: np.ndarray, q: np.ndarray, out: np.ndarray) -> bool:
    """out (n x m) = p @ q.T; whether every value is finite. BLAS on one thread, then a check of
    the product, took half as long again on a 10,000 x 1,000 matrix (make bench-codecs)."""
    return bool(_expand(p, np.ascontiguousarray(q.T), out) < np.uint32(0x7F800000))


def orthogonalize(p: np.ndarray) -> np.ndarray:
    """Orthonormal columns spanning p (reduced QR), signs fixed by R's diagonal so that every
    rank gets the same result from the same input."""
    q, r = np.linalg.qr(p.astype(np.float64))
    return (q * np.sign(np.where(np.diag(r) == 0, 1.0, np.diag(r)))).astype(np.float32)
