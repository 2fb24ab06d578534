"""powersgd<r>: the codec against a few lines of float reference, warm start, exact wire size,
untrusted frames, and the DDP exchange's two allreduces against the same reference."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commlab.codecs import CodecError, ErrorFeedback, decode_any, get_codec
from commlab.codecs.compression import Compression, build_compression
from commlab.codecs import krylov
from commlab.codecs.krylov import block_krylov
from commlab.codecs.lowrank_kernels import expand, orthogonalize, product, transposed_product
from commlab.codecs.powersgd import plan
from commlab.ddp.config import TrainingSection
from commlab.ddp.lowrank import LowRankAllreduce
from commlab.runs.seeds import SeedTree
from decode_checks import decode_only_codec_error

LAYOUT = [("conv", (16, 3, 3, 3)), ("conv.bias", (16,)), ("fc", (64, 48)), ("tiny", (2, 2)), ("out", (10, 64))]
NUMEL = sum(math.prod(s) for _, s in LAYOUT)


def reference_step(m: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PowerSGD's power iteration as the paper writes it: P = M Q, orthogonalise, Q = M^T P."""
    p, _ = np.linalg.qr(m.astype(np.float64) @ q)
    q_new = m.T.astype(np.float64) @ p
    return p @ q_new.T, q_new


def reference_frame(m: np.ndarray, q: np.ndarray, passes: int) -> tuple[np.ndarray, np.ndarray]:
    """A frame's factors as the maths writes them, in float64: the orthonormal rank-r P in the span
    of M Q, M (M^T M) Q, .. (``passes`` blocks) with the largest ||M^T P||, and Q = M^T P."""
    m = m.astype(np.float64)
    blocks = [np.linalg.qr(q.astype(np.float64))[0]]
    for _ in range(passes - 1):  # each block orthogonal to the ones before: the span, well conditioned
        nxt = m.T @ (m @ blocks[-1])
        for b in blocks:
            nxt -= b @ (b.T @ nxt)
        blocks.append(np.linalg.qr(nxt)[0])
    span = np.linalg.qr(m @ np.hstack(blocks))[0]
    top = np.linalg.svd(span.T @ m, full_matrices=False)[0][:, :q.shape[1]]
    p = span @ top
    return p, m.T @ p


def captured(m: np.ndarray, p: np.ndarray, q: np.ndarray) -> float:
    """The energy P Q^T keeps of M: ||M||^2 - ||M - P Q^T||^2."""
    m = m.astype(np.float64)
    return float((m ** 2).sum() - ((m - p.astype(np.float64) @ q.T.astype(np.float64)) ** 2).sum())


def test_plan_compresses_matrices_that_gain_and_sends_the_rest_whole():
    matrices, dense = plan(LAYOUT, rank=2, min_compression_rate=2)
    assert [(m.n, m.m) for m in matrices] == [(16, 27), (64, 48), (10, 64)]  # 2x2 gains nothing
    assert dense.tolist() == list(range(432, 448)) + list(range(432 + 16 + 3072, 432 + 16 + 3072 + 4))


@pytest.mark.parametrize("iters", [1, 3])
def test_codec_matches_the_float_reference_and_keeps_the_rest_exact(iters):
    codec = get_codec("powersgd2", layout=LAYOUT, seed=1, power_iters=iters)
    x = np.random.default_rng(0).standard_normal(NUMEL).astype(np.float32)
    q0 = [q.copy() for q in codec.qs]
    out = decode_any(codec.encode(x), NUMEL)
    for mat, q in zip(codec.matrices, q0):
        m = codec.view(x, mat)
        p_want, q_want = reference_frame(m, q, iters)
        assert np.allclose(codec.view(out, mat), p_want @ q_want.T, atol=1e-4)
        q = codec.qs[codec.matrices.index(mat)]  # the warm start, up to each column's sign
        assert np.allclose(q * np.sign((q * q_want).sum(axis=0)), q_want, atol=1e-4)
    assert np.array_equal(out[codec.dense_idx], x[codec.dense_idx])


def test_warm_start_recovers_a_low_rank_matrix():
    rng = np.random.default_rng(3)
    layout = [("w", (60, 40))]
    low = (rng.standard_normal((60, 2)) @ rng.standard_normal((2, 40))).astype(np.float32).ravel()
    codec = get_codec("powersgd", layout=layout)  # rank 2 by default
    for _ in range(3):
        out = decode_any(codec.encode(low), low.size)
    assert np.allclose(out, low, atol=1e-3)


