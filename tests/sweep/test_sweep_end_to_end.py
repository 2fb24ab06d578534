"""A tiny sweep end to end: two FL cells of one round through `python -m commlab.sweep`, the
report written, and the same command again runs nothing."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
@pytest.mark.timeout(1200)  # two launcher runs one after the other, each a few minutes on a loaded machine
def test_two_cell_sweep_runs_reports_and_resumes_with_nothing_left(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({
        "fixed": {"clients": 2, "samples-per-round": 64, "batch-size": 32, "train-subset": 400, "test-subset": 100},
        "grid": {"codec": ["fp32", "int8"]}, "seeds": [0], "stop": {"rounds": 1}, "target_accuracy": 0.05,
        "cell_timeout_s": 500}))
    command = [sys.executable, "-m", "commlab.sweep", str(path), "--results-dir", str(tmp_path / "results")]
    first = subprocess.run(command, capture_output=True, text=True, timeout=1100)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    root = tmp_path / "results" / "sweeps" / "tiny"
    outcomes = [json.loads(p.read_text()) for p in sorted((root / "cells").glob("*.json"))]
    assert [o["status"] for o in outcomes] == ["ok", "ok"]
    assert all((root / "runs" / o["run_id"] / "rounds.csv").exists() for o in outcomes)
    report = (root / "report.md").read_text()
    assert "| 1 | codec=fp32 | 1/1 |" in report and "| 2 | codec=int8 | 1/1 |" in report
    assert (root / "figures" / "timeline.png").exists()
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "2 finished before (0 of them failed), 0 to run" in again.stdout
    assert "started" not in again.stdout
