"""benchmarks/bench_fedbuff.py, the pure parts: time to target from a rounds table, the per-strategy
min/median/max and the ratio of the medians (no runs, no timing)."""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pandas as pd
import pytest

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # as when the benchmark runs: its shared modules sit beside it
spec = importlib.util.spec_from_file_location("bench_fedbuff", BENCHMARKS / "bench_fedbuff.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def rounds(acc: list[float], round_time: list[float], wall: list[float] | None = None) -> pd.DataFrame:
    n = len(acc)
    df = pd.DataFrame({"round": range(1, n + 1), "round_time_s": round_time, "test_accuracy": acc,
                       "bytes_up": [1_000_000] * n, "n_participants": [10] * n, "rejected_updates": [0] * n})
    if wall is not None:
        df["wall_time_s"] = wall
    return df


def test_time_to_target_uses_wall_time_at_the_first_row_reaching_it():
    r = rounds([0.90, 0.971, 0.96, 0.98], [10.0, 10.0, 10.0, 10.0], [10.5, 21.0, 31.5, 42.0])
    hit = bench.time_to_target(r, 0.97)
    assert hit == {"time_to_target_s": 21.0, "step_to_target": 2, "time_to_target_excl_eval_s": 20.0,
                   "up_MB_to_target": 2.0}


def test_time_to_target_exactly_at_target_counts():
    assert bench.time_to_target(rounds([0.5, 0.97], [1.0, 1.0], [1.0, 2.5]), 0.97)["step_to_target"] == 2


def test_time_to_target_never_reached():
    hit = bench.time_to_target(rounds([0.5, 0.96], [1.0, 1.0], [1.0, 2.0]), 0.97)
    assert all(v is None for v in hit.values())


def test_old_runs_without_wall_time_fall_back_to_the_sum_of_round_times():
    assert bench.time_to_target(rounds([0.5, 0.98], [3.0, 4.0]), 0.97)["time_to_target_s"] == 7.0
    r = rounds([0.5, 0.98], [3.0, 4.0], [float("nan"), 8.0])  # column present but empty (an older row)
    assert bench.time_to_target(r, 0.97)["time_to_target_s"] == 7.0


def test_summarize_run_counts_and_curve():
    s = bench.summarize_run(rounds([0.9, 0.98, 0.97], [1.0, 2.0, 3.0], [1.5, 4.0, 7.5]), 0.97)
    assert (s["aggregations"], s["updates"], s["rejected"], s["up_MB"], s["wall_s"]) == (3, 30, 0, 3.0, 7.5)
    assert s["final_accuracy"] == pytest.approx(97.0) and s["wall_time_s"] == [1.5, 4.0, 7.5]


def run(strategy: str, t: float | None, acc: float = 97.5) -> dict:
    return {"strategy": strategy, "time_to_target_s": t, "time_to_target_excl_eval_s": None if t is None else t - 1,
            "final_accuracy": acc, "aggregations": 10, "up_MB": 5.0}


def test_summary_min_median_max_and_ratio():
    runs = [run("fedavg", 100.0), run("fedbuff", 40.0), run("fedavg", 120.0), run("fedbuff", 60.0),
            run("fedavg", 90.0), run("fedbuff", 50.0)]
    s = bench.summarize_strategies(runs).set_index("strategy")
    assert list(s.index) == ["fedavg", "fedbuff"]
    assert (s.loc["fedavg", "min_s"], s.loc["fedavg", "median_s"], s.loc["fedavg", "max_s"]) == (90.0, 100.0, 120.0)
    assert (s.loc["fedbuff", "min_s"], s.loc["fedbuff", "median_s"], s.loc["fedbuff", "max_s"]) == (40.0, 50.0, 60.0)
    assert s.loc["fedbuff", "ratio"] == pytest.approx(0.5) and s.loc["fedavg", "ratio"] == pytest.approx(1.0)
    assert s.loc["fedbuff", "reached"] == "3/3" and s.loc["fedbuff", "median_excl_eval_s"] == 49.0


def test_a_seed_that_misses_the_target_counts_as_infinitely_slow():
    runs = [run("fedavg", 100.0), run("fedavg", None), run("fedavg", 80.0), run("fedbuff", None),
            run("fedbuff", None), run("fedbuff", 30.0)]
    s = bench.summarize_strategies(runs).set_index("strategy")
    assert s.loc["fedavg", "reached"] == "2/3" and s.loc["fedavg", "median_s"] == 100.0
    assert math.isinf(s.loc["fedavg", "max_s"])
    assert s.loc["fedbuff", "min_s"] == 30.0 and math.isinf(s.loc["fedbuff", "median_s"])
    assert math.isnan(s.loc["fedbuff", "ratio"])  # no finite median: no ratio
    cells = bench.shown(s.reset_index())
    assert cells.set_index("strategy").loc["fedbuff", "median_s"] == "not reached"


def test_even_number_of_seeds_takes_the_mean_of_the_middle_two():
    s = bench.summarize_strategies([run("fedavg", 10.0), run("fedavg", 20.0)])
    assert s["median_s"].iloc[0] == 15.0


def test_strategy_flags():
    class A:
        rounds, aggregations, buffer_size, max_staleness = 12, 24, 10, 20
    assert bench.strategy_flags("fedavg", A) == {"strategy": "fedavg", "rounds": 12}
    assert bench.strategy_flags("fedbuff", A) == {"strategy": "fedbuff", "rounds": 24, "buffer-size": 10,
                                                  "max-staleness": 20}
    with pytest.raises(SystemExit):
        bench.strategy_flags("fedprox", A)


def test_version_gaps_per_client():
    clients = pd.DataFrame({"client_id": ["client-0", "client-1", "client-0", "client-1", "client-0"],
                            "round": [1, 1, 3, 7, 4]})
    assert sorted(bench.version_gaps(clients)) == [1, 2, 6]
    fedavg = pd.DataFrame({"client_id": ["a", "b"] * 3, "round": [1, 1, 2, 2, 3, 3]})
    assert set(bench.version_gaps(fedavg)) == {1}
    s = bench.summarize_run(rounds([0.5, 0.98], [1.0, 1.0], [1.0, 2.0]), 0.97, clients)
    assert (s["median_gap"], s["max_gap"]) == (2.0, 6)


def test_a_run_without_rows_has_no_metrics():
    empty = rounds([], [], [])
    assert bench.summarize_run(empty, 0.97) == {}
    s = bench.summarize_strategies([{"strategy": "fedavg", "time_to_target_s": 10.0}, {"strategy": "fedavg"}])
    assert s["reached"].iloc[0] == "1/2" and math.isinf(s["max_s"].iloc[0])