def test_one_frame_is_close_to_the_best_rank_r_approximation():
    """An FL upload is one frame per round, computed by the client alone: the frame runs several
    power iterations (free on the wire), so a single encode of a fresh matrix, from a random Q,
    captures about as much of it as the best rank-r approximation (SVD). One iteration, as a
    DDP step runs, fell well short (here 0.76 of the best energy)."""
    rng = np.random.default_rng(4)
    u, _ = np.linalg.qr(rng.standard_normal((60, 12)))
    v, _ = np.linalg.qr(rng.standard_normal((40, 12)))
    s = np.array([1.0, 0.9, 0.55, 0.5, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15, 0.1])  # slow decay, as round deltas
    m = ((u * s) @ v.T).astype(np.float32)
    best = (s[:2] ** 2).sum()
    codec = get_codec("powersgd2", layout=[("w", (60, 40))], seed=2)
    out = decode_any(codec.encode(m.ravel()), m.size).reshape(m.shape)
    captured = (s ** 2).sum() - np.linalg.norm(m - out) ** 2  # ||M||^2 - ||M - P Q^T||^2, P orthonormal
    assert captured >= 0.97 * best
    one = get_codec("powersgd2", layout=[("w", (60, 40))], seed=2, power_iters=1)
    out1 = decode_any(one.encode(m.ravel()), m.size).reshape(m.shape)
    assert (s ** 2).sum() - np.linalg.norm(m - out1) ** 2 < captured


def householder_iterations(m: np.ndarray, q: np.ndarray, iters: int) -> tuple[np.ndarray, np.ndarray]:
    """The power iteration as DDP runs it: P = M Q, Householder QR, Q = M^T P (two reads of M)."""
    for _ in range(iters):
        p = orthogonalize(product(m, q))
        q = transposed_product(m, p)
    return p, q


def spectrum_matrix(rng, n: int, m: int, singular: list[float]) -> np.ndarray:
    u, _ = np.linalg.qr(rng.standard_normal((n, len(singular))))
    v, _ = np.linalg.qr(rng.standard_normal((m, len(singular))))
    return ((u * singular) @ v.T).astype(np.float32)


MATRICES = {  # shapes past a row block, rows not a multiple of four, a spectrum from flat to one direction
    "random": lambda rng: rng.standard_normal((203, 70)).astype(np.float32),
    "wide": lambda rng: rng.standard_normal((37, 1100)).astype(np.float32),
    "tall": lambda rng: rng.standard_normal((2000, 9)).astype(np.float32),
    "low_rank": lambda rng: spectrum_matrix(rng, 90, 60, [3.0, 2.0, 1.0]),
    "decaying": lambda rng: spectrum_matrix(rng, 90, 60, [1.0, 0.9, 0.55, 0.5, 0.3, 0.1]),
    "one_direction": lambda rng: spectrum_matrix(rng, 90, 60, [1.0, 1e-4, 1e-5]),
}


@pytest.mark.parametrize("name", sorted(MATRICES))
@pytest.mark.parametrize("rank", [1, 2, 3, 7])  # 7: an eigenproblem past JACOBI_MAX, solved by LAPACK
@pytest.mark.parametrize("passes", [1, 3])
def test_block_krylov_matches_the_float64_maths(name, rank, passes):
    """One read of M per pass, every pass's P and S kept, the best P of their span (Rayleigh-Ritz)
    against the maths in float64: P orthonormal (but for zero columns where M has no direction of
    1 % of its largest left), Q = M^T P, the energy the reference keeps; and at least what as many
    power iterations keep (whose P lies in the same span)."""
    rng = np.random.default_rng(rank * 10 + passes)
    m = MATRICES[name](rng)
    q0 = rng.standard_normal((m.shape[1], rank)).astype(np.float32)
    p, q = block_krylov(m, q0, passes)
    assert p.dtype == q.dtype == np.float32 and p.shape == (m.shape[0], rank) and q.shape == q0.shape
    scale = float(np.linalg.norm(m)) ** 2
    used = np.abs(p).sum(axis=0) > 0  # all but where M has no further direction of 1 % of its first
    singular = np.linalg.svd(m.astype(np.float64), compute_uv=False)
    assert used.sum() >= min(rank, (singular > 1e-2 * singular[0]).sum())
    assert np.abs(p[:, used].T.astype(np.float64) @ p[:, used] - np.eye(used.sum())).max() < 1e-5
    assert np.abs(m.T.astype(np.float64) @ p - q).max() <= 1e-5 * np.sqrt(scale)
    want = captured(m, *reference_frame(m, q0, passes))
    assert abs(captured(m, p, q) - want) <= 1e-5 * scale
    assert captured(m, p, q) >= captured(m, *householder_iterations(m, q0, passes)) - 1e-5 * scale


