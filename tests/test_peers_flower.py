"""The Flower FedAvg peer (docs/peers.md): a short run on loopback writes the FL tables, and with the
same seeds it trains what the DDS fl-fp32 run trains (the FL peer benchmark's smoke mode:
tests/test_bench_peers_smoke.py). Skipped when flwr (a test dependency, pyproject.toml) is not installed."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from commlab.report.runs import load_run
from commlab.tables import COLUMNS

pytest.importorskip("flwr", reason="flwr not installed (pyproject.toml [test]: pip install -e '.[test]')",
                    exc_type=ImportError)

ROOT = Path(__file__).resolve().parents[1]
SHORT = ["--clients", "2", "--rounds", "2", "--samples-per-round", "300", "--train-subset", "2000",
         "--test-subset", "500", "--profile", "lan"]


def test_flower_two_clients_on_loopback(tmp_path):
    out = subprocess.run([sys.executable, "-m", "commlab.peers.run", "--kind", "flower", *SHORT,
                          "--results-dir", str(tmp_path), "--run-id", "flower"],
                         cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    run = tmp_path / "flower"
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["kind"], manifest["codec"], manifest["status"], manifest["clients"], manifest["rounds"]) == \
        ("fl", "flower-fedavg", "completed", 2, 2)
    rounds = pd.read_csv(run / "rounds.csv")
    assert list(rounds.columns) == [c for c in COLUMNS["rounds"] if c != "broadcast_time_s"]
    assert list(rounds["round"]) == [1, 2]
    assert (rounds["n_participants"] == 2).all() and (rounds["bytes_up"] > 2 * 6_000_000).all()
    for i in (0, 1):
        clients = pd.read_csv(run / f"clients-{i}.csv")
        assert set(clients.columns) <= set(COLUMNS["clients"]) and list(clients["num_samples"]) == [300, 300]
    load_run(run)  # `make plots` reads it beside the DDS runs
