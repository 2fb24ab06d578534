"""A PowerSGD frame's factors (powersgd.py): passes over a matrix M that read it once each, and the
small eigenproblem that picks the frame's P from all of them (block Krylov with Rayleigh-Ritz).
"""
from __future__ import annotations

import numpy as np

from commlab.codecs.jit import kernel


# A frame's pass reads M once: P = M U and S = M^T P together (each row's dot products, then the
# row times them added to S while the row is still in cache), by blocks of rows that stay in L2
# between the two halves of the pass.
ROW_BLOCK_BYTES = 512 * 1024


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


# A frame keeps every pass's P and S (block Krylov): after t passes from Q, span(P_0 .. P_t-1) is
# M span(Q, M^T M Q, .., (M^T M)^(t-1) Q), and S_k = M^T P_k, so M^T P of any P = W c in that span
# (W = [P_0 .. P_t-1]) is S c, with no further read of M. The frame's P is the orthonormal rank-r P
# of the span with the largest ||M^T P|| (Rayleigh-Ritz: the most energy P Q^T captures, Q = M^T P),
# which the last pass's P alone (power iteration) approaches only as the passes go on. A direction
# of the span (a column of W's part orthogonal to the columns before it) shorter than 1 % of W's
# longest column is left out: S c would amplify float32's rounding of S by the ratio of the two
# lengths, and such a direction holds at most 1e-4 of the largest one's energy.
MIN_DIRECTION_SHARE = 1e-4
_JACOBI_SWEEPS = 60  # cyclic Jacobi converges quadratically: a handful of sweeps, this only a bound


@kernel(fastmath={"reassoc"})
def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """x . y in float64, summed in the order LLVM vectorises."""
    total = 0.0
    for k in range(x.size):
        total += np.float64(x[k]) * y[k]
    return total


@kernel
def _row_grams(rows: np.ndarray, out: np.ndarray) -> None:
    """out (d x d, float64) = rows @ rows.T: every pair of the d rows' dot products."""
    for a in range(rows.shape[0]):
        for b in range(a + 1):
            out[a, b] = out[b, a] = _dot(rows[a], rows[b])


@kernel
def _next_units(x_rows: np.ndarray, basis: np.ndarray, done: int, units: np.ndarray) -> None:
    """units = x_rows made orthogonal to basis[:done] and to each other (Gram-Schmidt, once, in
    float64) and of length 1, also appended to basis; units past x_rows' rows (an odd rank's pair)
    zero. The units only steer the search: P and Q come from the products of the units as stored,
    so neither their rounding nor what one round leaves of their overlap reaches the frame; a unit
    only needs to point somewhere new. A row with nothing left (zero, not finite, or less than 1e-6
    of its length outside the span: float64's rounding of what the span holds) takes the next unit
    vector e_j with something left instead, so a frame whose warm start is zero still searches;
    where the span holds every direction the unit is zero."""
    cols, j = units.shape[1], 0
    row = np.empty(cols)  # apart from basis: LLVM vectorises the loops over a row that aliases no other
    for c in range(units.shape[0]):
        row[:] = 0
        if c < x_rows.shape[0]:
            for k in range(cols):
                row[k] = x_rows[c, k]
        while c < x_rows.shape[0]:
            before = _dot(row, row)
            for b in range(done + c):
                along, unit = _dot(row, basis[b]), basis[b]
                for k in range(cols):
                    row[k] -= along * unit[k]
            after = _dot(row, row)
            if after > 1e-12 * before and after > 0:  # False for NaN
                row /= np.sqrt(after)
                break
            row[:] = 0
            if j == cols:
                break
            row[j] = 1.0
            j += 1
        for k in range(cols):
            basis[done + c, k] = row[k]
            units[c, k] = row[k]