def test_more_passes_keep_more_than_power_iteration_does_with_one_more():
    """The span of every pass's P holds the last one's: three passes keep at least what four power
    iterations keep, on a slowly decaying spectrum such as a round delta's."""
    rng = np.random.default_rng(6)
    m = spectrum_matrix(rng, 300, 200, [1.0, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3])
    q0 = rng.standard_normal((200, 2)).astype(np.float32)
    assert captured(m, *block_krylov(m, q0, 3)) > captured(m, *householder_iterations(m, q0, 4))


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_block_krylov_on_rank_deficient_and_zero_matrices(rank):
    """Directions the span lacks leave zero columns of P (and Q) rather than noise: the non-zero
    columns are orthonormal, P Q^T recovers a rank-1 matrix, and a zero matrix gives P = Q = 0; a
    zero warm start still searches (from unit vectors)."""
    rng = np.random.default_rng(rank)
    one = (rng.standard_normal((50, 1)) @ rng.standard_normal((1, 30))).astype(np.float32)
    for m in (one, np.zeros((50, 30), np.float32)):
        for q0 in (rng.standard_normal((30, rank)).astype(np.float32), np.zeros((30, rank), np.float32)):
            p, q = block_krylov(m, q0, 3)
            used = np.abs(p).sum(axis=0) > 0
            assert np.allclose(p[:, used].T @ p[:, used], np.eye(used.sum()), atol=1e-5)
            assert not q[:, ~used].any() and np.isfinite(q).all()
            assert np.allclose(p @ q.T, m, atol=1e-5 * max(1.0, float(np.abs(m).max())))
    assert not block_krylov(np.zeros((50, 30), np.float32), q0, 3)[0].any()


def test_block_krylov_is_deterministic_and_a_warm_start_keeps_at_least_as_much():
    """Same input, same bits (FL runs compare model hashes); a frame from the last frame's Q keeps
    at least what that frame kept."""
    rng = np.random.default_rng(5)
    m = MATRICES["decaying"](rng)
    q0 = rng.standard_normal((60, 2)).astype(np.float32)
    p, q = block_krylov(m, q0, 3)
    again = block_krylov(m.copy(), q0.copy(), 3)
    assert np.array_equal(p, again[0]) and np.array_equal(q, again[1])
    assert captured(m, *block_krylov(m, q, 3)) >= captured(m, p, q) - 1e-6 * float(np.linalg.norm(m)) ** 2


def test_passes_past_the_whole_span_are_not_run_and_give_the_best_factors(monkeypatch):
    """power_iters up to 64: on a 20 x 10 matrix five passes of rank 2 span every direction, so
    five run, and the frame is the best rank-2 approximation (SVD)."""
    run, kernel = [], krylov._block_krylov
    monkeypatch.setattr(krylov, "_block_krylov", lambda m, q, passes, block: run.append(passes) or
                        kernel(m, q, passes, block))
    rng = np.random.default_rng(7)
    m = rng.standard_normal((20, 10)).astype(np.float32)
    p, q = block_krylov(m, rng.standard_normal((10, 2)).astype(np.float32), 64)
    singular = np.linalg.svd(m.astype(np.float64), compute_uv=False)
    assert run == [5]
    assert abs(captured(m, p, q) - (singular[:2] ** 2).sum()) <= 1e-5 * (singular ** 2).sum()


