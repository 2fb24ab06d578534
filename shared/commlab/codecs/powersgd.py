"""powersgd<r>: low-rank gradient compression (Vogels et al., NeurIPS 2019; PyTorch's powerSGD_hook).

Each matrix-shaped tensor M (n x m: the first dimension by the rest) is approximated by P Q^T of
rank r, P orthonormal and Q = M^T P, from the previous frame's Q (warm start). The paper and the
hook run power iteration, P = M Q, orthogonalise P, Q = M^T P; a frame runs `power_iters` such
passes over M and keeps every one's P (block Krylov), then takes the best P of their span (see
below). Tensors with one dimension, and matrices too small to gain `min_compression_rate`, travel
whole. The residual M - P Q^T is the error-feedback memory around this codec; in FL (Compression,
codecs/compression.py) the residual carried into the next round is clipped to the new delta's
norm (`residual_clip`), in DDP it is carried whole.

Why several passes per frame: in DDP one warm-started iteration per step is enough (the paper,
the hook), because consecutive gradients are alike and the iterations add up across steps; every
iteration there costs an allreduce, so DDP (ddp/lowrank.py, which does not use `encode`) keeps one.
A frame (an FL upload: one per round) is computed by one sender alone, so more passes cost no
bytes, and the previous frame's Q is a round of training old: one iteration from it leaves the
rank-r approximation of a round delta well short of the best one (its singular values decay
slowly), and FL powersgd2 far below fp32's accuracy.

A frame's pass reads M once (block_krylov): P_k = M U_k and S_k = M^T P_k together, U_0 from the
warm start and U_k from S_k-1 made orthogonal to the units before. M^T P of any P in the span of
P_0 .. P_t-1 is the same combination of S_0 .. S_t-1, so the P of that span with the largest
||M^T P|| (the most energy P Q^T keeps: Rayleigh-Ritz, from one small eigenproblem) and its exact
Q need no further read of M. That span holds the P of t power iterations, so a frame keeps at least
what t iterations keep, and on slowly decaying spectra what more of them keep
(tests/codecs/test_powersgd.py::test_more_passes_keep_more_than_power_iteration_does_with_one_more).
Frames are the same bits for the same input on one machine; P has a zero column for each rank
beyond the directions of M the span holds (above 1 % of its largest).

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
from typing import Any

import numpy as np

from commlab.codecs import indices
from commlab.codecs.base import LOWRANK, Codec, Context, Layout, register
from commlab.codecs.errors import CodecError
from commlab.codecs.krylov import block_krylov
from commlab.codecs.lowrank_kernels import expand, orthogonalize, product, transposed_product
from commlab.codecs.memory import ErrorFeedback
from commlab.codecs.topk import split_sparse

ENTRY = struct.Struct("<QII")  # offset in the flat vector, n, m
POWER_ITERS = 3  # passes over M per frame; see the module docstring
# The error feedback's parameters (ErrorFeedback's decay and clip) by setting. A round-old FL
# residual overshoots: the next round's training re-learns part of what the frame dropped. Carried
# at half its size and at most the new delta's norm, after the codec's two whole rounds
# (start_iter), FL powersgd2 reaches fp32's accuracy after 10 rounds within the half point the
# matrix aims at; rank 2 from round 1 does not (docs/codecs.md names the run). DDP keeps the plain
# residual, one step old, and takes neither parameter.
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
        # power_iters: passes over each matrix per encoded frame (FL uploads); DDP's exchange runs one per step.
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
            p, self.qs[k] = block_krylov(self.view(vec, mat), self.qs[k], self.power_iters)
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
