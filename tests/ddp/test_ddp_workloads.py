"""DDP beyond MNIST: resnet18 (11.2 M parameters, BatchNorm) on synthetic CIFAR-10-shaped data,
two ranks, a few steps; every rank ends the epoch with the same BatchNorm statistics."""
from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
import torch

from commlab.ddp.checkpoint import load_checkpoint


@pytest.mark.slow
def test_resnet18_on_synthetic_cifar10_two_ranks(tmp_path, domain):
    r = subprocess.run([sys.executable, "-m", "commlab.ddp.run", "--method", "dense", "--world", "2", "--epochs", "1",
                        "--model", "resnet18", "--dataset", "synthetic:cifar10", "--train-subset", "32",
                        "--test-subset", "16", "--batch-size", "8", "--collective-timeout", "60",
                        "--domain-id", str(domain), "--results-dir", str(tmp_path), "--run-id", "r18"],
                       capture_output=True, text=True, timeout=240)
    run = tmp_path / "r18"
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["status"], manifest["model"], manifest["dataset"]) == ("completed", "resnet18", "synthetic:cifar10")
    steps = [pd.read_csv(run / f"steps-rank{k}.csv") for k in (0, 1)]
    assert len(steps[0]) == len(steps[1]) == 2  # 32 samples / 2 ranks / batch 8
    assert (steps[0]["bytes_sent"] > 4 * 11_173_962).all()  # the dense ring sends the whole gradient at W=2
    states = [load_checkpoint(run / f"checkpoint-rank{k}.pt")["model"] for k in (0, 1)]
    buffers = [k for k in states[0] if "running_" in k]
    assert len(buffers) == 2 * 20  # mean and variance of resnet18's 20 BatchNorm layers
    assert all(torch.equal(states[0][k], states[1][k]) for k in buffers)
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])  # the weights agree too
