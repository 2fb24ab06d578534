"""A DP-FedAvg run through real node processes: rounds.csv carries the accountant's epsilon
after every round, and the manifest the noise seed the run drew."""
from __future__ import annotations

import csv
import json

import pytest

from commlab.privacy.accountant import epsilon
from commlab.testbed.node_procs import start_fl

pytestmark = pytest.mark.slow


def test_a_dp_run_writes_the_accountants_epsilon_each_round(tmp_path, domain):
    procs, _, run_dir = start_fl(tmp_path, domain, 2, clients=4, extra=(
        "--procs", "2", "--per-round", "2", "--dp-noise", "1.0", "--dp-clip", "0.5", "--dp-delta", "1e-3",
        "--model-param", "hidden=16"))
    try:
        for p in procs.values():
            assert p.finish(timeout=600) == 0, p.text()  # the processes share 2 cores with other runs
    finally:
        for p in procs.values():
            p.stop()
    with open(run_dir / "rounds.csv") as f:
        spent = [float(row["epsilon"]) for row in csv.DictReader(f)]
    assert spent == pytest.approx([epsilon(1.0, 0.5, r, 1e-3) for r in (1, 2)], rel=1e-9)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert isinstance(manifest["seeds"]["dp_noise"], int)
    assert manifest["config"]["privacy"]["noise_multiplier"] == 1.0