@kernel
def _symmetric_eigen(a: np.ndarray, vectors: np.ndarray) -> None:
    """The eigenvectors of the symmetric float64 matrix ``a`` (overwritten) as the columns of
    ``vectors``, by descending eigenvalue: cyclic Jacobi rotations until the off-diagonal part is
    below float64's rounding of the whole."""
    d = a.shape[0]
    vectors[:] = 0
    for i in range(d):
        vectors[i, i] = 1.0
    for _ in range(_JACOBI_SWEEPS):
        off, total = 0.0, 0.0
        for i in range(d):
            for k in range(d):
                total += a[i, k] * a[i, k]
                off += a[i, k] * a[i, k] if i != k else 0.0
        if not off > 1e-30 * total:
            break
        for p in range(d - 1):
            for q in range(p + 1, d):
                if abs(a[p, q]) <= 1e-18 * np.sqrt(abs(a[p, p] * a[q, q])):  # below rounding: no rotation
                    a[p, q] = a[q, p] = 0.0
                    continue
                theta = (a[q, q] - a[p, p]) / (2 * a[p, q])
                t = (1.0 if theta >= 0 else -1.0) / (abs(theta) + np.sqrt(theta * theta + 1))
                c = 1 / np.sqrt(t * t + 1)
                s = t * c
                for k in range(d):
                    x, y = a[k, p], a[k, q]
                    a[k, p], a[k, q] = c * x - s * y, s * x + c * y
                for k in range(d):
                    x, y = a[p, k], a[q, k]
                    a[p, k], a[q, k] = c * x - s * y, s * x + c * y
                a[p, q] = a[q, p] = 0.0  # what the rotation is for, without its rounding
                for k in range(d):
                    x, y = vectors[k, p], vectors[k, q]
                    vectors[k, p], vectors[k, q] = c * x - s * y, s * x + c * y
    values = np.empty(d)
    for i in range(d):
        values[i] = a[i, i]
    vectors[:] = vectors[:, np.argsort(-values)].copy()