def test_a_non_finite_matrix_gives_factors_a_decoder_refuses():
    m = np.ones((20, 10), np.float32)
    m[3, 4] = np.nan
    p, q = block_krylov(m, np.ones((10, 2), np.float32), 3)
    assert np.isnan(p).all() and np.isnan(q).all()
    codec = get_codec("powersgd2", layout=[("w", (20, 10))])
    codec.at_step(codec.start_iter)
    with pytest.raises(CodecError, match="not finite"):
        decode_any(codec.encode(m.ravel()), m.size)


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
def test_expand_writes_p_q_transposed_and_flags_what_is_not_finite(rank):
    rng = np.random.default_rng(rank)
    p, q = rng.standard_normal((7, rank)).astype(np.float32), rng.standard_normal((5, rank)).astype(np.float32)
    out = np.full((7, 5), np.nan, np.float32)
    assert expand(p, q, out)
    assert np.allclose(out, p.astype(np.float64) @ q.T, atol=1e-6)
    p[3, rank - 1] = np.float32(3e38)
    with np.errstate(all="ignore"):
        assert not expand(p, q * np.float32(1e3), out)


def test_power_iters_is_checked():
    with pytest.raises(CodecError, match="power_iters"):
        get_codec("powersgd2", layout=LAYOUT, power_iters=0)


@pytest.mark.parametrize("rank", [1, 2, 4])
def test_wire_size_is_exact(rank):
    codec = get_codec(f"powersgd{rank}", layout=LAYOUT)
    frame = codec.encode(np.ones(NUMEL, np.float32))
    assert len(frame) == codec.wire_size(NUMEL)
    assert len(frame) < (0.15 if rank <= 2 else 0.3) * 4 * NUMEL


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 12), st.integers(1, 12), st.booleans()), min_size=1, max_size=4),
       st.integers(0, 2**32 - 1), st.integers(1, 3))
def test_round_trip_any_layout(shapes, seed, rank):
    layout = [(f"t{i}", (n, m) if two else (n,)) for i, (n, m, two) in enumerate(shapes)]
    numel = sum(math.prod(s) for _, s in layout)
    codec = get_codec("powersgd", layout=layout, rank=rank, min_compression_rate=1)
    x = (np.random.default_rng(seed).standard_normal(numel) * 1e3).astype(np.float32)
    frame = codec.encode(x)
    out = decode_any(frame, numel)
    assert len(frame) == codec.wire_size(numel) and out.shape == (numel,) and np.isfinite(out).all()
    assert np.array_equal(out[codec.dense_idx], x[codec.dense_idx])


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_mutated_frames_decode_or_raise_codec_error(data):
    codec = get_codec("powersgd2", layout=LAYOUT)
    buf = bytearray(codec.encode(np.random.default_rng(data.draw(st.integers(0, 9))).standard_normal(NUMEL)
                                 .astype(np.float32)))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(buf) - 1))
        if data.draw(st.booleans()):
            buf[pos] ^= 1 << data.draw(st.integers(0, 7))
        else:
            del buf[pos:pos + data.draw(st.integers(1, 8))]
    decode_only_codec_error(bytes(buf))


def test_state_round_trip_through_compression():
    a = build_compression("powersgd2", {}, LAYOUT, seed=5)
    x = np.random.default_rng(1).standard_normal(NUMEL).astype(np.float32)
    a.encode(x)
    b = build_compression("powersgd2", {}, LAYOUT, seed=6)
    b.load_state_dict(a.state_dict())
    assert a.encode(x) == b.encode(x)


def test_fl_rounds_before_start_iter_send_the_whole_vector_then_low_rank():
    comp = build_compression("powersgd2", {"start_iter": 2}, LAYOUT, seed=3)
    x = np.random.default_rng(2).standard_normal(NUMEL).astype(np.float32)
    whole = [comp.encode(x) for _ in range(2)]
    assert all(np.array_equal(decode_any(f, NUMEL), x) for f in whole)  # exact, so no residual either
    assert len(whole[0]) - get_codec("fp32").wire_size(NUMEL) <= comp.codec.params_struct.size  # no index bytes
    low_rank = comp.encode(x)
    assert len(low_rank) < 0.15 * len(whole[0]) and len(low_rank) == comp.codec.wire_size(NUMEL)
    resumed = build_compression("powersgd2", {"start_iter": 2}, LAYOUT, seed=3)
    resumed.load_state_dict(build_compression("powersgd2", {"start_iter": 2}, LAYOUT, seed=3).state_dict())
    assert resumed.encode(x) == whole[0]  # a fresh state is round 0 again


