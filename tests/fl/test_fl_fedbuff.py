"""FedBuff (docs/scale.md): staleness weighting, the staleness bound and its count, the controller's
dispatch bookkeeping, config checks, and one short asynchronous run with real node processes."""
import csv
import math
import re

import numpy as np
import pytest

from commlab.config.schema import ConfigError, from_dict
from commlab.fl.config import ControllerConfig
from commlab.fl.fedbuff import Dispatch
from commlab.fl.run import build_configs, parse_args
from commlab.fl.sampling import Availability
from commlab.fl.strategy import ASYNC_STRATEGIES, FedAvg, FedBuff, FitRes, staleness_weight
from test_fl_sampling import log_of, run_to_completion

COMMON = dict(epochs=1, lr=0.1, batch_size=8, subset_size=10, seed=0)


def fedbuff(weights, **kw) -> FedBuff:
    return FedBuff(np.asarray(weights, np.float32), **COMMON, **kw)


def res(client, delta, n=10):
    return FitRes(client, n, np.asarray(delta, np.float32))


def test_staleness_weight_is_one_over_sqrt_one_plus_staleness():
    assert [staleness_weight(s) for s in (0, 1, 3, 8)] == [1.0, 1 / math.sqrt(2), 0.5, 1 / 3]


def test_stale_updates_move_the_model_less():
    s = fedbuff([0.0, 0.0], buffer_size=2)
    assert s.offer(res("a", [1.0, 0.0]), version=5, base=5) is None
    assert not s.full()
    assert s.offer(res("b", [0.0, 1.0]), version=5, base=2) is None  # staleness 3: weight 1/2
    assert s.full()
    results, failures = s.take()
    assert [r.staleness for r in results] == [0, 3] and failures == [] and s.buffer == []
    np.testing.assert_allclose(s.aggregate(6, results, failures), [0.5, 0.25])


def test_fresh_buffer_is_exactly_fedavg():
    deltas = [res("a", [1.0, 2.0], 4), res("b", [3.0, -1.0], 10)]
    buffered = fedbuff([1.0, 1.0], buffer_size=2)
    for r in deltas:
        buffered.offer(r, version=0, base=0)
    results, failures = buffered.take()
    plain = FedAvg(np.ones(2, np.float32), **COMMON)
    np.testing.assert_array_equal(buffered.aggregate(1, results, failures), plain.aggregate(1, deltas, []))


def test_updates_beyond_max_staleness_are_rejected_and_counted():
    s = fedbuff([0.0], buffer_size=3, max_staleness=2)
    assert s.offer(res("a", [1.0]), version=9, base=7) is None  # staleness 2: at the bound, kept
    assert s.offer(res("b", [1.0]), version=9, base=6) == "staleness 3 > max_staleness 2 (trained from version 6)"
    assert s.offer(res("c", [1.0]), version=9, base=10) == "trained from version 10, newer than the server's 9"
    assert len(s.buffer) == 1 and not s.full()
    results, failures = s.take()
    assert [r.client_id for r in results] == ["a"]
    assert [c for c, _ in failures] == ["b", "c"]
    assert s.take() == ([], [])  # counted once


def test_dispatch_keeps_concurrency_and_trains_each_client_once_per_version():
    clients = [f"client-{i}" for i in range(4)]
    d = Dispatch(clients, concurrency=2, seed=0)
    first = d.assign(0, set(clients))
    assert len(first) == 2 and d.assign(0, set(clients)) == []  # full
    a, b = first
    assert d.returned(a, 1, version=0) is None
    second = d.assign(0, set(clients))  # a trained from 0 already: someone else takes its place
    assert len(second) == 1 and second[0] not in first
    assert d.returned(a, 1, version=0) == "no work was given to this client"
    assert d.returned(b, 3, version=1) == "trained from version 2, was told 0 (server at 1)"
    assert d.returned(b, 2, version=1) is None  # trained from a newer replica than it was told: fine
    assert b not in d.candidates(1) and a in d.candidates(1)  # b trained from version 1 already
    third = d.assign(1, set(clients))
    assert len(third) == 1 and set(d.busy) == {second[0], third[0]}
    assert d.lost({third[0]}) == [second[0]] and set(d.busy) == {third[0]}


