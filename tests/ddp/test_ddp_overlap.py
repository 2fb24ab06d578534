"""The dense ring allreduce overlapped with backward (commlab.ddp.overlap): the flat vector the hooks
fill is flatten_grads' to the bit, a failed backward releases the ring, the ring's error reaches the
training thread, and the worker's steps train the same models with and without overlap."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from commlab.codecs import build_compression
from commlab.dds import DdsError, DdsNode, DdsSettings, Group, PeerLost
from commlab.ddp.config import TrainingSection
from commlab.ddp.dense import DenseAllreduce
from commlab.ddp.overlap import Pending, Reducer
from commlab.ddp.train import train_step
from commlab.models import build_model, flatten_grads, flatten_params, layout_of, weights_digest
from commlab.models.train_step import cross_entropy_step
from spawned_ranks import run_ranks

WORLD, STEPS = 2, 3


def small_model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    model.add_module("unused", nn.Linear(2, 2))  # never in the graph: its gradient is None
    return model


def backward(model: nn.Module) -> None:
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    model[2](model[1](model[0](x))).square().mean().backward()


def test_the_flat_vector_is_flatten_grads_to_the_bit():
    model = small_model()
    reducer = Reducer(model)
    for flat in reducer.flats:
        flat[:] = np.nan  # what the hooks and the unused parameter's zeros must overwrite
    with reducer.filling():
        backward(model)
    assert reducer.ready(0, reducer.flat.size)
    expected = flatten_grads(model)
    assert reducer.flat.tobytes() == expected.tobytes() and not expected[-6:].any()


def test_steps_take_turns_with_two_vectors_so_a_step_leaves_the_last_ones_values_alone():
    """The ring keeps step k's vector for a resend until step k+1's allreduce has finished
    (Group.allreduce_async kept): step k+1 must fill the other one."""
    model = small_model()
    reducer = Reducer(model)
    filled = []
    for step in range(3):
        model.zero_grad()
        with reducer.filling():
            backward(model)
        filled.append(reducer.flat)
        if step == 1:  # step 0's values are still there while step 1's vector is in use
            assert filled[0].tobytes() == flatten_grads(model).tobytes()
            assert not np.shares_memory(filled[0], filled[1])
    assert filled[2] is filled[0]


def test_the_last_layer_is_in_before_backward_reaches_the_first():
    model = small_model()
    reducer = Reducer(model)
    seen: list[list[bool]] = []
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    hidden = model[0](x)
    hidden.register_hook(lambda grad: seen.append(list(reducer._in)))  # between the two layers' backward
    with reducer.filling():
        model[2](model[1](hidden)).square().mean().backward()
    assert seen == [[False, False, True, True, False, False]]  # layer 2's weight and bias, not layer 0's


def test_hooks_copy_only_while_filling():
    model = small_model()
    reducer = Reducer(model)
    reducer.flat[:] = 7.0
    backward(model)  # a backward outside filling() leaves the vector alone
    assert (reducer.flat == 7.0).all()


def test_a_ring_waits_for_the_blocks_values_and_learns_when_backward_failed():
    model = small_model()
    reducer = Reducer(model)
    layer2 = reducer.starts[2], reducer.starts[4]  # model[2]'s weight and bias
    with pytest.raises(ZeroDivisionError):
        with reducer.filling():
            assert not reducer.ready(*layer2) and not reducer.ready(0, reducer.flat.size)
            raise ZeroDivisionError("in backward")
    with pytest.raises(DdsError, match="^allreduce stopped waiting for this rank's gradients: backward failed: "
                                       "ZeroDivisionError: in backward$"):
        reducer.ready(*layer2)


def test_pending_raises_the_rings_error_in_the_callers_thread():
    lost = PeerLost([2], "ddp", "5/grads", "its node is gone (lease expired or left)")

    def ring() -> np.ndarray:
        raise lost
    with pytest.raises(PeerLost) as caught:
        Pending(ring).result()
    assert caught.value is lost
    assert Pending(lambda: np.ones(3, dtype=np.float32)).result().tolist() == [1.0, 1.0, 1.0]


def _rank(domain: int, rank: int, q) -> None:
    """Three steps of the worker's train_step on mnist_cnn and random batches (this rank's own), once
    with overlap and once without, each in a group of its own; the model digests and compress times."""
    torch.set_num_threads(1)
    rng = np.random.default_rng(rank)
    data = SimpleNamespace(train_x=rng.standard_normal((STEPS * 8, 1, 28, 28)).astype(np.float32),
                           train_y=rng.integers(0, 10, STEPS * 8))
    settings = DdsSettings(domain_id=domain, write_timeout_s=20.0, chunk_bytes=64 * 1024, ring_block_bytes=64 * 1024)
    with DdsNode(f"worker-{rank}", settings) as node:
        groups = {overlap: Group(node, f"overlap-{overlap}", rank, WORLD, timeout_s=30.0) for overlap in (True, False)}
        for g in groups.values():
            g.barrier(60)
        out = {}
        for overlap, g in groups.items():
            model = build_model("mnist_cnn", seed=0)
            compression = build_compression("dense", {}, layout_of(model), setting="ddp", world=WORLD)
            exchange = DenseAllreduce(g, model, TrainingSection(collective="ring", overlap=overlap), compression, STEPS)
            rows = [train_step(model, exchange, node, data, np.arange(8 * s, 8 * s + 8), s, 0, rank,
                               cross_entropy_step) for s in range(STEPS)]
            out[overlap] = (weights_digest(flatten_params(model)), {r["compress_time_s"] == 0 for r in rows})
        for g in groups.values():
            g.barrier(60)  # nobody leaves while a peer may still need its last block
        q.put((rank, out))


@pytest.mark.slow
def test_overlap_trains_the_same_models_as_the_allreduce_after_backward(domain):
    """2 ranks, 3 steps each way: every rank's model is the same with and without overlap."""
    got, _ = run_ranks(_rank, (domain,), WORLD, 300)
    results = dict(got)
    digests = {digest for out in results.values() for digest, _ in out.values()}
    assert len(digests) == 1, results  # both ranks, with and without overlap
    # Each way took its own path: the hooks copied the gradients (no flatten time) only with overlap.
    assert all(out[True][1] == {True} and out[False][1] == {False} for out in results.values()), results
