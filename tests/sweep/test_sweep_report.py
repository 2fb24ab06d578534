"""The sweep report on small synthetic run folders: medians and ranges over seeds per settings,
never across settings; the Pareto front; the timeline's phases; failed cells listed."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from commlab.output.run_folder import write_json_atomic
from commlab.report.figures.sweep import pareto_front
from commlab.report.figures.timeline import phases
from commlab.sweep.report import build
from commlab.sweep.runner import Paths
from commlab.sweep.spec import load
from commlab.output.tables import COLUMNS


def write_table(path: Path, name: str, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS[name])
        w.writeheader()
        for row in rows:
            w.writerow({c: row.get(c, 0) for c in COLUMNS[name]})


def fake_run(run_dir: Path, codec: str, accuracies: list[float], up: int, round_s: float = 2.0) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps({"kind": "fl", "model": "mnist_cnn", "dataset": "mnist",
                                                       "link_profile": "lan", "codec": codec, "clients": 2,
                                                       "rounds": len(accuracies)}))
    write_table(run_dir / "rounds.csv", "rounds", [
        {"round": r + 1, "round_time_s": round_s, "wall_time_s": round_s * (r + 1) + 0.5 * r, "bytes_up": up,
         "bytes_down": 1_000_000, "test_accuracy": acc, "broadcast_time_s": 0.2, "aggregate_time_s": 0.1,
         "n_participants": 2} for r, acc in enumerate(accuracies)])
    for i in range(2):
        write_table(run_dir / f"clients-{i}.csv", "clients", [
            {"round": r + 1, "client_id": f"client-{i}", "train_time_s": 0.5 + i, "encode_time_s": 0.1,
             "upload_s": 0.05, "stretch_s": 0} for r in range(len(accuracies))])


def sweep_with_runs(tmp_path: Path, fail: str | None = None):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"grid": {"codec": ["fp32", "int8"]}, "seeds": [0, 1, 2], "stop": {"rounds": 3},
                                "target_accuracy": 0.8}))
    sweep, paths = load(path), Paths(tmp_path / "sw")
    (paths.root / "cells").mkdir(parents=True)
    curves = {("fp32", 0): [0.5, 0.8, 0.9], ("fp32", 1): [0.6, 0.85, 0.92], ("fp32", 2): [0.4, 0.7, 0.88],
              ("int8", 0): [0.5, 0.7, 0.85], ("int8", 1): [0.5, 0.6, 0.7], ("int8", 2): [0.6, 0.82, 0.86]}
    for cell in sweep.cells:
        codec = cell.config["codec"]
        failed = fail == f"{codec}-{cell.seed}"
        if not failed:
            fake_run(paths.runs / cell.run_id, codec, curves[codec, cell.seed], 4_000_000 if codec == "fp32" else 1_000_000)
        write_json_atomic(paths.outcome(cell), {"status": "failed" if failed else "ok",
                                                "reason": "client-1 exited 1: out of memory" if failed else None})
    return sweep, paths


def test_report_table_has_median_and_range_over_seeds_per_settings(tmp_path):
    sweep, paths = sweep_with_runs(tmp_path)
    report = build(sweep, paths.root, "python -m commlab.sweep r.json", "abc1234").read_text()
    summary = pd.read_csv(paths.root / "summary.csv").set_index("config")
    assert list(summary.index) == ["codec=fp32", "codec=int8"]  # settings apart, seeds together
    assert summary.loc["codec=fp32", "accuracy_median"] == pytest.approx(0.9)
    assert (summary.loc["codec=int8", "accuracy_min"], summary.loc["codec=int8", "accuracy_max"]) == (0.7, 0.86)
    assert summary.loc["codec=fp32", "MB_median"] == pytest.approx(3 * 5.0)
    # time to 80 %: fp32 seeds reach it at rounds 2, 2, 3; int8 at 3, never, 2 (walls 4.5 and 7.0 s);
    # a seed that never reached it counts as infinitely slow
    assert (summary.loc["codec=fp32", "ttt_min_s"], summary.loc["codec=fp32", "ttt_max_s"]) == (4.5, 7.0)
    int8 = summary.loc["codec=int8"]
    assert (int8["reached"], int8["ttt_min_s"], int8["ttt_median_s"], int8["ttt_max_s"]) == ("2/3", 4.5, 7.0, math.inf)
    assert "| 2 | codec=int8 | 3/3 |" in report and "7.0 [4.5 - not reached], 2/3 |" in report
    assert "| 1 | codec=fp32 | 3/3 | 90.00 % | 88.00 - 92.00 |" in report
    assert "`abc1234`" in report and "Shared by every cell:" in report
    for name in ("accuracy-bytes", "time-to-target", "accuracy-wall", "timeline"):
        assert (paths.root / "figures" / f"{name}.png").stat().st_size > 10_000
        assert f"figures/{name}.png" in report


def test_a_failed_cell_is_listed_with_its_reason_and_left_out_of_its_medians(tmp_path):
    sweep, paths = sweep_with_runs(tmp_path, fail="int8-1")
    report = build(sweep, paths.root, "cmd", "abc").read_text()
    assert "## Failed cells" in report and "client-1 exited 1: out of memory" in report
    row = pd.read_csv(paths.root / "summary.csv").set_index("config").loc["codec=int8"]
    assert row["runs"] == "2/3" and row["accuracy_median"] == pytest.approx((0.85 + 0.86) / 2)
    assert row["reached"] == "2/2"  # of the seeds that finished


def test_pareto_front_keeps_settings_no_other_beats_on_bytes_and_accuracy():
    points = pd.DataFrame({"config": list("abcde"), "MB_median": [1.0, 2.0, 3.0, 3.0, 0.5],
                           "accuracy_median": [0.8, 0.7, 0.9, 0.95, 0.6]})
    assert list(pareto_front(points)["config"]) == ["e", "a", "d"]


def test_timeline_places_measured_phases_back_to_back_and_the_wait_for_the_slowest(tmp_path):
    fake_run(tmp_path / "run", "fp32", [0.5, 0.6], 1000, round_s=3.0)
    rounds = pd.read_csv(tmp_path / "run" / "rounds.csv")
    clients = pd.concat([pd.read_csv(p) for p in sorted((tmp_path / "run").glob("clients-*.csv"))])
    bars = phases(rounds, clients, 1, 2)
    fast = bars[(bars["row"] == "client-0") & (bars["start_s"] < 3.0)].set_index("phase")
    # round 1: 0..3 s; compute 0.5, encode 0.1, upload 0.05, then wait until aggregation at 3 - 0.2 - 0.1
    assert fast.loc["compute", "start_s"] == 0 and fast.loc["encode", "start_s"] == pytest.approx(0.5)
    assert fast.loc["wait for slowest", "length_s"] == pytest.approx(2.7 - 0.65)
    slow = bars[(bars["row"] == "client-1") & (bars["start_s"] < 3.0)].set_index("phase")
    assert slow.loc["wait for slowest", "length_s"] == pytest.approx(2.7 - 1.65)
    controller = bars[bars["row"] == "controller"].set_index("phase")
    assert controller.loc["evaluate, checkpoint", "start_s"] == pytest.approx(3.0)
    assert controller.loc["evaluate, checkpoint", "length_s"] == pytest.approx(0.5)
    assert len(bars[bars["phase"] == "broadcast"]) == 2 * 3  # each round, on every row
    assert bars["length_s"].notna().all() and (bars["length_s"] >= 0).all()
