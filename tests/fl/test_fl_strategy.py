"""FedAvg weighting, server momentum and the round's update validation (no transport)."""
import numpy as np
import pytest

from commlab.codecs import get_codec
from commlab.fl.collect import RoundFailed, UpdateCollector
from commlab.fl.local_training import round_subset
from commlab.runs.seeds import SeedTree
from commlab.fl.messages import ClientUpdate
from commlab.fl.strategy import FedAvg, FitIns, FitRes


def fedavg(weights, **kw):
    return FedAvg(np.asarray(weights, np.float32), epochs=1, lr=0.1, batch_size=8, subset_size=10, **kw)


def test_fedavg_weights_by_num_samples():
    s = fedavg([0.0, 0.0])
    new = s.aggregate(1, [FitRes("a", 2, np.array([1.0, 0.0], np.float32)),
                          FitRes("b", 6, np.array([0.0, 2.0], np.float32))], [])
    np.testing.assert_allclose(new, [0.25, 1.5])


def test_fedavg_result_does_not_depend_on_arrival_order():
    """Float sums depend on their order; the same updates in another arrival order (other links,
    other load) give the bit-identical model."""
    # 1e17 + 1 - 1e17 is 0 in floating point, 1e17 - 1e17 + 1 is 1: the order decides.
    results = [FitRes(name, 1, np.array([v], np.float32)) for name, v in (("a", 1e17), ("b", 1.0), ("c", -1e17))]
    models = {fedavg([0.0]).aggregate(1, [results[i] for i in order], []).tobytes()
              for order in ((0, 1, 2), (0, 2, 1), (1, 0, 2), (2, 1, 0))}
    assert len(models) == 1


def test_fedavg_does_not_touch_published_weights():
    s = fedavg([1.0, 1.0])
    before = s.weights
    s.aggregate(1, [FitRes("a", 1, np.ones(2, np.float32))], [("b", "no valid update by the deadline")])
    np.testing.assert_array_equal(before, [1.0, 1.0])


def test_server_momentum_accumulates_and_is_state():
    s = fedavg([0.0], server_momentum=0.5)
    for rnd in (1, 2):
        s.aggregate(rnd, [FitRes("a", 1, np.array([1.0], np.float32))], [])
    np.testing.assert_allclose(s.weights, [1.0 + 1.5])
    t = fedavg(s.weights, server_momentum=0.5)
    t.load_state_dict(s.state_dict())
    np.testing.assert_array_equal(t.momentum, [1.5])


def test_lr_decays_per_round_from_the_first():
    s = fedavg([0.0], lr_decay=0.5)
    assert [s.configure_round(rnd).lr for rnd in (1, 2, 3)] == pytest.approx([0.1, 0.05, 0.025])
    assert fedavg([0.0]).configure_round(7).lr == 0.1


def test_fedavg_refuses_empty_round_and_wrong_shape():
    s = fedavg([0.0, 0.0])
    with pytest.raises(ValueError, match="nothing to aggregate"):
        s.aggregate(1, [], [("a", "x")])
    with pytest.raises(ValueError, match="sent \\(3,\\)"):
        s.aggregate(1, [FitRes("a", 1, np.zeros(3, np.float32))], [])


def test_round_subsets_are_reproducible_and_differ_per_client_and_round():
    part, tree = np.arange(1000), SeedTree(7)
    fit = FitIns(round=3, epochs=1, lr=0.1, batch_size=8, subset_size=100)
    a, b = round_subset(part, fit, tree.local(0, 3)), round_subset(part, fit, SeedTree(7).local(0, 3))
    np.testing.assert_array_equal(a, b)
    assert len(a) == 100 and not np.array_equal(a, round_subset(part, fit, tree.local(1, 3)))
    assert not np.array_equal(a, round_subset(part, fit, tree.local(0, 4)))


def collector(log):
    return UpdateCollector(2, ["client-0", "client-1"], get_codec("int8"), 64, log.append)


def test_collector_rejects_and_counts_bad_updates():
    log: list[str] = []
    c = collector(log)
    good = get_codec("int8").encode(np.ones(64, np.float32))
    c.offer(ClientUpdate(round=1, client_id="client-0", num_samples=5, payload=good))          # stale round
    c.offer(ClientUpdate(round=2, client_id="intruder", num_samples=5, payload=good))          # unknown client
    c.offer(ClientUpdate(round=2, client_id="client-0", num_samples=5, payload=good[:-7]))     # truncated
    c.offer(ClientUpdate(round=2, client_id="client-0", num_samples=5, payload=get_codec("fp32").encode(np.ones(64, np.float32))))  # other codec
    # client-1's (stolen) key authenticates client-1, which cannot speak for client-0
    c.offer(ClientUpdate(round=2, client_id="client-0", num_samples=5, payload=good), sender="client-1")
    c.offer(ClientUpdate(round=2, client_id="client-0", num_samples=5, payload=good), sender="client-0")
    c.offer(ClientUpdate(round=2, client_id="client-0", num_samples=5, payload=good))          # duplicate
    assert c.replies.rejected == 6 and c.answered() == {"client-0"}
    assert any("sent by 'client-1', not by the node of the client it names" in line for line in log)
    assert any("malformed payload" in line for line in log)
    assert any("for round 1, not 2" in line for line in log)


def test_collector_deadline_and_hard_limit():
    good = get_codec("int8").encode(np.ones(64, np.float32))
    queue = [ClientUpdate(round=2, client_id="client-0", num_samples=5, payload=good)]
    receive = lambda t: queue.pop() if queue else None  # noqa: E731  (client-1 never answers)
    import time
    replies = collector([]).collect(receive, time.perf_counter(), deadline_s=0.2, hard_limit_s=5, min_clients=1)
    assert replies.participants() == ["client-0"]
    assert ("client-1", "no valid update by the deadline") in replies.failures
    with pytest.raises(RoundFailed, match="only 0 of min_clients=1"):
        collector([]).collect(lambda t: None, time.perf_counter(), deadline_s=0.1, hard_limit_s=0.3, min_clients=1)


def test_the_collector_keeps_frames_and_fedavg_adds_them_as_it_adds_decoded_deltas():
    """The controller holds a round's updates as the frames they came in, decoded again one at a
    time into the mean: the model is bit-identical to aggregating the decoded deltas."""
    codec, rng = get_codec("int8_sparse", ratio=0.25), np.random.default_rng(3)
    frames = {name: codec.encode(rng.standard_normal(64).astype(np.float32)) for name in ("client-0", "client-1")}
    c = UpdateCollector(2, list(frames), codec, 64, print)
    for name, frame in frames.items():
        c.offer(ClientUpdate(round=2, client_id=name, num_samples=3 + len(c.answered()), payload=frame))
    assert [type(r.update).__name__ for r in c.replies.results] == ["Frame", "Frame"]
    dense = [FitRes(r.client_id, r.num_samples, codec.decode(frames[r.client_id], numel=64)) for r in c.replies.results]
    start = np.linspace(-1, 1, 64)
    from_frames = fedavg(start, server_momentum=0.5).aggregate(2, c.replies.results, [])
    assert from_frames.tobytes() == fedavg(start, server_momentum=0.5).aggregate(2, dense, []).tobytes()
    np.testing.assert_allclose(from_frames, start + (3 * dense[0].delta + 4 * dense[1].delta) / 7, atol=1e-6)