def test_a_whole_frame_with_index_bytes_is_rejected():
    codec = get_codec("powersgd2", layout=LAYOUT, start_iter=1)
    codec.at_step(0)
    frame = bytearray(codec.encode(np.ones(NUMEL, np.float32)))
    params = codec.params_struct.pack(0, 2, NUMEL, 0, 8)  # claims 8 index bytes that are not there
    start = frame.index(codec.params_struct.pack(0, 2, NUMEL, 0, 0))
    frame[start:start + len(params)] = params
    with pytest.raises(CodecError):
        codec.decode(bytes(frame), NUMEL)



def test_error_feedback_decay_and_clip_bound_the_carried_residual():
    """decay keeps that share of the residual; clip then scales it to at most clip x the new
    vector's norm; the defaults carry it whole (EF-SGD, as DDP)."""
    residual = np.array([3.0, 4.0, 0.0], np.float32)  # norm 5
    vec = np.array([0.0, 0.0, 2.0], np.float32)        # norm 2

    def carried(**kw) -> np.ndarray:
        ef = ErrorFeedback(**kw)
        ef.update(residual, np.zeros(3, np.float32))
        return ef.compensate(vec) - vec

    assert np.array_equal(carried(), residual)
    assert np.allclose(carried(decay=0.5), residual * 0.5)
    assert np.allclose(carried(clip=1.0), residual * 2 / 5)               # 5 > 1 x 2: scaled to norm 2
    assert np.allclose(carried(decay=0.2, clip=1.0), residual * 0.2)      # norm 1 <= 2: untouched
    assert np.array_equal(carried(clip=3.0), residual)                     # 5 <= 6
    assert np.array_equal(ErrorFeedback(clip=1.0).compensate(vec), vec)   # nothing carried yet
    for bad in ({"decay": 1.5}, {"decay": -0.1}, {"clip": -1.0}, {"clip": "x"}):
        with pytest.raises(CodecError):
            ErrorFeedback(**bad)


def test_fl_powersgd_defaults_two_whole_rounds_then_half_the_residual_at_most_the_deltas_norm():
    """FL defaults: the hook's least start_iter (2 whole rounds, no residual), then each frame
    encodes the new delta plus half the last residual, clipped to the delta's norm
    (PowerSgd.node_params); the plain residual stays one parameter away."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(NUMEL).astype(np.float32)
    comp = build_compression("powersgd2", {}, LAYOUT)
    assert (comp.codec.start_iter, comp.memory.decay, comp.memory.clip) == (2, 0.5, 1.0)
    assert [np.array_equal(decode_any(comp.encode(x), NUMEL), x) for _ in range(2)] == [True, True]
    assert not comp.memory.residual.any()  # whole frames drop nothing
    comp.encode(x * np.float32(10.0))
    residual, state = comp.memory.residual.copy(), comp.state_dict()
    assert residual.any()

    def twin() -> Compression:  # the same codec state (warm start) and residual, carried whole
        other = build_compression("powersgd2", {"residual_clip": None, "residual_decay": 1.0}, LAYOUT)
        other.load_state_dict(state)
        return other

    half = residual * np.float32(0.5)
    for scale in (10.0, 1.0):  # half the residual: clipped to the delta's norm / within it
        comp.load_state_dict(state)
        new = rng.standard_normal(NUMEL).astype(np.float32) * np.float32(scale)
        norm, limit = float(np.linalg.norm(half)), float(np.linalg.norm(new))
        carried = half * np.float32(limit / norm) if norm > limit else half
        assert (norm > limit) == (scale == 1.0)  # so both bounds are checked
        assert comp.encode(new) == twin().codec.encode(new + carried)
    assert twin().encode(new) == twin().codec.encode(new + residual)  # decay 1, no clip: EF-SGD


def test_residual_parameters_belong_to_fl_powersgd_memory():
    comp = build_compression("powersgd2", {"residual_decay": 0.5, "residual_clip": 2, "start_iter": 1}, LAYOUT)
    assert (comp.memory.decay, comp.memory.clip, comp.codec.start_iter) == (0.5, 2.0, 1)
    with pytest.raises(CodecError):
        build_compression("powersgd2", {"residual_decay": 2}, LAYOUT)
    with pytest.raises(CodecError):  # other codecs keep the plain residual and have no such parameter
        build_compression("fp32_sparse", {"residual_clip": 1.0}, LAYOUT)
    assert build_compression("fp32_sparse", {}, LAYOUT).memory.clip is None
    with pytest.raises(CodecError):  # nor has the DDP exchange (ddp/lowrank.py): its residual is a step old
        lowrank_exchange(Model(np.zeros(NUMEL, np.float32)), TrainingSection(), {"residual_clip": 1.0})


def lowrank_exchange(model, training, params, group=None, seeds: SeedTree = SeedTree()) -> LowRankAllreduce:
    """The DDP exchange of powersgd2 as a worker builds it (ddp/train.py build_exchange)."""
    compression = build_compression("powersgd2", params, LAYOUT, setting="ddp", run_seed=seeds.codec_shared)
    return LowRankAllreduce(group or InProcessGroup(), model, training, compression, steps_per_epoch=10)


class InProcessGroup:
    """A world of one: allreduce returns its input, so the exchange's maths can be checked alone."""
    world, rank = 1, 0

    def __init__(self):
        self.calls = []

    def allreduce(self, key, vec, op="mean"):
        self.calls.append((key, vec.size))
        return vec.copy()


