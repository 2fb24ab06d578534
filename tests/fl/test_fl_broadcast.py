"""The model broadcast: whole models or compressed deltas with the replica's digest
(commlab.fl.broadcast), for every registered compressor, and a replica that falls out of sync."""
import numpy as np
import pytest
import torch

from commlab.codecs import build_compression, names
from commlab.fl.broadcast import ModelReplica, ModelSender
from commlab.fl.messages import ModelBlob
from commlab.models import build_model, flatten_params, layout_of, weights_digest

MODEL = build_model("mnist_cnn", seed=0)
LAYOUT = layout_of(MODEL)
START = flatten_params(MODEL)
RUN = "run-a"


def sender_of(name: str) -> ModelSender:
    """The controller's sender for downlink codec `name`, built for the model once."""
    return ModelSender(build_compression(name, {}, LAYOUT).codec, RUN)


def every_compressor() -> list[str]:
    concrete = {"minmax<bits>": "minmax4", "qsgd<levels>": "qsgd16", "qsgdz<levels>": "qsgdz16", "powersgd<rank>": "powersgd2"}
    return [concrete.get(n, n) for n in names()]


def trajectory(rounds: int, seed: int = 0) -> list[np.ndarray]:
    """Global models of successive rounds: the start plus small random steps."""
    rng = np.random.default_rng(seed)
    out, w = [], START
    for _ in range(rounds):
        w = (w + 0.01 * rng.standard_normal(w.size)).astype(np.float32)
        out.append(w)
    return out


def test_fp32_sends_the_whole_model_every_round():
    sender, replica = sender_of("fp32"), ModelReplica(START.size)
    assert replica.apply(sender.full(0, START)) == (None, False)
    for rnd, w in enumerate(trajectory(3), 1):
        blob = sender.next(rnd, w)
        assert blob.kind == "full" and replica.apply(blob) == (None, False)
        assert np.array_equal(replica.weights, w) and replica.round == rnd


@pytest.mark.parametrize("name", [n for n in every_compressor() if n != "fp32"])
def test_every_compressor_keeps_replicas_bit_identical_to_the_senders(name):
    sender, replica = sender_of(name), ModelReplica(START.size)
    replica.apply(sender.full(0, START))
    for rnd, w in enumerate(trajectory(3), 1):
        blob = sender.next(rnd, w)
        assert blob.kind == "delta"
        assert len(blob.payload) < START.nbytes  # compressed
        assert replica.apply(blob) == (None, False), name
        assert np.array_equal(replica.weights, sender.replica) and replica.digest == weights_digest(sender.replica)


def test_what_the_codec_drops_reaches_the_replica_in_later_rounds():
    """Server-side error feedback: broadcasting the same target again shrinks the gap."""
    sender, replica = sender_of("int8_sparse"), ModelReplica(START.size)
    replica.apply(sender.full(0, START))
    target = trajectory(1)[0]
    gaps = []
    for rnd in range(1, 8):
        replica.apply(sender.next(rnd, target))
        gaps.append(float(np.linalg.norm(target - replica.weights)))
    assert gaps[-1] < 0.2 * gaps[0]


def test_a_replica_that_missed_a_delta_needs_and_takes_the_whole_model():
    sender = sender_of("int8_sparse")
    behind, fresh = ModelReplica(START.size), ModelReplica(START.size)
    behind.apply(sender.full(0, START))
    w1, w2, w3 = trajectory(3)
    sender.next(1, w1)  # lost on its way to `behind`
    problem, need_full = behind.apply(sender.next(2, w2))
    assert need_full and "delta for replica" in problem and behind.round == 0
    assert fresh.apply(sender.next(3, w3))[1]  # restarted: an empty replica takes no delta
    full = sender.full(sender.round)
    assert behind.apply(full) == (None, False) and fresh.apply(full) == (None, False)
    assert behind.digest == fresh.digest == sender.digest
    blob = sender.next(4, w3)
    assert behind.apply(blob) == fresh.apply(blob) == (None, False)


@pytest.mark.parametrize("corrupt, expected", [
    (lambda b: ModelBlob(b.round, b.kind, b.digest, b.base_digest, b.run_id, b.payload[:-4]), "truncated"),
    (lambda b: ModelBlob(b.round, "patch", b.digest, b.base_digest, b.run_id, b.payload), "unknown kind"),
    (lambda b: ModelBlob(b.round, "delta", b.digest, "", b.run_id, b.payload), "without base_digest"),
])
def test_corrupt_blobs_are_refused_and_leave_the_replica_as_it_was(corrupt, expected):
    sender, replica = sender_of("int8"), ModelReplica(START.size)
    replica.apply(sender.full(0, START))
    before = replica.weights.copy()
    problem, _ = replica.apply(corrupt(sender.next(1, trajectory(1)[0])))
    assert expected in problem
    assert np.array_equal(replica.weights, before) and replica.round == 0


def test_a_delta_that_leads_to_another_model_empties_the_replica_until_the_whole_model_comes():
    """A delta is added in place (no decoded model beside the replica): one that decodes but does
    not give the digest it names leaves no model to train from, and the whole model is asked for."""
    sender, replica = sender_of("int8"), ModelReplica(START.size)
    replica.apply(sender.full(0, START))
    b = sender.next(1, trajectory(1)[0])
    problem, need_full = replica.apply(ModelBlob(b.round, b.kind, "0" * 16, b.base_digest, b.run_id, b.payload))
    assert "the blob names 0000000000000000" in problem and need_full
    assert replica.weights is None and replica.round is None and replica.digest == ""
    assert replica.apply(sender.full(sender.round)) == (None, False) and replica.digest == sender.digest


def test_a_whole_model_with_nan_is_refused():
    bad = START.copy()
    bad[3] = np.nan
    blob = sender_of("fp32").full(0, bad)
    replica = ModelReplica(START.size)
    assert replica.apply(blob) == ("holds NaN or Inf", True) and replica.weights is None


def test_the_model_trained_from_is_the_replica():
    """Clients load the replica into their torch model: the vector has the model's layout."""
    sender, replica = sender_of("dgc"), ModelReplica(START.size)
    replica.apply(sender.full(0, START))
    replica.apply(sender.next(1, trajectory(1)[0]))
    assert replica.weights.size == sum(p.numel() for p in MODEL.parameters())
    assert replica.weights.dtype == np.float32 and torch.from_numpy(replica.weights).isfinite().all()
