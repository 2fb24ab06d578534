"""The reference peers (docs/peers.md): hooks and the sample budget are validated; gloo in shaped
namespaces. Short gloo and centralized runs on loopback (tables, identical training to DDS dense):
tests/benchmarks/test_bench_peers_smoke.py, which runs `make bench-peers SMOKE=1`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from commlab.config.schema import ConfigError, from_dict
from commlab.peers.config import PeerConfig
from commlab.peers.run import build_config, parse_args

ROOT = Path(__file__).resolve().parents[2]
SHORT = ["--epochs", "1", "--train-subset", "640", "--test-subset", "200"]


def launch(tmp_path: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commlab.peers.run", "--results-dir", str(tmp_path), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def only_run(tmp_path: Path) -> Path:
    runs = [p for p in tmp_path.iterdir() if (p / "manifest.json").exists()]
    assert len(runs) == 1, runs
    return runs[0]


@pytest.mark.slow
def test_unknown_hook_is_one_line(tmp_path):
    out = launch(tmp_path, "--kind", "gloo", "--hook", "int3", timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == "commlab.peers.run: --hook: must be one of none, fp16, powersgd, got 'int3'"
    with pytest.raises(ConfigError, match="hook: must be one of none, fp16, powersgd, got 'x'"):
        from_dict(PeerConfig, {"run_id": "r", "results_dir": str(tmp_path), "kind": "gloo", "hook": "x"})
    with pytest.raises(ConfigError, match="start_iter"):
        from_dict(PeerConfig, {"run_id": "r", "results_dir": str(tmp_path), "kind": "gloo", "hook": "powersgd",
                               "start_iter": 1})


@pytest.mark.slow
def test_sample_budget_is_the_centralized_peers_only(tmp_path):
    """--samples (the FL benchmark's centralized row): ceil(N / (world x batch)) steps over as many epochs
    as that takes; any other kind says so in one line. The short loopback runs of gloo (none, fp16,
    powersgd), of the centralized trainer and DDS dense vs gloo none are `make bench-peers SMOKE=1`'s,
    checked in tests/benchmarks/test_bench_peers_smoke.py."""
    out = launch(tmp_path, "--kind", "gloo", "--samples", "1200", timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == "commlab.peers.run: --samples: a positive budget of the centralized peer only, got 1200"
    a = parse_args(["--kind", "centralized", "--world", "1", "--batch-size", "64", "--train-subset", "2000",
                    "--samples", "1200", "--results-dir", str(tmp_path)])
    cfg = build_config(a)
    assert (cfg["max_steps"], cfg["training"]["epochs"]) == (19, 1)  # 31 steps an epoch
    a.samples = 5000
    cfg = build_config(a)
    assert (cfg["max_steps"], cfg["training"]["epochs"]) == (79, 3)
    with pytest.raises(ConfigError, match="max_steps"):
        from_dict(PeerConfig, {"run_id": "r", "results_dir": str(tmp_path), "kind": "gloo", "max_steps": 3})


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_gloo_powersgd_in_shaped_namespaces(tmp_path):
    """Each rank in its own namespace on a 100 Mbit eth0 (the master is rank 0's 198.19.253.x address);
    bytes come from eth0's counters: PowerSGD rank 2 sends well under 200 KB a step after start_iter."""
    out = launch(tmp_path, "--kind", "gloo", "--hook", "powersgd", "--world", "2", "--profile", "100mbit", *SHORT,
                 timeout=400)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    run = only_run(tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["link_applied"]["worker-1"]["applied"]["rate"] == "100mbit"
    assert "eth0" in manifest["bytes_measured"]
    steps = pd.read_csv(run / "steps-rank1.csv")
    assert steps["bytes_sent"][:2].min() > 3_000_000  # dense start: about half the 6.65 MB vector (2 ranks)
    assert steps["bytes_sent"][4:].max() < 200_000


def test_one_ddp_bucket_holds_the_whole_gradient_of_any_model(tmp_path):
    """gloo's DDP bucket (config 0: sized from the model) holds every gradient in one allreduce, ResNet-18's
    44.7 MB too (two buckets would make torch's PowerSGD hook race over gloo); a negative size is refused."""
    from commlab.models import build_model
    from commlab.peers.gloo import one_bucket_mb
    for name in ("mnist_cnn", "resnet18"):
        model = build_model(name)
        grad_bytes = sum(p.numel() * 4 for p in model.parameters() if p.requires_grad)
        assert grad_bytes < one_bucket_mb(model) * 2**20 < grad_bytes + 2**21, name
    with pytest.raises(ConfigError, match="bucket_cap_mb: must be >= 0"):
        from_dict(PeerConfig, {"run_id": "r", "results_dir": str(tmp_path), "kind": "gloo", "bucket_cap_mb": -1})
