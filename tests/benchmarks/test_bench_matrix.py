"""bench_matrix's seed combination: deltas are paired by seed, then summarised."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from commlab.sweep.spec import load

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
bench_matrix = pytest.importorskip("bench_matrix")


def run(mode: str, name: str, seed: int, acc: float, nbytes: float = 100.0, status: str = "ok") -> dict:
    return {"mode": mode, "compressor": name, "seed": seed, "run_id": f"{mode}-{name}-{seed}", "status": status,
            "bytes_per_node": nbytes, "comm_time_s": 0.5, "test_accuracy": acc}


def test_deltas_are_paired_by_seed_and_their_median_is_reported():
    runs = pd.DataFrame([
        run("ddp", "fp32", 0, 0.980), run("ddp", "fp32", 1, 0.990), run("ddp", "fp32", 2, 0.970),
        # Against one reference (seed 0) these would be -0.5, +0.5, -1.5 pp; paired they are all -0.5.
        run("ddp", "dgc", 0, 0.975, 1.0), run("ddp", "dgc", 1, 0.985, 1.0), run("ddp", "dgc", 2, 0.965, 1.0),
    ])
    table = bench_matrix.combine(runs, payload=100).set_index("compressor")
    assert table.loc["dgc", "accuracy_delta_pp"] == pytest.approx(-0.5)
    assert table.loc["dgc", "delta_min_pp"] == pytest.approx(-0.5)
    assert table.loc["dgc", "delta_max_pp"] == pytest.approx(-0.5)
    assert table.loc["dgc", "bytes_x_of_fp32"] == pytest.approx(0.01)
    assert table.loc["dgc", "seeds"] == 3 and table.index[0] == "fp32"


def test_median_range_and_a_failed_seed():
    runs = pd.DataFrame([
        run("fl", "fp32", 0, 0.98), run("fl", "fp32", 1, 0.98), run("fl", "fp32", 2, 0.98),
        run("fl", "int8", 0, 0.97), run("fl", "int8", 1, 0.99), run("fl", "int8", 2, float("nan"), status="exit 1"),
    ])
    row = bench_matrix.combine(runs, payload=100).set_index("compressor").loc["int8"]
    assert row["status"] == "exit 1" and row["seeds"] == 2
    assert row["accuracy_delta_pp"] == pytest.approx(0.0)  # median of -1 and +1
    assert (row["delta_min_pp"], row["delta_max_pp"]) == (pytest.approx(-1.0), pytest.approx(1.0))


def test_the_centralized_peer_runs_at_each_modes_budget_and_is_tabled_last(tmp_path):
    a = bench_matrix.argparse.Namespace(clients=2, fl_rounds=10, fl_samples=6000, world=3, ddp_epochs=2,
                                        ddp_train_subset=20000, dgc_warmup=0.25, results_dir=tmp_path,
                                        dataset="fashion_mnist")
    sweep_file = tmp_path / "m.json"
    sweep_file.write_text(json.dumps({"cells": [bench_matrix.cell(mode, "centralized", a) for mode in ("fl", "ddp")],
                                      "seeds": [1]}))
    fl, ddp = (c.argv(tmp_path, None) for c in load(sweep_file).cells)

    def flag(cmd: list[str], name: str) -> str:
        return cmd[cmd.index(name) + 1]
    # FL: one process, as many samples as 2 clients x 10 rounds x 6000 (x 1 local epoch) on all the data.
    assert (flag(fl, "--kind"), flag(fl, "--world"), flag(fl, "--samples"), flag(fl, "--train-subset")) \
        == ("centralized", "1", "120000", "0")
    # DDP: the WORLD workers' shards and epochs.
    assert (flag(ddp, "--world"), flag(ddp, "--epochs"), flag(ddp, "--train-subset")) == ("3", "2", "20000")
    assert all(flag(c, "--seed") == "1" and flag(c, "--profile") == "lan" and flag(c, "--dataset") == "fashion_mnist"
               for c in (fl, ddp))
    runs = pd.DataFrame([run("fl", "centralized", 0, 0.99, 0.0), run("fl", "int8", 0, 0.97), run("fl", "fp32", 0, 0.98)])
    table = bench_matrix.combine(runs, payload=100)
    assert list(table["compressor"]) == ["fp32", "int8", "centralized"]
    assert table.set_index("compressor").loc["centralized", "accuracy_delta_pp"] == pytest.approx(1.0)


@pytest.mark.parametrize("method, params, first_steady", [
    ("dense", {}, 0), ("int8", {}, 0), ("powersgd2", {}, 2), ("powersgd2", {"start_iter": 5}, 5),
    ("dgc", {"warmup_length": 2, "warmup_unit": "epochs"}, 8), ("dgc", {}, 4)])
def test_ddp_bytes_are_those_of_the_steady_state(tmp_path, method, params, first_steady):
    """DGC's warm-up (default in DDP: one epoch) and PowerSGD's whole steps (start_iter) are left
    out of the bytes per step."""
    from bench_ddp import summarise
    config = {"method_params": params}
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"kind": "ddp", "model": "mnist_cnn", "dataset": "mnist", "link_profile": "lan", "method": method,
         "config": config, "steps_per_epoch": 4, "world": 3, "epochs": 3, "status": "finished"}))
    zeros = {c: 0.0 for c in ("comm_time_s", "compute_time_s", "compress_time_s", "decompress_time_s", "step_time_s",
                              "train_loss")}
    pd.DataFrame([{"step": k, "epoch": k // 4, "rank": 0, "bytes_sent": 1000 if k < first_steady else 10,
                   "bytes_received": 10, "density": 1.0, **zeros} for k in range(12)]
                 ).to_csv(tmp_path / "steps-rank0.csv", index=False)
    pd.DataFrame([{"epoch": 2, "rank": 0, "step": 11, "test_accuracy": 0.9, "test_loss": 0.3, "epoch_time_s": 1.0}]
                 ).to_csv(tmp_path / "epochs-rank0.csv", index=False)
    assert summarise(tmp_path)["bytes_sent_per_step_after_warmup"] == 10
