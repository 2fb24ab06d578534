"""DGC through the one compression interface: the dgc codec (sampled top-k, fp16 values, small
tensors dense, self-describing frame), DgcMemory (momentum correction, accumulation, masking, local
clipping), the warm-up schedule, and Compression tying them together as FL and DDP use them."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commlab.codecs import CodecError, DgcMemory, decode_any, get_codec
from commlab.codecs.compression import build_compression
from commlab.codecs.dgc import sampled_topk, sparse_mask, target_count
from commlab.codecs.schedule import Warmup
from decode_checks import decode_only_codec_error
from frame_mutations import mutated

LAYOUT = [("conv", (8, 1, 3, 3)), ("fc", (64, 64)), ("bias", (64,)), ("out", (10, 64))]
NUMEL = sum(math.prod(s) for _, s in LAYOUT)


def test_warmup_paper_schedule_over_steps_and_epochs():
    w = Warmup(0.001, length=4, unit="steps")
    assert [w.density(s, 100) for s in range(6)] == [0.25, 0.0625, 0.015625, 0.004, 0.001, 0.001]
    e = Warmup(0.001, length=1, unit="epochs")
    assert e.density(0, 100) == 0.25 and e.density(30, 100) == 0.0625 and e.density(100, 100) == 0.001
    assert not e.done(99, 100) and e.done(100, 100)
    assert Warmup(0.01).density(0, 10) == 0.01


@pytest.mark.parametrize("density", [0.001, 0.01, 0.1])
def test_sampled_threshold_selects_about_the_target_and_the_largest(density):
    x = np.random.default_rng(0).standard_normal(200_000).astype(np.float32)
    idx = sampled_topk(x, density, 0.01, np.random.default_rng(1))
    k = target_count(x.size, density)
    assert 0.8 * k <= idx.size <= 1.3 * k and np.all(np.diff(idx) > 0)
    assert np.abs(x)[idx].min() >= np.quantile(np.abs(x), 1 - 3 * density)


def test_exact_topk_fallback_when_threshold_is_degenerate():
    x = np.zeros(50_000, np.float32)
    x[7] = 5.0
    idx = sampled_topk(x, 0.001, 0.01, np.random.default_rng(0))  # threshold 0 passes everything
    assert idx.size == 50 and 7 in idx


def test_biases_and_small_tensors_travel_dense_in_fp32():
    assert sparse_mask(LAYOUT, 100).tolist() == [False] * 72 + [True] * 4096 + [False] * 64 + [True] * 640
    codec = get_codec("dgc", layout=LAYOUT, density=0.01, min_sparse_numel=100)
    x = np.random.default_rng(2).standard_normal(NUMEL).astype(np.float32)
    out = decode_any(codec.encode(x), NUMEL)
    dense = ~sparse_mask(LAYOUT, 100)
    assert np.array_equal(out[dense], x[dense])  # fp32, exact
    sent = out[~dense] != 0
    assert 0.8 * (41 + 7) <= sent.sum() <= 1.3 * (41 + 7)  # each tensor its own threshold
    assert np.allclose(out[~dense][sent], x[~dense][sent], rtol=1e-3)  # fp16 values


def test_frame_needs_no_layout_and_wire_size_bounds_it():
    codec = get_codec("dgc", layout=LAYOUT, density=0.05, min_sparse_numel=1)
    for seed in range(5):
        x = np.random.default_rng(seed).standard_normal(NUMEL).astype(np.float32)
        frame = codec.encode(x)
        assert len(frame) <= codec.wire_size(NUMEL)
        assert np.array_equal(get_codec("dgc").decode(frame, NUMEL), decode_any(frame, NUMEL))
    with pytest.raises(CodecError, match="needs the model layout"):
        get_codec("dgc").encode(np.ones(10, np.float32))
    with pytest.raises(CodecError, match="the layout 4872"):
        codec.encode(np.ones(10, np.float32))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_mutated_frames_decode_or_raise_codec_error(data):
    codec = get_codec("dgc", layout=LAYOUT, density=data.draw(st.sampled_from([0.01, 0.5, 1.0])),
                      fp16_values=data.draw(st.booleans()), min_sparse_numel=100)
    frame = codec.encode(np.random.default_rng(data.draw(st.integers(0, 9))).standard_normal(NUMEL).astype(np.float32))
    decode_only_codec_error(mutated(data, frame))


def test_accumulation_loses_nothing_and_masking_zeroes_sent_momentum():
    layout = [("w", (100, 50))]
    comp = build_compression("dgc", {"density": 0.01, "min_sparse_numel": 1, "momentum_masking": "always"},
                             layout, momentum=0.9)
    rng = np.random.default_rng(0)
    sent_total, momentum, without_sending = (np.zeros(5000, np.float32) for _ in range(3))
    for _ in range(20):
        grad = rng.standard_normal(5000).astype(np.float32)
        before = comp.memory.momentums.copy()
        frame, compensated = comp.compress(grad)
        sent = decode_any(frame, 5000)
        comp.remember(compensated, sent)
        sent_total += sent
        nz = sent != 0
        assert np.all(comp.memory.momentums[nz] == 0)  # masking
        assert np.allclose(comp.memory.momentums[~nz], (0.9 * before + grad)[~nz])
        # Reference: what would accumulate with masking but without any removal of sent values.
        momentum = 0.9 * momentum + grad
        without_sending += momentum
        momentum[nz] = 0
        assert np.allclose(sent_total + comp.memory.velocities, without_sending, atol=1e-4)


def test_simulated_workers_match_dense_momentum_sgd_at_full_density():
    """DGC at density 1 with fp32 values and no masking is exactly momentum SGD on the average."""
    world, layout, lr = 3, [("w", (40, 30)), ("b", (30,))], 0.1
    comps = [build_compression("dgc", {"density": 1.0, "fp16_values": False, "min_sparse_numel": 1,
                                       "momentum_masking": "never"}, layout, momentum=0.9, nesterov=True, seed=r)
             for r in range(world)]
    rng = np.random.default_rng(0)
    params, ref, velocity = np.zeros(1230), np.zeros(1230), np.zeros(1230)
    for _ in range(5):
        grads = [rng.standard_normal(1230).astype(np.float32) for _ in range(world)]
        frames = [c.compress(g) for c, g in zip(comps, grads)]
        for c, (frame, compensated) in zip(comps, frames):
            c.remember(compensated, decode_any(frame))
        params -= lr * sum(decode_any(f) for f, _ in frames) / world
        mean = sum(grads) / world  # torch's nesterov SGD: v = m v + g; step = g + m v
        velocity = 0.9 * velocity + mean
        ref -= lr * (mean + 0.9 * velocity)
    assert np.allclose(params, ref, atol=1e-5)


def test_local_clipping_of_a_rank_mean_gradient_is_at_clip_norm_times_sqrt_world():
    """Each rank's memory gets its own mean gradient g_k and the ranks average: the paper's
    clip_norm/sqrt(N) on the share g_k/N of a sum is clip_norm*sqrt(N) on g_k."""
    mem = DgcMemory(np.ones(13, bool), momentum=0.0, clip_norm=2.0, world=4)
    grad = np.concatenate([np.full(4, 3.0), np.full(9, 2.0)]).astype(np.float32)  # norm sqrt(72)
    assert np.linalg.norm(mem.compensate(grad)) == pytest.approx(4.0, rel=1e-4)
    small = DgcMemory(np.ones(4, bool), momentum=0.0, clip_norm=2.0, world=4)
    assert np.array_equal(small.compensate(np.full(4, 0.1, np.float32)), np.full(4, 0.1, np.float32))


def test_locally_clipped_average_has_the_norm_vanilla_clipping_gives():
    """Noise-dominated gradients of W ranks, each far above the limit: the average of the locally
    clipped ones has about clip_norm, the norm clipping the average itself would give (the paper's
    intent). Clipping each at clip_norm/sqrt(W) left the average at about clip_norm/W."""
    world, clip, n = 9, 1.0, 20000
    rng = np.random.default_rng(0)
    mems = [DgcMemory(np.ones(n, bool), momentum=0.0, clip_norm=clip, world=world) for _ in range(world)]
    mean = sum(m.compensate(50 * rng.standard_normal(n).astype(np.float32)) for m in mems) / world
    assert np.linalg.norm(mean) == pytest.approx(clip, rel=0.05)


def test_masking_starts_after_warmup_by_default():
    comp = build_compression("dgc", {"density": 0.001, "warmup_length": 4, "warmup_unit": "steps"},
                             [("w", (100, 100))], momentum=0.9)
    comp.at_step(0, 10)
    assert comp.codec.density == 0.25 and comp.memory.masking is False
    comp.at_step(4, 10)
    assert comp.codec.density == 0.001 and comp.memory.masking is True


def test_state_dict_round_trip_resumes_identically():
    layout, params = [("w", (50, 40))], {"density": 0.05, "min_sparse_numel": 1}
    a = build_compression("dgc", params, layout, momentum=0.9, seed=3)
    rng = np.random.default_rng(0)
    for _ in range(3):
        frame, compensated = a.compress(rng.standard_normal(2000).astype(np.float32))
        a.remember(compensated, decode_any(frame))
    state = a.state_dict()
    b = build_compression("dgc", params, layout, momentum=0.9, seed=99)
    b.load_state_dict(state)
    state["memory"]["velocities"] += 1.0  # the loaded copy must not alias the dict
    g = rng.standard_normal(2000).astype(np.float32)
    assert a.compress(g)[0] == b.compress(g.copy())[0]


@pytest.mark.parametrize("params, message", [
    ({"momentum_masking": "sometimes"}, "momentum_masking must be one of"),
    ({"density": 0}, "density and sample_ratio must be in"),
    ({"bogus": 1}, "unknown parameters"),
    ({"warmup_unit": "days"}, "warm-up unit"),
])
def test_bad_parameters_are_one_line_codec_errors(params, message):
    with pytest.raises(CodecError, match=message):
        build_compression("dgc", params, LAYOUT)
