"""FL end to end on the workloads beyond MNIST, each a couple of rounds on small data in the
official formats (tests/fixtures/official_formats.py), local node processes: resnet20 on CIFAR-10
(BatchNorm statistics in the updates), femnist_cnn on FEMNIST and char_lstm on Shakespeare, both
split by LEAF's writers and roles."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from commlab.config.builders import build_dataset
from commlab.config.schema import DatasetSection
from commlab.data import load_raw, partition_dataset
from commlab.data.partition import client_summary
from commlab.models import build_model, flatten_params
from fixtures.official_formats import write_cifar, write_leaf

WRITERS = {"f0100_11": 40, "f0101_22": 24, "f0102_33": 32, "f0103_44": 16}
ROLES = {"THE_TEMPEST_PROSPERO": 30, "THE_TEMPEST_ARIEL": 20, "HAMLET_OPHELIA": 26}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_cifar(root, "cifar10", train_per_class=5000, test_per_class=1000)  # the official sizes
    load_raw("cifar10", root)  # converted once here: the nodes read the cache
    write_leaf(root, "femnist", WRITERS)
    write_leaf(root, "shakespeare", ROLES)
    return root


def fl_run(tmp_path: Path, data_dir: Path, domain: int, *flags: str) -> tuple[Path, dict, list[dict]]:
    run_id = "workload"
    r = subprocess.run([sys.executable, "-m", "commlab.fl.run", "--codec", "fp32", "--clients", "2", "--rounds", "2",
                        "--samples-per-round", "24", "--batch-size", "8", "--deadline", "60", "--backend", "local",
                        "--domain-id", str(domain), "--results-dir", str(tmp_path), "--run-id", run_id, *flags],
                       capture_output=True, text=True, timeout=180, env={**os.environ, "COMMLAB_DATA_DIR": str(data_dir)})
    run = tmp_path / run_id
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    manifest = json.loads((run / "manifest.json").read_text())
    with open(run / "rounds.csv") as f:
        rows = list(csv.DictReader(f))
    assert manifest["status"] == "completed" and [int(r["round"]) for r in rows] == [1, 2]
    return run, manifest, rows


@pytest.mark.slow
def test_resnet20_on_cifar10_sends_its_batchnorm_statistics(tmp_path, data_dir, domain):
    _, manifest, rows = fl_run(tmp_path, data_dir, domain, "--model", "resnet20", "--dataset", "cifar10",
                               "--partition", "dirichlet", "--train-subset", "400", "--test-subset", "50")
    assert (manifest["model"], manifest["dataset"], manifest["config"]["batchnorm"]) == ("resnet20", "cifar10",
                                                                                       "aggregate")
    data = build_dataset(DatasetSection("cifar10", root=str(data_dir), train_subset=400, test_subset=50))
    expected = client_summary(data, partition_dataset(data, 2, "dirichlet", seed=0, alpha=0.5))
    assert manifest["client_data"] == dict(zip(["client-0", "client-1"], expected))
    assert sum(c["samples"] for c in expected) == 400 and len(expected[0]["label_histogram"]) == 10
    vector = 4 * flatten_params(build_model("resnet20"), buffers=True).size  # fp32: parameters and statistics
    for row in rows:  # two fp32 updates up, two whole models down, plus headers
        assert 2 * vector < int(row["bytes_up"]) < 2.2 * vector and 2 * vector < int(row["bytes_down"]) < 2.2 * vector
        assert 0 <= float(row["test_accuracy"]) <= 1


@pytest.mark.slow
def test_femnist_cnn_on_femnist_split_by_writer(tmp_path, data_dir, domain):
    _, manifest, _ = fl_run(tmp_path, data_dir, domain, "--model", "femnist_cnn", "--dataset", "femnist",
                                 "--partition", "natural")
    data = build_dataset(DatasetSection("femnist", root=str(data_dir)))
    parts = partition_dataset(data, 2, "natural", seed=0)
    assert manifest["client_data"] == dict(zip(["client-0", "client-1"], client_summary(data, parts)))
    assert [len(set(data.train_groups[p].tolist())) for p in parts] == [2, 2]  # two whole writers each
    assert all(len(c["label_histogram"]) == 62 for c in manifest["client_data"].values())


@pytest.mark.slow
def test_char_lstm_on_shakespeare_split_by_role(tmp_path, data_dir, domain):
    _, manifest, rows = fl_run(tmp_path, data_dir, domain, "--model", "char_lstm", "--dataset", "shakespeare",
                               "--partition", "natural")
    raw = load_raw("shakespeare", data_dir)
    samples = sorted(c["samples"] for c in manifest["client_data"].values())
    per_role = sorted(int((raw.train_groups == i).sum()) for i in range(len(ROLES)))
    assert sum(samples) == len(raw.train_y) and samples[0] in per_role  # one role and two roles
    vector = 4 * 819_920
    assert all(2 * vector < int(r["bytes_up"]) < 2.2 * vector for r in rows)