@kernel
def _combine(combine: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
    """out (r x len) = combine.T @ rows (combine d x r, rows d x len), summed in float64."""
    total = np.empty(rows.shape[1])
    for c in range(out.shape[0]):
        total[:] = 0
        for a in range(rows.shape[0]):
            factor = combine[a, c]
            for k in range(total.size):
                total[k] += factor * rows[a, k]
        for k in range(total.size):
            out[c, k] = total[k]


@kernel
def _whitening(gram: np.ndarray, out: np.ndarray) -> None:
    """out = L^-1 for the Cholesky factor L of ``gram`` (G = W^T W = L L^T), so that the columns of
    W L^-T are orthonormal; a column whose part orthogonal to the ones before has a squared length
    below MIN_DIRECTION_SHARE of the longest column's (or not positive) is left out: its row and
    column of out are zero."""
    d = gram.shape[0]
    lower, longest = np.zeros((d, d)), 0.0
    for k in range(d):
        longest = max(longest, gram[k, k])
    for k in range(d):
        pivot = gram[k, k]
        for j in range(k):
            pivot -= lower[k, j] * lower[k, j]
        if not (pivot > MIN_DIRECTION_SHARE * longest and pivot > 0):
            continue
        lower[k, k] = np.sqrt(pivot)
        for i in range(k + 1, d):
            total = gram[i, k]
            for j in range(k):
                total -= lower[i, j] * lower[k, j]
            lower[i, k] = total / lower[k, k]
    out[:] = 0  # L^-1 column by column, forward substitution over the kept rows
    for e in range(d):
        if lower[e, e] == 0:
            continue
        for i in range(e, d):
            if lower[i, i] > 0:
                total = 1.0 if i == e else 0.0
                for j in range(e, i):
                    total -= lower[i, j] * out[j, e]
                out[i, e] = total / lower[i, i]


@kernel
def _ritz_problem(w_rows: np.ndarray, s_rows: np.ndarray, inverse: np.ndarray, small: np.ndarray) -> bool:
    """The frame's small eigenproblem, from w_rows = W^T (d x n) and s_rows = W^T M (d x cols) in
    float64: ``inverse`` = L^-1 (_whitening: W L^-T has orthonormal columns) and ``small`` =
    L^-1 (S^T S) L^-T, whose top r eigenvectors y give the best P = W L^-T y (see above). False
    where W or S is not finite."""
    d = w_rows.shape[0]
    gram, energy = np.empty((d, d)), np.empty((d, d))
    _row_grams(w_rows, gram)
    _row_grams(s_rows, energy)
    if not (np.isfinite(gram).all() and np.isfinite(energy).all()):
        return False
    _whitening(gram, inverse)
    scaled = np.zeros((d, d))  # L^-1 S^T S, then times L^-T
    for a in range(d):
        for y in range(d):
            for x in range(a + 1):
                scaled[a, y] += inverse[a, x] * energy[x, y]
    small[:] = 0
    for a in range(d):
        for b in range(d):
            for y in range(b + 1):
                small[a, b] += scaled[a, y] * inverse[b, y]
    return True


@kernel
def _ritz_factors(inverse: np.ndarray, ritz: np.ndarray, w_rows: np.ndarray, s_rows: np.ndarray,
                  p_rows: np.ndarray, q_rows: np.ndarray) -> None:
    """P^T (p_rows, r x n) and Q^T = (M^T P)^T (q_rows, r x cols) from the small problem's top r
    eigenvectors (ritz's first r columns): P = W L^-T y, Q = S^T L^-T y, summed in float64.
    Columns of P for directions the span lacks (left out by _whitening) are zero."""
    d, r = inverse.shape[0], p_rows.shape[0]
    combine = np.zeros((d, r))  # L^-T y: the combinations of W's columns (and S's rows)
    for c in range(min(r, d)):
        for x in range(d):
            for a in range(x, d):
                combine[x, c] += inverse[a, x] * ritz[a, c]
    _combine(combine, w_rows, p_rows)
    _combine(combine, s_rows, q_rows)


# The eigenproblem's size up to which the kernel solves it (Jacobi), LAPACK's eigh (numpy, a call
# from Python) beyond: Jacobi's sweeps grow with the cube of the size, and past about this size
# (rank 4 at three passes) they take longer than that call.
JACOBI_MAX = 12


@kernel
def _block_krylov(m: np.ndarray, q_rows: np.ndarray, passes: int, block: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """``passes`` passes over m from Q (q_rows: Q^T), each taking the last one's S as its units,
    then the small eigenproblem of every pass's P and S (_ritz_problem). Returns (P^T, W^T, S^T,
    L^-1, the problem, done): done 1 where P^T and q_rows (Q^T, updated) are the frame's already
    (Jacobi, up to JACOBI_MAX), 0 where the problem is left to the caller, -1 where M is not
    finite (P^T and q_rows NaN: factors a decoder refuses)."""
    (n, cols), r = m.shape, q_rows.shape[0]
    width = r + r % 2  # the pass takes its units in pairs
    d = passes * width
    units, basis = np.empty((width, cols), np.float32), np.empty((d, cols))
    pass_p, w_rows = np.empty((n, width), np.float32), np.empty((d, n), np.float32)
    s_rows, p_rows = np.empty((d, cols), np.float32), np.empty((r, n), np.float32)
    for k in range(passes):
        first = k * width
        _next_units(q_rows if k == 0 else s_rows[first - width:first - width + r], basis, first, units)
        _power_pass(m, units, block, pass_p, s_rows[first:first + width])
        w_rows[first:first + width] = pass_p.T
    inverse, small = np.empty((d, d)), np.empty((d, d))
    if not _ritz_problem(w_rows, s_rows, inverse, small):
        p_rows[:] = np.nan
        q_rows[:] = np.nan
        return p_rows, w_rows, s_rows, inverse, small, -1
    if d > JACOBI_MAX:
        return p_rows, w_rows, s_rows, inverse, small, 0
    ritz = np.empty((d, d))
    _symmetric_eigen(small, ritz)
    _ritz_factors(inverse, ritz, w_rows, s_rows, p_rows, q_rows)
    return p_rows, w_rows, s_rows, inverse, small, 1


def block_krylov(m: np.ndarray, q: np.ndarray, passes: int) -> tuple[np.ndarray, np.ndarray]:
    """(P, Q) of a frame: ``passes`` reads of m (n x cols) from the warm start q (cols x r), or
    fewer where their span would hold every direction of m already (r * passes >= min(n, cols)):
    more find nothing and grow the eigenproblem. P (n x r) has orthonormal columns, or zero ones
    past the directions the search found (see MIN_DIRECTION_SHARE), and Q = M^T P (cols x r)."""
    (n, cols), width = m.shape, q.shape[1] + q.shape[1] % 2
    passes = min(passes, -(-min(n, cols) // width))
    q_rows = np.array(q.T, order="C")  # a copy even where q.T is contiguous (r = 1): q is the caller's
    block = max(4, ROW_BLOCK_BYTES // (4 * cols))
    p_rows, w_rows, s_rows, inverse, small, done = _block_krylov(m, q_rows, passes, block)
    if done == 0:
        ritz = np.linalg.eigh(small)[1][:, ::-1]  # ascending there
        _ritz_factors(inverse, np.ascontiguousarray(ritz), w_rows, s_rows, p_rows, q_rows)
    return np.ascontiguousarray(p_rows.T), np.ascontiguousarray(q_rows.T)
