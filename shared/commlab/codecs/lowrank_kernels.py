"""The products of PowerSGD (powersgd.py) as compiled passes: M Q, M^T P, P Q^T with its
finiteness check, the orthogonalisation, and a frame's power iterations, which read M once each.
"""
from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from commlab.codecs.jit import kernel


@cache
def _blas() -> ThreadpoolController:
    return ThreadpoolController()


def one_blas_thread() -> Any:
    """A context in which numpy's BLAS runs on one thread, for the Householder QR (LAPACK) a frame
    falls back on: while other processes run (a node's training, other nodes) OpenBLAS's threads
    wait on each other (ten times slower, measured with make bench-codecs when the frame's
    products ran on BLAS)."""
    return _blas().limit(limits=1, user_api="blas")


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


# A frame's power iteration reads M once: P = M Q and S = M^T P in one pass (each row's dot
# products, then the row times them added to S while the row is still in cache), and with R from
# P^T P = R^T R (Cholesky), P R^-1 is orthonormal and M^T (P R^-1) = S R^-1 is the next Q, with no
# second read of M. The rows go by blocks that stay in L2 between the two halves of the pass.
ROW_BLOCK_BYTES = 512 * 1024
# Cholesky's R loses the part of a column orthogonal to the columns before it when that part is
# small: S R^-1 subtracts nearly equal float32 columns of S, an error of about float32's precision
# times the column's length over that part. Below 1 % of the column's length (a pivot below 1e-4 of
# its squared length), or for a zero or non-finite column, the iteration takes the Householder QR
# of P (orthogonalize) and a second read of M instead, as DDP does.
MIN_PIVOT_SHARE = 1e-4


@kernel(fastmath={"reassoc", "contract"})
def _block_dots(m: np.ndarray, units: np.ndarray, c: int, first: int, end: int, p: np.ndarray) -> None:
    """p[i, c] and p[i, c + 1] = m[i] . units[c] and m[i] . units[c + 1] for the rows first..end-1:
    four rows a quarter of the block apart at a time, each unit value loaded once for the four
    (rows next to each other streamed from memory half as fast, measured on 1,000-wide rows)."""
    a, b = units[c], units[c + 1]
    quarter = (end - first) // 4
    for i in range(first, first + quarter):
        r0, r1, r2, r3 = m[i], m[i + quarter], m[i + 2 * quarter], m[i + 3 * quarter]
        t0a = t0b = t1a = t1b = t2a = t2b = t3a = t3b = np.float32(0)
        for j in range(r0.size):
            x0, x1, x2, x3, qa, qb = r0[j], r1[j], r2[j], r3[j], a[j], b[j]
            t0a += x0 * qa
            t0b += x0 * qb
            t1a += x1 * qa
            t1b += x1 * qb
            t2a += x2 * qa
            t2b += x2 * qb
            t3a += x3 * qa
            t3b += x3 * qb
        for k, (ta, tb) in enumerate(((t0a, t0b), (t1a, t1b), (t2a, t2b), (t3a, t3b))):
            p[i + k * quarter, c], p[i + k * quarter, c + 1] = ta, tb
    for i in range(first + 4 * quarter, end):
        row = m[i]
        ta = tb = np.float32(0)
        for j in range(row.size):
            ta += row[j] * a[j]
            tb += row[j] * b[j]
        p[i, c], p[i, c + 1] = ta, tb


@kernel(fastmath={"reassoc", "contract"})
def _block_sums(m: np.ndarray, p: np.ndarray, c: int, first: int, end: int, s: np.ndarray) -> None:
    """s[c] and s[c + 1] += the rows first..end-1 of m times their factors p[i, c] and p[i, c + 1],
    four rows at a time: each value of s loaded and stored once for the four."""
    sa, sb = s[c], s[c + 1]
    last4 = first + (end - first) // 4 * 4
    for i in range(first, last4, 4):
        r0, r1, r2, r3 = m[i], m[i + 1], m[i + 2], m[i + 3]
        f0a, f1a, f2a, f3a = p[i, c], p[i + 1, c], p[i + 2, c], p[i + 3, c]
        f0b, f1b, f2b, f3b = p[i, c + 1], p[i + 1, c + 1], p[i + 2, c + 1], p[i + 3, c + 1]
        for j in range(r0.size):
            x0, x1, x2, x3 = r0[j], r1[j], r2[j], r3[j]
            sa[j] += f0a * x0 + f1a * x1 + f2a * x2 + f3a * x3
            sb[j] += f0b * x0 + f1b * x1 + f2b * x2 + f3b * x3
    for i in range(last4, end):
        row, fa, fb = m[i], p[i, c], p[i, c + 1]
        for j in range(row.size):
            sa[j] += fa * row[j]
            sb[j] += fb * row[j]


@kernel
def _power_pass(m: np.ndarray, units: np.ndarray, block: int, p: np.ndarray, s: np.ndarray) -> None:
    """p = m @ units.T (n x 2k) and s = p.T @ m (2k x cols) in one read of m, by blocks of `block`
    rows, the columns of p in pairs (units has an even number of rows). Sums reassociated as LLVM
    vectorises them (their last bits depend on the vector width: the same on one machine)."""
    s[:] = 0
    for first in range(0, m.shape[0], block):
        end = min(first + block, m.shape[0])
        for c in range(0, units.shape[0], 2):
            _block_dots(m, units, c, first, end, p)
        for c in range(0, units.shape[0], 2):
            _block_sums(m, p, c, first, end, s)


