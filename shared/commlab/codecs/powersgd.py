"""powersgd<r>: low-rank gradient compression (Vogels et al., NeurIPS 2019; PyTorch's powerSGD_hook).

Each matrix-shaped tensor M (n x m: the first dimension by the rest) is approximated by P Q^T of
rank r by power iteration from the previous frame's Q (warm start): P = M Q, orthogonalise P,
Q = M^T P, `power_iters` times per frame. Tensors with one dimension, and matrices too small to gain
`min_compression_rate`, travel whole. The residual M - P Q^T is the error-feedback memory around
this codec; in FL (Compression, codecs/compression.py) the residual carried into the next round
is clipped to the new delta's norm (`residual_clip`), in DDP it is carried whole.

Why several iterations per frame: in DDP one warm-started iteration per step is enough (the paper,
the hook), because consecutive gradients are alike and the iterations add up across steps; every
iteration there costs an allreduce, so DDP (ddp/lowrank.py, which does not use `encode`) keeps one.
A frame (an FL upload: one per round) is computed by one sender alone, so more iterations cost no
bytes, and the previous frame's Q is a round of training old: one iteration from it left the
rank-2 approximation of an MNIST CNN round delta well short of the best one (fc1 27 % of its
energy from a random start against 39 % for the best rank 2, conv2 36 % against 52 %; 4
iterations: 38.6 % and 51.9 %), and FL powersgd2 at 81 % after 10 rounds (fp32 98.6 %).

A frame's iteration reads M once (power_iterations): P = M Q and S = M^T P in one pass, then with
R from Cholesky of P^T P, P R^-1 is the orthonormal P and S R^-1 = M^T P R^-1 the next Q. The same
maths as the Householder QR and second product DDP runs (which it still takes where P's columns
are nearly dependent), with other rounding: frames differ from those of the two-read iteration in
their last bits (captured energy of the bench's MNIST CNN update, rank 2, 4 iterations: the same
to four digits in every matrix), and are the same bits for the same input on one machine.

Before `start_iter` (the hook's start_powerSGD_iter; DDP counts steps, FL rounds: the schedule
WholeFirst sets `whole`) the whole vector travels, in FL as a frame with no matrices. Its default, 2, is the
hook's least: torch refuses start_powerSGD_iter <= 1 with error feedback or warm start, and the
gloo peer (peers/gloo.py) runs with 2. In FL those are the first two rounds, and they are what
brings FL powersgd2 within 0.5 pp of fp32 after 10 rounds (docs/codecs.md).

As a frame (FL uploads): per matrix its offset, n and m, then P (n x r) and Q (m x r) as float32;
then the dense positions (indices coded as fp32_sparse codes them) and their float32 values; a
frame before start_iter has no matrices and every position dense, with no index bytes. The
receiver needs nothing but the frame. In DDP the same maths runs as two allreduces, of the Ps and
of the Qs (ddp/lowrank.py, through the lowrank_* methods), so that every rank orthogonalises the
same averaged P.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from commlab.codecs import indices
from commlab.codecs.base import LOWRANK, Codec, Context, Layout, register
from commlab.codecs.errors import CodecError
from commlab.codecs.jit import kernel
from commlab.codecs.memory import ErrorFeedback
from commlab.codecs.topk import split_sparse

ENTRY = struct.Struct("<QII")  # offset in the flat vector, n, m
POWER_ITERS = 4  # per frame; see the module docstring
# The error feedback's parameters (ErrorFeedback's decay and clip) by setting. A round-old FL
# residual overshoots: the next round's training re-learns part of what the frame dropped. Carried
# at half its size and at most the new delta's norm, after the codec's two whole rounds
# (start_iter), FL powersgd2 after 10 rounds, seeds 0/1/2, is within 0.33-0.40 pp of fp32 (rank 2
# from round 1 with the clipped residual: 0.66-1.26 pp below; docs/codecs.md). DDP keeps the
# plain residual, one step old, and takes neither parameter.
RESIDUAL_PARAMS = {"fl": {"residual_decay": 0.5, "residual_clip": 1.0}, "ddp": {}}


@dataclass(frozen=True)
class Matrix:
    offset: int
    n: int
    m: int


def plan(layout: Layout, rank: int, min_compression_rate: float) -> tuple[list[Matrix], np.ndarray]:
    """The matrices to factorise and the flat positions that travel dense, as the PyTorch hook
    decides: compress an n x m matrix only if n*m >= min_compression_rate * r*(n+m)."""
    matrices, dense, offset = [], [], 0
    for _, shape in layout:
        numel = math.prod(shape)
        if len(shape) > 1:
            n, m = shape[0], numel // shape[0]
            r = min(rank, n, m)
            if n * m >= min_compression_rate * r * (n + m):
                matrices.append(Matrix(offset, n, m))
                offset += numel
                continue
        dense.append(np.arange(offset, offset + numel, dtype=np.int64))
        offset += numel
    return matrices, (np.concatenate(dense) if dense else np.zeros(0, np.int64))


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


@register
class PowerSgd(Codec):
    name = "powersgd"
    codec_id = 11
    lossy = True
    params_struct = struct.Struct("<IIIBQ")  # matrices, rank, dense count, index mode, index bytes
    suffix_param = "rank"
    needs_layout = True
    exchange = LOWRANK
    node_params = RESIDUAL_PARAMS

    def __init__(self, layout: Layout | None = None, rank: int = 2, min_compression_rate: float = 2.0,
                 start_iter: int = 2, seed: int = 0, power_iters: int = POWER_ITERS, **kw) -> None:
        super().__init__(**kw)
        if not 1 <= rank <= 1024 or start_iter < 0 or not 1 <= power_iters <= 64:
            raise CodecError(f"powersgd: need 1 <= rank <= 1024, start_iter >= 0 and 1 <= power_iters <= 64, "
                             f"got {rank}, {start_iter}, {power_iters}")
        # start_iter: DDP steps exchanged dense before PowerSGD starts (the hook's start_powerSGD_iter).
        # power_iters: power iterations per encoded frame (FL uploads); DDP's exchange runs one per step.
        self.rank, self.start_iter, self.rng = rank, start_iter, np.random.default_rng(seed)
        self.name = f"powersgd{rank}"
        self.power_iters = power_iters
        self.whole = False  # this frame carries the whole vector: at_step sets it (Compression calls it)
        self.numel: int | None = None
        self.matrices: list[Matrix] = []
        self.dense_idx = np.zeros(0, np.int64)
        self.dense_code: tuple[int, np.ndarray] = indices.encode(self.dense_idx, 0)
        if layout is not None:
            self.numel = sum(math.prod(s) for _, s in layout)
            self.matrices, self.dense_idx = plan(layout, rank, min_compression_rate)
            self.dense_code = indices.encode(self.dense_idx, self.numel)  # the same every step
        # Warm start: each matrix's Q from the last step (PyTorch starts from random normal).
        self.qs = [self.rng.standard_normal((mat.m, min(rank, mat.n, mat.m))).astype(np.float32)
                   for mat in self.matrices]

    @classmethod
    def build(cls, params: dict[str, Any], context: Context) -> tuple[PowerSgd, ErrorFeedback, WholeFirst]:
        """PowerSGD as a node runs it: the codec seeded alike on every node (ranks never exchange
        their first Qs), error feedback with the setting's residual parameters (node_params),
        and whole frames before start_iter."""
        residual = {k: params.get(k, default) for k, default in cls.node_params[context.setting].items()}
        codec = cls.create({"seed": context.run_seed, **{k: v for k, v in params.items() if k not in residual}},
                           context.layout)
        memory = ErrorFeedback(residual.get("residual_decay", 1.0), residual.get("residual_clip"))
        return codec, memory, WholeFirst(codec)

    def at_step(self, step: int) -> None:
        self.whole = step < self.start_iter

    def view(self, vec: np.ndarray, mat: Matrix) -> np.ndarray:
        return vec[mat.offset:mat.offset + mat.n * mat.m].reshape(mat.n, mat.m)

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        if self.numel is None or vec.size != self.numel:
            raise CodecError(f"powersgd: encoding needs the model layout and a vector of its {self.numel} elements, "
                             f"got {vec.size}")
        if self.whole:
            return (0, self.rank, vec.size, indices.VARINT, 0), [vec]
        parts = []
        for k, mat in enumerate(self.matrices):
            p, self.qs[k] = power_iterations(self.view(vec, mat), self.qs[k], self.power_iters)
            parts += [ENTRY.pack(mat.offset, mat.n, mat.m), p, self.qs[k]]
        mode, idx_bytes = self.dense_code
        parts += [idx_bytes, vec[self.dense_idx]]
        return (len(self.matrices), self.rank, self.dense_idx.size, mode, idx_bytes.size), parts

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        count, rank, d_count, mode, idx_len = params
        # Every position is written once: the matrices' and, in the gaps between them, zeros (then
        # the dense values); a matrix that overlaps one before it overwrites it, as it always did.
        out, pos, filled = np.empty(numel, np.float32), 0, 0
        for k in range(count):
            if pos + ENTRY.size > len(payload):
                raise CodecError(f"powersgd: frame truncated in the entry of matrix {k}")
            offset, n, m = ENTRY.unpack_from(payload, pos)
            r = min(rank, n, m)
            end = pos + ENTRY.size + 4 * r * (n + m)
            if n == 0 or m == 0 or offset + n * m > numel or end > len(payload):
                raise CodecError(f"powersgd: matrix {k} ({n} x {m} at {offset}, rank {r}) does not fit")
            factors = np.frombuffer(payload[pos + ENTRY.size:end], "<f4")
            p, q = factors[:n * r].reshape(n, r), factors[n * r:].reshape(m, r)
            out[filled:offset] = 0
            with np.errstate(all="ignore"):
                finite = expand(p, q, out[offset:offset + n * m].reshape(n, m))  # straight into the output
            filled = max(filled, offset + n * m)
            if not finite:
                raise CodecError(f"powersgd: matrix {k}: factors are not finite or their product overflows float32")
            pos = end
        out[filled:] = 0
        if count == 0 and d_count == numel and idx_len == 0:  # a whole frame (before start_iter)
            idx, rest = np.arange(numel), payload
        else:
            idx, rest = split_sparse(payload[pos:], numel, d_count, mode, idx_len, self.name)
        if len(rest) != 4 * d_count:
            raise CodecError(f"powersgd: {len(rest)} dense value bytes for {d_count} float32 values")
        out[idx] = np.frombuffer(rest, "<f4")
        return out

    def payload_size(self, numel: int) -> int:
        if self.whole:
            return 4 * numel
        factors = sum(ENTRY.size + 4 * min(self.rank, mat.n, mat.m) * (mat.n + mat.m) for mat in self.matrices)
        return factors + self.dense_code[1].size + 4 * self.dense_idx.size

    def lowrank_p(self, m: np.ndarray) -> np.ndarray:
        """A DDP step's first allreduce: every matrix's M Q (Q from the last step), then the values
        that travel whole."""
        parts = [product(self.view(m, mat), q) for mat, q in zip(self.matrices, self.qs)]
        return np.concatenate(parts + [m[self.dense_idx]], axis=None)

    def lowrank_q(self, m: np.ndarray, p_mean: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """The second allreduce: (the averaged Ps orthogonalised, the same on every rank; every
        matrix's M^T P)."""
        ps, pos = [], 0
        for mat, q in zip(self.matrices, self.qs):
            ps.append(orthogonalize(p_mean[pos:pos + mat.n * q.shape[1]].reshape(mat.n, q.shape[1])))
            pos += mat.n * q.shape[1]
        q_parts = [transposed_product(self.view(m, mat), p).ravel() for mat, p in zip(self.matrices, ps)]
        return ps, np.concatenate(q_parts or [np.zeros(0, np.float32)])

    def lowrank_product(self, m: np.ndarray, ps: list[np.ndarray], q_mean: np.ndarray) -> np.ndarray:
        """`m` with every matrix replaced by P Q^T of the averaged Qs, which become the next
        step's warm start; the values that travel whole stay this rank's own."""
        approx, pos = m.copy(), 0
        for k, (mat, p) in enumerate(zip(self.matrices, ps)):
            q = q_mean[pos:pos + mat.m * p.shape[1]].reshape(mat.m, p.shape[1])
            pos += q.size
            self.qs[k] = q
            expand(p, q, approx[mat.offset:mat.offset + mat.n * mat.m].reshape(mat.n, mat.m))
        return approx

    def lowrank_whole(self, approx: np.ndarray, p_mean: np.ndarray) -> None:
        """Put the averaged values that travel whole (the first allreduce's tail) into `approx`."""
        approx[self.dense_idx] = p_mean[p_mean.size - self.dense_idx.size:]

    def state_dict(self) -> dict:
        return {"qs": [q.copy() for q in self.qs], "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        qs = [np.array(q, dtype=np.float32) for q in state["qs"]]
        if [q.shape for q in qs] != [q.shape for q in self.qs]:
            raise CodecError("powersgd: saved warm-start matrices do not fit this model")
        self.qs, self.rng.bit_generator.state = qs, state["rng"]


@dataclass
class WholeFirst:
    """PowerSGD's schedule: the first `start_iter` steps (FL: rounds) travel whole."""
    codec: PowerSgd

    def at_step(self, step: int, steps_per_epoch: int) -> None:
        self.codec.at_step(step)

    def steady_from(self, steps_per_epoch: int) -> int:
        return self.codec.start_iter
