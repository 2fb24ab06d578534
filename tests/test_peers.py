"""The reference peers (docs/peers.md): a short gloo run on loopback writes the DDS workers' tables
and trains exactly as the DDS dense reference; hooks are validated; the centralized trainer runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from commlab.config_schema import ConfigError, from_dict
from commlab.peers.config import PeerConfig
from commlab.tables import COLUMNS

ROOT = Path(__file__).resolve().parents[1]
SHORT = ["--epochs", "1", "--train-subset", "640", "--test-subset", "200"]


def launch(tmp_path: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commlab.peers.run", "--results-dir", str(tmp_path), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def only_run(tmp_path: Path) -> Path:
    runs = [p for p in tmp_path.iterdir() if (p / "manifest.json").exists()]
    assert len(runs) == 1, runs
    return runs[0]


def test_unknown_hook_is_one_line(tmp_path):
    out = launch(tmp_path, "--kind", "gloo", "--hook", "int3", timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == "commlab.peers.run: --hook: must be one of none, fp16, powersgd, got 'int3'"
    with pytest.raises(ConfigError, match="hook: must be one of none, fp16, powersgd, got 'x'"):
        from_dict(PeerConfig, {"run_id": "r", "results_dir": str(tmp_path), "kind": "gloo", "hook": "x"})
    with pytest.raises(ConfigError, match="start_iter"):
        from_dict(PeerConfig, {"run_id": "r", "results_dir": str(tmp_path), "kind": "gloo", "hook": "powersgd",
                               "start_iter": 1})


@pytest.mark.parametrize("hook", ["none", "powersgd"])
def test_gloo_two_ranks_on_loopback(tmp_path, hook):
    out = launch(tmp_path, "--kind", "gloo", "--hook", hook, "--world", "2", *SHORT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    run = only_run(tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["kind"], manifest["method"], manifest["status"], manifest["world"]) == \
        ("ddp", f"gloo-{hook}", "completed", 2)
    for rank in (0, 1):
        steps = pd.read_csv(run / f"steps-rank{rank}.csv")
        epochs = pd.read_csv(run / f"epochs-rank{rank}.csv")
        assert list(steps.columns) == COLUMNS["steps"] and list(epochs.columns) == COLUMNS["epochs"]
        assert len(steps) == 10 and (steps["bytes_sent"] > 0).all()  # 640 // 2 // 32 steps
        assert len(epochs) == 1 and 0 < epochs["test_accuracy"].iloc[0] <= 1
    if hook == "powersgd":  # start_iter 2 dense steps, then rank-2 factors only
        density = pd.read_csv(run / "steps-rank0.csv")["density"]
        assert (density[:2] == 1.0).all() and (density[2:] < 0.05).all()


def test_gloo_none_matches_the_dds_dense_reference(tmp_path):
    """Same model init, shards, batch order and optimizer: after 10 steps the same test loss as the
    DDS workers' dense allreduce (the float sums differ only in order)."""
    gloo = launch(tmp_path / "gloo", "--kind", "gloo", "--world", "2", *SHORT)
    dds = subprocess.run([sys.executable, "-m", "commlab.ddp.run", "--method", "dense", "--world", "2", *SHORT,
                          "--results-dir", str(tmp_path / "dds")], cwd=ROOT, capture_output=True, text=True,
                         timeout=240)
    assert gloo.returncode == 0 and dds.returncode == 0, gloo.stderr[-1000:] + dds.stderr[-1000:]
    a = pd.read_csv(only_run(tmp_path / "gloo") / "epochs-rank0.csv").iloc[-1]
    b = pd.read_csv(only_run(tmp_path / "dds") / "epochs-rank0.csv").iloc[-1]
    assert a["test_accuracy"] == pytest.approx(b["test_accuracy"], abs=0.011)
    assert a["test_loss"] == pytest.approx(b["test_loss"], rel=1e-3)


def test_centralized_short_run(tmp_path):
    out = launch(tmp_path, "--kind", "centralized", "--world", "2", *SHORT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    run = only_run(tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["method"], manifest["status"], manifest["processes"]) == ("centralized", "completed", 1)
    steps = pd.read_csv(run / "steps-rank0.csv")
    assert len(steps) == 10 and (steps["bytes_sent"] == 0).all()  # same steps as 2 ranks of 32 each
    assert 0 < pd.read_csv(run / "epochs-rank0.csv")["test_accuracy"].iloc[0] <= 1


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_gloo_powersgd_in_shaped_namespaces(tmp_path):
    """Each rank in its own namespace on a 10 Mbit eth0 (the master is rank 0's 198.19.253.x address);
    bytes come from eth0's counters: PowerSGD rank 2 sends well under 200 KB a step after start_iter."""
    out = launch(tmp_path, "--kind", "gloo", "--hook", "powersgd", "--world", "2", "--profile", "10mbit", *SHORT,
                 timeout=400)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    run = only_run(tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["link_applied"]["worker-1"]["applied"]["rate"] == "10mbit"
    assert "eth0" in manifest["bytes_measured"]
    steps = pd.read_csv(run / "steps-rank1.csv")
    assert steps["bytes_sent"][:2].min() > 3_000_000  # dense start: about half the 6.65 MB vector (2 ranks)
    assert steps["bytes_sent"][4:].max() < 200_000
