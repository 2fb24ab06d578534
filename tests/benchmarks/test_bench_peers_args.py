"""bench_peers without running anything: --model, --dataset and --batch-size reach every case's
command line; the ratio columns (to gloo-none, to DDS dense ring's bytes, to gloo PowerSGD's step
time, and CPU seconds per step) are computed from the rows, and left empty where their case did not
run; a case given twice is refused."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from commlab.peers.run import build_config, parse_args

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
bench_peers = pytest.importorskip("bench_peers")
common = pytest.importorskip("bench_peers_common")

RESNET = ["--model", "resnet18", "--dataset", "synthetic:cifar10", "--batch-size", "8"]


def args(tmp_path: Path, *extra: str):
    return common.parse_cases(bench_peers.parser(), ["--results-dir", str(tmp_path), *extra], bench_peers.TABLE)


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_model_dataset_and_batch_reach_every_case(tmp_path):
    a = args(tmp_path, *RESNET)
    for case in bench_peers.CASES:
        argv = bench_peers.command(case, a, f"run-{case}")
        assert (flag(argv, "--model"), flag(argv, "--dataset"), flag(argv, "--batch-size")) == \
            ("resnet18", "synthetic:cifar10", "8"), case


def test_the_peers_launcher_takes_the_model(tmp_path):
    """What bench_peers passes a gloo case becomes the peers' config (so the gloo ranks build ResNet-18)."""
    a = args(tmp_path, *RESNET)
    argv = bench_peers.command("gloo-powersgd", a, "run-gloo")
    cfg = build_config(parse_args(argv[argv.index("commlab.peers.run") + 1:]))
    assert cfg["model"]["name"] == "resnet18" and cfg["dataset"]["name"] == "synthetic:cifar10"
    assert cfg["training"]["batch_size"] == 8


def test_the_defaults_stay_the_mnist_cnn(tmp_path):
    argv = bench_peers.command("dds-dgc", args(tmp_path), "run")
    assert (flag(argv, "--model"), flag(argv, "--dataset"), flag(argv, "--batch-size")) == ("mnist_cnn", "mnist", "32")


def row(case: str, nbytes: float, step_s: float, acc: float = 0.5) -> dict:
    return {"case": case, "bytes_sent_per_rank_step_after_warmup": nbytes, "step_time_s": step_s, "test_accuracy": acc}


def test_ratios_to_dense_ring_bytes_and_powersgd_step_time():
    rows = [row("dds-dense-ring", 60_000_000, 50.0), row("gloo-none", 62_000_000, 55.0),
            row("dds-dgc", 90_000, 1.5, 0.45), row("gloo-powersgd", 300_000, 3.0)]
    t = bench_peers.TABLE
    common.add_ratios(rows, t.all_ratios)
    common.add_accuracy_delta(rows, t.reference, t.acc_delta)
    by = {r["case"]: r for r in rows}
    dgc = by["dds-dgc"]
    assert dgc["bytes_x_of_dds_dense_ring"] == 0.0015  # four significant digits: 1/666.7
    assert dgc["step_time_x_of_gloo_powersgd"] == 0.5
    assert dgc["acc_delta_vs_gloo_none_pts"] == -5.0
    assert by["dds-dense-ring"]["step_time_x_of_gloo_none"] == pytest.approx(0.9091)
    assert by["dds-dense-ring"]["bytes_x_of_dds_dense_ring"] == 1.0
    assert {"bytes_x_of_dds_dense_ring", "step_time_x_of_gloo_powersgd"} <= set(t.fields)


def test_a_ratio_to_a_case_that_did_not_run_stays_empty():
    rows = [row("dds-dgc", 90_000, 1.5), row("gloo-none", 62_000_000, 55.0)]
    common.add_ratios(rows, bench_peers.TABLE.all_ratios)
    assert "bytes_x_of_dds_dense_ring" not in rows[0] and "step_time_x_of_gloo_powersgd" not in rows[0]
    assert rows[0]["bytes_x_of_gloo_none"] == pytest.approx(90_000 / 62_000_000, rel=1e-3)


def test_a_case_given_twice_is_one_line_not_a_shared_run_folder(tmp_path, capsys):
    """A repeat would get its first run's id, and its tables would be appended to the first's."""
    with pytest.raises(SystemExit) as e:
        args(tmp_path, "--only", "dds-dense-ring,gloo-none,dds-dense-ring")
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "dds-dense-ring given more than once" in err and "gloo-none" not in err


def test_cpu_seconds_per_step_are_measured_and_set_against_gloos(tmp_path):
    """The median CPU seconds of a rank's process per step (steps >= --skip), and its ratio to gloo-none's."""
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"kind": "ddp", "model": "mnist_cnn", "dataset": "mnist", "link_profile": "lan", "method": "dense",
         "config": {}, "steps_per_epoch": 8, "world": 1, "epochs": 1, "status": "completed"}))
    zeros = dict.fromkeys(("bytes_sent", "bytes_received", "comm_time_s", "compute_time_s", "compress_time_s",
                           "decompress_time_s", "train_loss"), 0.0)
    pd.DataFrame([{"step": k, "epoch": 0, "rank": 0, "step_time_s": 0.2, "density": 1.0, **zeros,
                   "cpu_time_s": 9.0 if k < 4 else 0.05 + 0.01 * (k % 2)} for k in range(8)]
                 ).to_csv(tmp_path / "steps-rank0.csv", index=False)
    pd.DataFrame([{"epoch": 0, "rank": 0, "step": 8, "test_accuracy": 0.9, "test_loss": 0.3, "epoch_time_s": 2.0}]
                 ).to_csv(tmp_path / "epochs-rank0.csv", index=False)
    measured = bench_peers.measure("dds-dense-ring", args(tmp_path), tmp_path)
    assert measured["cpu_time_s"] == 0.055  # the first 4 steps (--skip) left out
    rows = [{**row("dds-dense-ring", 1, 0.2), "cpu_time_s": 0.055}, {**row("gloo-none", 1, 0.2), "cpu_time_s": 0.05}]
    common.add_ratios(rows, bench_peers.TABLE.all_ratios)
    assert rows[0]["cpu_time_x_of_gloo_none"] == pytest.approx(1.1)
