"""The Flower FedAvg peer (docs/peers.md): a short run on loopback writes the FL tables, and with the
same seeds it trains what the DDS fl-fp32 run trains (tests/benchmarks/test_bench_peers_smoke.py);
in Flower's deployment runtime (SuperLink, SuperNodes, `flwr run`: `--transport deployment`) it
trains exactly what the legacy transport trains, and leaves no process behind. The runs are the FL
peer benchmark's smoke runs (2 clients, 2 rounds of 300 samples, 2000/500-sample subsets, lan),
made once a session (conftest's `peers_fl_smoke`). Skipped when flwr (a test dependency,
pyproject.toml) is not installed."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from commlab.config.schema import ConfigError, from_dict
from commlab.output.tables import COLUMNS
from commlab.report.runs import load_run

pytest.importorskip("flwr", reason="flwr not installed (pyproject.toml [test]: pip install -e '.[test]')",
                    exc_type=ImportError)

from commlab.peers.flower import FlowerConfig  # noqa: E402  (after the skip: its nodes need flwr)

ROOT = Path(__file__).resolve().parents[2]
# The first test to ask for the session's smoke run makes it: every FL case, two at a time.
SMOKE_TIMEOUT = pytest.mark.timeout(900)


def flower_run(smoke, case: str) -> tuple[Path, str]:
    """The run folder of a Flower case of the smoke benchmark and what its launcher printed."""
    return smoke.run_dir(case), smoke.output(case)


def digests(stdout: str) -> list[str]:
    """The model digest the server printed after each round (`[controller] flower round r/R ... model D`)."""
    return re.findall(r"^\[controller\] flower round \d+/\d+ .* model ([0-9a-f]+)$", stdout, re.M)


@pytest.fixture
def legacy(peers_fl_smoke) -> tuple[Path, str]:
    return flower_run(peers_fl_smoke, "flower")


@pytest.mark.slow
def test_transport_is_validated():
    base = {"run_id": "r", "results_dir": "/tmp"}
    assert from_dict(FlowerConfig, base).transport == "grpc-bidi"
    assert from_dict(FlowerConfig, {**base, "transport": "deployment"}).transport == "deployment"
    with pytest.raises(ConfigError, match="transport: must be one of grpc-bidi, deployment, got 'rest'"):
        from_dict(FlowerConfig, {**base, "transport": "rest"})
    out = subprocess.run([sys.executable, "-m", "commlab.peers.run", "--kind", "flower", "--transport", "rest",
                          "--run-id", "never"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        "commlab.peers.run: transport: must be one of grpc-bidi, deployment, got 'rest'"], out.stderr


@pytest.mark.slow
@SMOKE_TIMEOUT
def test_flower_two_clients_on_loopback(legacy):
    run, _ = legacy
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["kind"], manifest["codec"], manifest["status"], manifest["clients"], manifest["rounds"]) == \
        ("fl", "flower-fedavg", "completed", 2, 2)
    assert manifest["transport"] == "flower grpc-bidi"
    rounds = pd.read_csv(run / "rounds.csv")
    assert list(rounds.columns) == [c for c in COLUMNS["rounds"] if c != "broadcast_time_s"]
    assert list(rounds["round"]) == [1, 2]
    assert (rounds["n_participants"] == 2).all() and (rounds["bytes_up"] > 2 * 6_000_000).all()
    for i in (0, 1):
        clients = pd.read_csv(run / f"clients-{i}.csv")
        assert set(clients.columns) <= set(COLUMNS["clients"]) and list(clients["num_samples"]) == [300, 300]
    load_run(run)  # `make plots` reads it beside the DDS runs


def flower_processes_of(run: Path) -> list[str]:
    """Live processes whose Flower home is in this run's folder (every Flower process the deployment
    run started has FLWR_HOME=<run>/flower-home/<node>)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(v.startswith(b"FLWR_HOME=" + os.fsencode(run)) for v in env):
            found.append(f"{proc.name}: {cmd}")
    return found


@pytest.mark.slow
@SMOKE_TIMEOUT
def test_flower_deployment_trains_as_the_legacy_transport(peers_fl_smoke, legacy):
    """SuperLink + 2 SuperNodes + flwr run on loopback: the same tables, the same model after every
    round as the legacy transport (Flower aggregates both in float32 in the same order), and every
    process it started is gone afterwards."""
    legacy_run, legacy_out = legacy
    run, out = flower_run(peers_fl_smoke, "flower-deployment")
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["codec"], manifest["status"], manifest["transport"], manifest["config"]["transport"]) == \
        ("flower-fedavg", "completed", "flower deployment", "deployment")
    app = (run / "flower-app" / "pyproject.toml").read_text()
    assert 'serverapp = "commlab.peers.flower_app:server_app"' in app
    rounds, reference = pd.read_csv(run / "rounds.csv"), pd.read_csv(legacy_run / "rounds.csv")
    assert list(rounds.columns) == list(reference.columns) and list(rounds["round"]) == [1, 2]
    assert (rounds["n_participants"] == 2).all() and (rounds["bytes_up"] > 2 * 6_000_000).all()
    assert list(rounds["test_accuracy"]) == list(reference["test_accuracy"])
    assert (abs(rounds["test_loss"] - reference["test_loss"]) < 1e-6).all(), (rounds, reference)
    assert len(digests(out)) == 2 and digests(out) == digests(legacy_out), (digests(out), digests(legacy_out))
    for i in (0, 1):
        clients = pd.read_csv(run / f"clients-{i}.csv")
        assert list(clients.columns) == list(pd.read_csv(legacy_run / f"clients-{i}.csv").columns)
        assert list(clients["num_samples"]) == [300, 300] and (clients["bytes_up"] > 6_000_000).all()
    assert not list(run.glob(".clients-*.pending.json"))
    assert flower_processes_of(run) == []
    load_run(run)
