"""DGC in one process: warm-up, sampled top-k, accumulation, momentum correction/masking,
clipping, checkpoint state, and W simulated workers agreeing with dense momentum SGD."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from commlab.dgc.clipping import clip_local_
from commlab.dgc.compressor import DgcCompressor
from commlab.dgc.memory import DgcMemory
from commlab.dgc.sparsify import sparsify
from commlab.dgc.warmup import Warmup


def test_warmup_paper_schedule_over_steps_and_epochs():
    w = Warmup(final_density=0.001, length=40, unit="steps")
    assert [w.density(s, 100) for s in (0, 9, 10, 20, 30, 39, 40, 10_000)] == \
        [0.25, 0.25, 0.0625, 0.015625, 0.004, 0.004, 0.001, 0.001]
    assert not w.done(39, 100) and w.done(40, 100)
    e = Warmup(final_density=0.001, length=2, unit="epochs")
    assert [e.density(s, 100) for s in (0, 49, 50, 100, 150, 199, 200)] == \
        [0.25, 0.25, 0.0625, 0.015625, 0.004, 0.004, 0.001]
    assert Warmup(final_density=0.01).density(0, 10) == 0.01
    with pytest.raises(ValueError):
        Warmup(unit="rounds")


@pytest.mark.parametrize("density", [0.001, 0.01, 0.1])
def test_sampled_threshold_selects_about_the_target_and_the_largest(density):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(200_000, generator=g) * torch.rand(200_000, generator=g)
    idx = sparsify(x, density, generator=g)
    k = math.ceil(x.numel() * density)
    assert 0.8 * k <= idx.numel() <= 1.3 * k
    assert torch.all(idx[1:] > idx[:-1])
    # Selected entries are the large ones: the smallest kept beats the (1-3*density) quantile.
    assert x.abs()[idx].min() >= torch.quantile(x.abs()[:100_000], 1 - 3 * density)


def test_exact_topk_fallback_when_threshold_is_degenerate():
    x = torch.zeros(50_000)
    x[7] = 5.0
    idx = sparsify(x, 0.001)  # threshold 0 selects everything -> exact top-k
    assert idx.numel() == 50 and 7 in idx.tolist()


def test_accumulation_loses_nothing_and_masking_zeroes_sent_momentum():
    torch.manual_seed(0)
    mem = DgcMemory(momentum=0.9, nesterov=False, masking=True)
    comp = DgcCompressor([("w", torch.Size([100, 50]))], world=1, memory=mem, min_sparse_numel=1,
                         fp16_values=True)
    sent_total = torch.zeros(5000)
    momentum = torch.zeros(5000)
    velocity_without_sending = torch.zeros(5000)
    for step in range(20):
        grad = torch.randn(100, 50)
        before_mmt = mem.momentums.get("w", torch.zeros(100, 50)).clone()
        frame = comp.compress([grad], density=0.01)
        sent = comp.aggregate([frame])[0].reshape(-1)
        sent_total += sent
        nz = sent != 0
        assert torch.all(mem.momentums["w"].reshape(-1)[nz] == 0)  # masking
        kept = ~nz
        expected = (0.9 * before_mmt + grad).reshape(-1)
        assert torch.allclose(mem.momentums["w"].reshape(-1)[kept], expected[kept])
        # Reference: what would accumulate with masking but without any removal of sent values.
        momentum = 0.9 * momentum + grad.reshape(-1)
        velocity_without_sending += momentum
        momentum[nz] = 0
        assert torch.allclose(sent_total + mem.velocities["w"].reshape(-1),
                              velocity_without_sending, atol=1e-4)


def test_simulated_workers_match_dense_momentum_sgd_at_full_density():
    torch.manual_seed(0)
    world, shapes = 3, [("w", torch.Size([40, 30])), ("b", torch.Size([30]))]
    comps = [DgcCompressor(shapes, world, DgcMemory(0.9, nesterov=True, masking=False),
                           min_sparse_numel=1,
                           fp16_values=False, seed=r) for r in range(world)]
    params = [torch.zeros(40, 30), torch.zeros(30)]
    ref = [p.clone().requires_grad_(True) for p in params]
    opt = torch.optim.SGD(ref, lr=0.1, momentum=0.9, nesterov=True)
    for _ in range(5):
        grads = [[torch.randn(40, 30), torch.randn(30)] for _ in range(world)]
        frames = [c.compress(g, density=1.0) for c, g in zip(comps, grads)]
        aggs = [c.aggregate(frames) for c in comps]
        for a in aggs[1:]:
            assert all(torch.equal(x, y) for x, y in zip(aggs[0], a))
        for p, a in zip(params, aggs[0]):
            p.sub_(0.1 * a)
        for r, p in enumerate(ref):
            p.grad = sum(g[r] for g in grads) / world
        opt.step()
    for p, r in zip(params, ref):
        assert torch.allclose(p, r.detach(), atol=1e-5)


def test_biases_and_small_tensors_travel_dense():
    shapes = [("conv", torch.Size([8, 1, 3, 3])), ("fc", torch.Size([64, 64])), ("bias", torch.Size([64]))]
    comp = DgcCompressor(shapes, world=1, memory=DgcMemory(), min_sparse_numel=100)
    assert comp.sparse == {"conv": False, "fc": True, "bias": False}
    assert comp.dense_numel == 72 + 64


def test_local_clipping_scales_by_inverse_sqrt_world():
    grads = [torch.full((4,), 3.0), torch.full((9,), 2.0)]  # joint norm sqrt(36+36)
    norm = clip_local_(grads, max_norm=2.0, world=4)
    assert norm == pytest.approx(math.sqrt(72))
    joint = math.sqrt(sum(float((g ** 2).sum()) for g in grads))
    assert joint == pytest.approx(1.0, rel=1e-4)
    small = [torch.full((4,), 0.1)]
    clip_local_(small, max_norm=2.0, world=4)
    assert torch.equal(small[0], torch.full((4,), 0.1))


def test_state_dict_round_trip_resumes_identically():
    shapes = [("w", torch.Size([50, 40]))]
    a = DgcCompressor(shapes, 1, DgcMemory(0.9), min_sparse_numel=1, seed=3)
    for _ in range(3):
        a.compress([torch.randn(50, 40)], 0.05)
    state = a.state_dict()
    b = DgcCompressor(shapes, 1, DgcMemory(0.5, nesterov=True), min_sparse_numel=1, seed=99)
    b.load_state_dict(state)
    state["memory"]["velocities"]["w"].add_(1.0)  # the loaded copy must not alias the dict
    g = torch.randn(50, 40)
    assert a.compress([g], 0.05) == b.compress([g.clone()], 0.05)
