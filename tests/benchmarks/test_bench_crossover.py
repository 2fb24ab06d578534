"""benchmarks/bench_crossover.py, the pure parts: the rate below which a compressor pays off, and
the commands of its runs (no runs, no timing)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # as when the benchmark runs: its shared modules sit beside it
spec = importlib.util.spec_from_file_location("bench_crossover", BENCHMARKS / "bench_crossover.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def row(case: str, rate: str, x: float | None, mode: str = "fl") -> dict:
    return {"mode": mode, "case": case, "rate": rate, "time_x_of_reference": x}


def test_payoff_is_the_fastest_rate_where_the_case_beat_the_reference():
    rows = [row("fp32", r, 1.0) for r in ("lan", "100mbit", "10mbit", "1mbit")]
    rows += [row("int8", "lan", 1.4), row("int8", "100mbit", 0.9), row("int8", "10mbit", 0.3),
             row("int8", "1mbit", 0.2)]
    rows += [row("signsgd", r, 1.2) for r in ("lan", "100mbit", "10mbit")] + [row("signsgd", "1mbit", None)]
    rows += [row("topk", "lan", 0.9), row("topk", "100mbit", 0.9), row("topk", "10mbit", 1.1),
             row("topk", "1mbit", 0.5)]
    rows += [row("dense", "lan", 1.0, "ddp"), row("gloo-none", "lan", 0.5, "ddp")]
    # topk won at lan but lost at 10mbit: it pays off only below 10mbit, not "at lan and below"
    assert bench.payoff(rows, "fl") == {"int8": "100mbit", "signsgd": None, "topk": "1mbit"}
    assert bench.payoff(rows, "ddp") == {"gloo-none": "lan"}
    assert bench.payoff_lines(rows)[:2] == ["fl int8: pays off at 100mbit and below",
                                            "fl signsgd: does not pay off at the slowest rate measured"]
    assert {r["pays_off_at_or_below"] for r in rows if r["case"] == "int8"} == {"100mbit"}


def test_rates_order_loopback_above_every_shaped_rate():
    assert sorted(["1mbit", "lan", "100mbit", "1gbit"], key=bench.rate_bps) == ["1mbit", "100mbit", "1gbit", "lan"]


def test_ddp_cases_run_the_dds_method_or_the_gloo_hook_on_the_rate():
    import argparse
    a = argparse.Namespace(world=2, epochs=1, train_subset=640, test_subset=None, profile="lan", seed=0,
                           results_dir=Path("/tmp/r"), skip=4, start_iter=2)
    dds = bench.ddp_command("int8", "10mbit", a, "x")
    gloo = bench.ddp_command("gloo-fp16", "1mbit", a, "y")
    assert dds[dds.index("--method") + 1] == "int8" and dds[dds.index("--profile") + 1] == "10mbit"
    assert gloo[gloo.index("--hook") + 1] == "fp16" and gloo[gloo.index("--profile") + 1] == "1mbit"
    fl = bench.fl_command("qsgd4", "100mbit", argparse.Namespace(**{**vars(a), "rounds": 1, "samples": 100}), "z")
    assert fl[fl.index("--codec") + 1] == "qsgd4" and fl[fl.index("--profile") + 1] == "100mbit"