class Model:
    """Just what the exchange touches: parameters with .grad, in layout order."""

    def __init__(self, grad: np.ndarray):
        import torch
        self.params = [torch.nn.Parameter(torch.zeros(s)) for _, s in LAYOUT]
        self.load(grad)

    def load(self, grad):
        import torch
        pos = 0
        for p in self.params:
            p.grad = torch.from_numpy(grad[pos:pos + p.numel()].copy()).view(p.shape)
            pos += p.numel()

    def parameters(self):
        return iter(self.params)

    def named_parameters(self):
        return iter(zip((n for n, _ in LAYOUT), self.params))

    def grad(self):
        return np.concatenate([p.grad.numpy().ravel() for p in self.params])


def test_ddp_exchange_is_two_small_allreduces_with_error_feedback():
    rng = np.random.default_rng(0)
    model, group = Model(np.zeros(NUMEL, np.float32)), InProcessGroup()
    exchange = lowrank_exchange(model, TrainingSection(), {"start_iter": 1}, group)
    applied, raw_total = np.zeros(NUMEL), np.zeros(NUMEL)
    for step in range(4):
        g = rng.standard_normal(NUMEL).astype(np.float32)
        raw_total += g
        model.load(g)
        qs = [q.copy() for q in exchange.codec.qs]
        exchange.exchange(step)
        out = model.grad()
        applied += out
        if step == 0:  # start_iter: one plain dense allreduce first
            assert group.calls[-1] == ("0/powersgd2/dense", NUMEL) and np.array_equal(out, g)
            continue
        m = out + exchange.memory.residual  # the compensated M: what was applied plus what was kept
        for mat, q in zip(exchange.codec.matrices, qs):
            want, _ = reference_step(exchange.codec.view(m, mat), q)
            assert np.allclose(exchange.codec.view(out, mat), want, atol=1e-3)
    sizes = [n for key, n in group.calls if not key.endswith("dense")]
    assert max(sizes) < NUMEL / 10  # each allreduce is small
    assert np.allclose(applied + exchange.memory.residual, raw_total, atol=1e-3)  # nothing lost
    assert np.array_equal(orthogonalize(np.eye(3, 2, dtype=np.float32)), np.eye(3, 2, dtype=np.float32))


def test_ddp_exchange_state_survives_a_weights_only_checkpoint(tmp_path):
    import torch
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal(NUMEL).astype(np.float32) for _ in range(3)]
    model = Model(grads[0])
    a = lowrank_exchange(model, TrainingSection(), {})
    for g in grads[:2]:
        model.load(g)
        a.exchange(0)
    torch.save(a.state_dict(), tmp_path / "state.pt")
    b = lowrank_exchange(Model(grads[0]), TrainingSection(), {}, seeds=SeedTree(7))
    b.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=True))
    outs = []
    for exchange in (a, b):
        model = Model(grads[2])
        exchange.model = model  # the exchange reads and writes .grad only
        exchange.exchange(1)
        outs.append(model.grad())
    assert np.array_equal(outs[0], outs[1])
