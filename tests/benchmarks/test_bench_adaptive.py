"""benchmarks/bench_adaptive.py, the pure parts: policy flags, idle times, accuracy at the budget,
the per-policy spread over seeds, the verdict and the beta fit (no runs, no timing)."""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pandas as pd
import pytest

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # as when the benchmark runs: its shared modules sit beside it
spec = importlib.util.spec_from_file_location("bench_adaptive", BENCHMARKS / "bench_adaptive.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_policy_flags():
    assert bench.policy_flags("joint:0.1") == {"codec": "qsgdz15", "adaptive": "joint", "beta": 0.1}
    assert bench.policy_flags("equal:4", "qsgd")["codec"] == "qsgd15"
    assert bench.policy_flags("joint:0:2") == {"codec": "qsgdz15", "adaptive": "joint", "beta": 0.0, "min-bits": 2}
    assert bench.policy_flags("equal:2") == {"codec": "qsgdz15", "adaptive": "equal", "fixed-bits": 2}
    assert bench.policy_flags("equal:int8_sparse") == {"codec": "int8_sparse", "adaptive": "equal", "fixed-bits": "codec"}
    assert bench.policy_flags("joint:int8_sparse") == {"codec": "int8_sparse", "adaptive": "joint", "fixed-bits": "codec"}
    for bad in ("joint:x", "joint:0:x", "equal:nosuchcodec", "greedy"):
        with pytest.raises(SystemExit, match="unknown policy"):
            bench.policy_flags(bad)


def test_idle_and_accuracy_at_budget_leave_the_probe_rounds_out():
    rounds = pd.DataFrame({"round": [1, 2, 3, 4], "round_time_s": [20.0, 10.0, 10.0, 10.0],
                           "test_accuracy": [0.5, 0.8, 0.9, 0.95]})
    clients = pd.DataFrame({"round": [1, 1, 3, 3, 4, 4], "client_id": [0, 1, 0, 1, 0, 1],
                            "train_time_s": [1.0, 1.0, 2.0, 8.0, 4.0, 9.0], "stretch_s": 0.0,
                            "encode_time_s": 0.0, "upload_s": 1.0})
    mean_idle, max_idle = bench.idle_times(rounds, clients)
    assert mean_idle == pytest.approx((7 + 1 + 5 + 0) / 4)       # rounds 3-4 only
    assert max_idle == pytest.approx((7 + 5) / 2)                 # per round the most waiting client
    assert bench.accuracy_at(rounds, 40.0) == pytest.approx(90.0)  # rounds 1-3 end within 40 s
    assert bench.accuracy_at(rounds, 100.0) == pytest.approx(95.0)
    assert bench.accuracy_at(rounds, 5.0) is None


def runs():
    return [{"policy": "joint:0.1", "seed": s, "time_s": t, "round_to_target": r, "accuracy_at_budget": 96.0,
             "mean_idle_s": 1.0, "max_idle_s": 2.0, "up_MB_per_round": 3.0}
            for s, t, r in ((0, 90.0, 9), (1, 100.0, 10), (2, None, None))] + \
           [{"policy": f"equal:{q}", "seed": s, "time_s": t, "round_to_target": r, "accuracy_at_budget": 95.0,
             "mean_idle_s": 3.0, "max_idle_s": 5.0, "up_MB_per_round": 4.0}
            for q, t, r in ((2, 120.0, 12), (8, 110.0, 10)) for s in (0, 1, 2)]


def test_policies_spread_over_seeds_and_the_verdict():
    table = bench.summarize_policies(runs())
    joint = table.set_index("policy").loc["joint:0.1"]
    assert joint["reached"] == "2/3" and joint["min_s"] == 90.0 and joint["median_s"] == 100.0
    assert math.isinf(joint["max_s"])                              # the seed that missed is infinitely slow
    lines = bench.verdict(table)
    assert len(lines) == 1 and "best fixed baseline equal:8's 110.0 s" in lines[0]
    assert "(ratio 0.909: sooner)" in lines[0] and "smaller than every fixed baseline's" in lines[0]
    slower = table.assign(max_idle_s=[2.0, 5.0, 1.5])                # a baseline idles less
    assert "NOT smaller than every fixed baseline's (smallest 1.50 s)" in bench.verdict(slower)[0]


def test_beta_fit_from_rounds_to_target():
    from commlab.fl.adaptive.bits import variance_factor
    x2, x8 = variance_factor(2) / 4, variance_factor(8) / 4
    beta = (12 / 10 - 1) / (x2 - x8 * 12 / 10)                      # R = R0 (1 + beta x) through both points
    assert f"{beta:.3g}" in bench.fit_beta(runs())
    assert bench.fit_beta(runs()[:3]).startswith("beta: not fitted")