@kernel(fastmath={"reassoc"})
def _unit_rows(q_rows: np.ndarray, units: np.ndarray) -> None:
    """units[c] = q_rows[c] scaled to length 1 (a zero row stays zero), units' rows past q_rows'
    zero. The span is Q's; unit columns keep M Q and M^T M Q at the scale of M, not of its cube.
    The squares summed in the order LLVM vectorises (in order they took 6 of the 22 microseconds
    fc1's iteration spends outside its pass), in float64: the order costs no precision that
    float32 units keep, and is the same on one machine."""
    units[q_rows.shape[0]:] = 0
    for c in range(q_rows.shape[0]):
        row, squares = q_rows[c], 0.0
        for j in range(row.size):
            squares += np.float64(row[j]) * row[j]
        scale = np.float32(1 / np.sqrt(squares)) if squares > 0 else np.float32(0)
        for j in range(row.size):
            units[c, j] = row[j] * scale


@kernel
def _cholesky_inverse(p: np.ndarray, r_inv: np.ndarray) -> bool:
    """r_inv = R^-1 for the upper triangular R with a positive diagonal and R^T R = P^T P, P the
    first r (r_inv's size) columns of p, in float64; whether every pivot is at least
    MIN_PIVOT_SHARE of its column's squared length (False for a zero or non-finite column too)."""
    r = r_inv.shape[0]
    gram = np.zeros((r, r))
    for i in range(p.shape[0]):
        for c in range(r):
            for d in range(c + 1):
                gram[c, d] += np.float64(p[i, c]) * p[i, d]
    lower = np.zeros((r, r))  # L = R^T, G = L L^T
    for k in range(r):
        pivot = gram[k, k] - np.sum(lower[k, :k] ** 2)
        if not pivot >= MIN_PIVOT_SHARE * gram[k, k] or not pivot > 0:
            return False
        lower[k, k] = np.sqrt(pivot)
        for i in range(k + 1, r):
            lower[i, k] = (gram[i, k] - np.sum(lower[i, :k] * lower[k, :k])) / lower[k, k]
    r_inv[:] = 0  # R^-1 = (L^-1)^T, L^-1 column by column by forward substitution
    for e in range(r):
        for i in range(e, r):
            r_inv[e, i] = ((1.0 if i == e else 0.0) - np.sum(lower[i, e:i] * r_inv[e, e:i])) / lower[i, i]
    return True


@kernel
def _times_r_inv(x_rows: np.ndarray, r_inv: np.ndarray, out_rows: np.ndarray) -> None:
    """out_rows = (x_rows[:r].T @ r_inv).T (r_inv upper triangular, r x r): row c the sum over
    k <= c of x_rows[k] r_inv[k, c] in float64, k ascending, in loops along the rows that
    vectorise (a loop over k inside one along a row did not: 13 against 2.5 microseconds on fc1's
    S, four times a frame)."""
    total = np.empty(out_rows.shape[1])
    for c in range(out_rows.shape[0]):
        for j in range(total.size):
            total[j] = np.float64(x_rows[0, j]) * r_inv[0, c]
        for k in range(1, c + 1):
            for j in range(total.size):
                total[j] += np.float64(x_rows[k, j]) * r_inv[k, c]
        for j in range(total.size):
            out_rows[c, j] = total[j]


@kernel
def _power_iterations(m: np.ndarray, q_rows: np.ndarray, iters: int, block: int, units: np.ndarray,
                      pass_p: np.ndarray, s: np.ndarray, p: np.ndarray) -> int:
    """Up to `iters` power iterations from Q (q_rows: Q^T, updated); p: the last one's orthonormal
    P. Returns the iterations done: fewer when an iteration's P is too close to dependent columns
    for Cholesky (MIN_PIVOT_SHARE; q_rows is then that iteration's input, p unset)."""
    r_inv = np.empty((q_rows.shape[0], q_rows.shape[0]))
    for done in range(iters):
        _unit_rows(q_rows, units)
        _power_pass(m, units, block, pass_p, s)
        if not _cholesky_inverse(pass_p, r_inv):
            return done
        _times_r_inv(s, r_inv, q_rows)
    _times_r_inv(pass_p.T, r_inv, p.T)
    return iters


def power_iterations(m: np.ndarray, q: np.ndarray, iters: int) -> tuple[np.ndarray, np.ndarray]:
    """(P, Q) after `iters` power iterations on m (n x cols) from q (cols x r): P orthonormal
    (n x r), Q = M^T P (cols x r). The same maths as orthogonalize and a second product, with other
    rounding: where that maths is ill-conditioned (MIN_PIVOT_SHARE) the iteration runs as DDP's does."""
    n, cols = m.shape
    r = q.shape[1]
    q_rows = np.array(q.T, order="C")  # a copy even where q.T is contiguous (r = 1): q is the caller's
    units, s = np.empty((r + r % 2, cols), np.float32), np.empty((r + r % 2, cols), np.float32)
    pass_p, p = np.empty((n, r + r % 2), np.float32), np.empty((n, r), np.float32)
    block = max(4, ROW_BLOCK_BYTES // (4 * cols))
    done = 0
    while done < iters:
        done += _power_iterations(m, q_rows, iters - done, block, units, pass_p, s, p)
        if done < iters:
            with one_blas_thread():
                p = orthogonalize(product(m, q_rows.T))
            _transposed_product(m, p, q_rows)
            done += 1
    return p, np.ascontiguousarray(q_rows.T)
