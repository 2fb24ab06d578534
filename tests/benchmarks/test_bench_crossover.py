"""benchmarks/bench_crossover.py, the pure parts: the rate below which a compressor pays off, the
runs it plans and their commands, the shorter settings at slow rates, the figure (no runs, no timing)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

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
    assert bench.payoff_lines(rows)[:2] == ["- fl int8: pays off at 100mbit and below",
                                            "- fl signsgd: does not pay off at the slowest rate measured"]
    assert {r["pays_off_at_or_below"] for r in rows if r["case"] == "int8"} == {"100mbit"}


def test_a_lossy_rate_stays_out_of_the_ladder():
    rows = [row("dense", r, 1.0, "ddp") for r in ("10mbit", "1mbit", "10mbit-loss5")]
    rows += [row("gloo-none", "10mbit", 0.9, "ddp"), row("gloo-none", "1mbit", 0.8, "ddp"),
             row("gloo-none", "10mbit-loss5", 1.5, "ddp")]
    assert bench.payoff(rows, "ddp") == {"gloo-none": "10mbit"}


def test_rates_order_loopback_above_every_shaped_rate():
    assert sorted(["1mbit", "lan", "100mbit", "1gbit"], key=bench.rate_bps) == ["1mbit", "100mbit", "1gbit", "lan"]
    assert bench.rate_bps("10mbit-loss5") == bench.rate_bps("10mbit")


def test_every_compressor_runs_once_at_its_default():
    cases = bench.defaults()
    assert "fp32" not in cases and not any("<" in c for c in cases)
    assert {"minmax", "qsgd", "powersgd", "int8_sparse"} <= set(cases)


def test_rates_below_the_slow_one_run_the_shorter_settings_from_the_fast_one_the_longer():
    a = bench.parse(["--results-dir", "/tmp/r"])
    middle, slow = bench.at_rate("10mbit", a), bench.at_rate("1mbit", a)
    assert (middle.rounds, middle.samples, middle.ddp_train_subset, middle.skip) == (a.rounds, a.samples, a.ddp_train_subset, a.skip)
    assert (slow.rounds, slow.ddp_train_subset, slow.skip) == (a.slow_rounds, a.slow_train_subset, a.slow_skip)
    assert slow.profile == "1mbit"
    for rate in ("1gbit", "lan"):
        fast = bench.at_rate(rate, a)
        assert (fast.rounds, fast.samples, fast.ddp_train_subset, fast.skip) == (a.fast_rounds, a.fast_samples, a.fast_train_subset, a.skip)
    assert bench.at_rate("100mbit", a).ddp_train_subset == a.ddp_train_subset
    assert a.fast_train_subset > a.ddp_train_subset and a.fast_rounds > a.rounds and a.fast_samples < a.samples


def test_the_plan_runs_every_case_at_every_rate_then_the_loss_cases_at_the_lossy_rate():
    a = bench.parse(["--rates", "lan,1mbit", "--fl-cases", "fp32,flower", "--ddp-cases", "dense,gloo-none",
                     "--fast-repeats", "2", "--results-dir", "/tmp/r"])
    runs = bench.plan(a)
    lan = [("fl", "fp32"), ("fl", "flower"), ("ddp", "dense"), ("ddp", "gloo-none")]
    # From --fast-from: each case --fast-repeats times, interleaved (a b, b a)
    assert runs[:8] == [(*c, "lan", 0) for c in lan] + [(*c, "lan", 1) for c in lan[::-1]]
    assert runs[8:12] == [(*c, "1mbit", 0) for c in lan]
    assert runs[-2:] == [("ddp", "dense", "10mbit-loss5", 0), ("ddp", "gloo-none", "10mbit-loss5", 0)] and len(runs) == 14
    with pytest.raises(SystemExit, match="ddp:gloo-none"):
        bench.plan(bench.parse(["--ddp-cases", "dense", "--results-dir", "/tmp/r"]))


def test_a_case_run_several_times_is_one_row_of_the_median_of_its_runs():
    runs = [{"mode": "fl", "case": "fp32", "rate": "lan", "time_s": t, "bytes": 100 + k, "status": "ok", "run_id": f"r{k}"}
            for k, t in enumerate((0.30, 0.20, 0.25))]
    once = {"mode": "fl", "case": "fp32", "rate": "1mbit", "time_s": 9.0, "bytes": 7, "status": "ok", "run_id": "s"}
    merged = bench.merge_repeats([runs[0], once, *runs[1:]])
    assert [(r["rate"], r["time_s"], r["bytes"]) for r in merged] == [("lan", 0.25, 101), ("1mbit", 9.0, 7)]
    assert merged[0]["run_id"] == "r0 r1 r2" and merged[0]["status"] == "ok" and merged[1] is once


def test_powersgd_dense_steps_must_be_warm_up_steps(capsys):
    with pytest.raises(SystemExit):
        bench.parse(["--start-iter", "3", "--results-dir", "/tmp/r"])
    assert "--start-iter 3" in capsys.readouterr().err


def test_cases_run_the_dds_method_codec_or_the_peer_on_the_rate():
    a = bench.parse(["--results-dir", "/tmp/r"])
    dds = bench.ddp_command("int8", bench.at_rate("10mbit", a), "x")
    gloo = bench.ddp_command("gloo-fp16", bench.at_rate("1mbit", a), "y")
    assert dds[dds.index("--method") + 1] == "int8" and dds[dds.index("--profile") + 1] == "10mbit"
    assert dds[dds.index("--train-subset") + 1] == str(a.ddp_train_subset)
    assert gloo[gloo.index("--hook") + 1] == "fp16" and gloo[gloo.index("--profile") + 1] == "1mbit"
    assert gloo[gloo.index("--train-subset") + 1] == str(a.slow_train_subset)
    fl = bench.fl_command("qsgd", bench.at_rate("100mbit", a), "z")
    assert fl[fl.index("--codec") + 1] == "qsgd" and fl[fl.index("--profile") + 1] == "100mbit"
    flower = bench.fl_command("flower", bench.at_rate("1mbit", a), "w")
    assert flower[flower.index("--kind") + 1] == "flower" and flower[flower.index("--rounds") + 1] == str(a.slow_rounds)


def test_the_figure_draws_a_line_per_case_and_mode_without_the_lossy_rows():
    rows = [{"mode": m, "case": c, "rate": r, "time_s": 1.0 + i}
            for m, cases in (("fl", ("fp32", "flower")), ("ddp", ("dense", "int8", "gloo-none")))
            for c in cases for i, r in enumerate(("lan", "100mbit", "1mbit"))]
    rows.append({"mode": "ddp", "case": "dense", "rate": "10mbit-loss5", "time_s": 9.0})
    fl, ddp = bench.figure(rows).axes
    assert [line.get_label() for line in fl.get_lines()] == ["fp32", "flower"]
    assert [len(line.get_xdata()) for line in ddp.get_lines()] == [3, 3, 3]
    assert [t.get_text() for t in ddp.get_xticklabels()] == ["1mbit", "100mbit", "lan"]


def test_the_figure_is_svg_text_and_the_same_rows_give_the_same_bytes(tmp_path):
    """Published beside the table in the repository: text, and no date or random ids that change it."""
    rows = [{"mode": m, "case": c, "rate": r, "time_s": 1.0 + i}
            for m, c in (("fl", "fp32"), ("ddp", "dense")) for i, r in enumerate(("lan", "10mbit"))]
    first, second = tmp_path / "a.svg", tmp_path / "b.svg"
    bench.save_figure(bench.figure(rows), first)
    bench.save_figure(bench.figure(rows), second)
    assert first.read_text().startswith("<?xml") and "<svg" in first.read_text()
    assert first.read_bytes() == second.read_bytes()


def test_bytes_name_whose_counters_they_are():
    assert bench.bytes_source("fl", "int8", "lan") == "DDS CommStats"
    assert bench.bytes_source("fl", "flower", "10mbit") == bench.bytes_source("fl", "fp32", "1mbit") == "controller iface"
    assert bench.bytes_source("fl", "flower", "lan") == bench.bytes_source("ddp", "gloo-none", "lan") == "lo counters"
    assert bench.bytes_source("ddp", "gloo-fp16", "1mbit") == "rank iface"
    assert bench.bytes_source("ddp", "dense", "10mbit-loss5") == "DDS CommStats"