def test_dispatch_skips_unavailable_and_dead_clients():
    clients = [f"client-{i}" for i in range(4)]
    trace = Availability({"client-0": [(1, 1)], "client-1": [(1, 9)], "client-2": [(2, 9)]})
    d = Dispatch(clients, concurrency=4, seed=0, availability=trace)
    assert d.assign(0, {"client-0", "client-2", "client-3"}) == ["client-0"]  # client-1 dead, 2 and 3 off in round 1
    assert d.candidates(0) == ["client-1"]


def test_fedbuff_config(tmp_path):
    cfg = controller(tmp_path, "--strategy", "fedbuff", "--clients", "4", "--per-round", "3", "--buffer-size", "3",
                     "--max-staleness", "4")
    parsed = from_dict(ControllerConfig, cfg)
    assert parsed.strategy_params() == {"buffer_size": 3, "max_staleness": 4}
    assert isinstance(ASYNC_STRATEGIES["fedbuff"](np.zeros(1, np.float32), **COMMON, **parsed.strategy_params()),
                      FedBuff)
    with pytest.raises(ConfigError, match=re.escape("sampling.clients_per_round: 2 clients training at once cannot "
                                                    "fill fedbuff.buffer_size 3")):
        controller(tmp_path, "--strategy", "fedbuff", "--clients", "4", "--per-round", "2", "--buffer-size", "3")
    cfg = controller(tmp_path, "--clients", "4")
    cfg["fedbuff"] = {"buffer_size": 2}
    with pytest.raises(ConfigError, match="^fedbuff: only for strategy fedbuff, not fedavg$"):
        from_dict(ControllerConfig, cfg)
    cfg = controller(tmp_path, "--strategy", "fedbuff", "--clients", "4")
    cfg["fedbuff"] = {"max_staleness": -1}
    with pytest.raises(ConfigError, match=r"^fedbuff\.max_staleness: must be >= 0, got -1$"):
        from_dict(ControllerConfig, cfg)


def controller(tmp_path, *argv) -> dict:
    cfg, _ = build_configs(parse_args(["--results-dir", str(tmp_path / "results"), "--run-id", "b",
                                       "--domain-id", "5", *argv]))
    return cfg


@pytest.mark.slow
def test_asynchronous_run_applies_full_buffers(tmp_path, domain):
    rounds = 3
    ctl, cls = build_configs(parse_args([
        "--codec", "int8_sparse", "--strategy", "fedbuff", "--clients", "3", "--per-round", "3", "--buffer-size", "2",
        "--rounds", str(rounds), "--deadline", "60", "--samples-per-round", "128", "--batch-size", "32",
        "--train-subset", "2000", "--test-subset", "300", "--results-dir", str(tmp_path / "results"),
        "--run-id", "buffered", "--domain-id", str(domain)]))
    run_to_completion(tmp_path, [ctl, *cls])
    with open(tmp_path / "results" / "buffered" / "rounds.csv") as f:
        rows = list(csv.DictReader(f))
    # Every version is one full buffer (3 clients train at once, so one always fills it); which
    # clients land in which buffer depends on arrival order, not checked here.
    assert [int(r["round"]) for r in rows] == [1, 2, 3]
    assert all(int(r["n_participants"]) == 2 and int(r["rejected_updates"]) == 0 for r in rows)
    assert all(set(r["participants"].split(";")) <= {"client-0", "client-1", "client-2"} for r in rows)
    assert "not selected" not in "".join(log_of(tmp_path, f"client-{i}") for i in range(3))
