"""The peer benchmarks' smoke modes, as CI runs them: `bench_peers.py --smoke` (DDS DDP cases
beside torch DDP over gloo and the centralized trainer) and `bench_peers_fl.py --smoke` (DDS FL beside
Flower FedAvg and the centralized trainer), each once on loopback into a temporary results folder.
Checked: the table is written, every case's row is there with status ok and finite numbers, the ratio
columns are computed against the reference peer, the centralized accuracy is printed beside the table,
and what does not depend on timing: DDS wire bytes per codec, identical training of DDS dense and gloo
without a hook (and of DDS fp32 and Flower, and of Flower's two transports), and the runs' own
tables. Times are only checked finite."""
from __future__ import annotations

import json
import math
import numbers
import re

import pandas as pd
import pytest

from commlab.output.tables import COLUMNS
from peer_benches import Bench

DDP_CASES = ["dds-dense-ring", "dds-dense-naive", "dds-int8", "dds-dgc", "dds-powersgd2",
             "gloo-none", "gloo-fp16", "gloo-powersgd", "centralized"]
FL_CASES = ["dds-fp32", "dds-int8_sparse", "flower", "flower-deployment", "centralized"]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the first test of each bench also runs it (fixture)


# Each made once a session (conftest): other areas check some of their runs (tests/peer_benches.py).
@pytest.fixture
def ddp(peers_ddp_smoke) -> Bench:
    return peers_ddp_smoke


@pytest.fixture
def fl(peers_fl_smoke) -> Bench:
    return peers_fl_smoke


def finite(table: pd.DataFrame, cases: list[str], columns: list[str]) -> None:
    for case in cases:
        for col in columns:
            value = table.loc[case, col]
            assert isinstance(value, numbers.Real) and math.isfinite(value), (case, col, value)


def printed_centralized(bench: Bench) -> None:
    """The centralized accuracy is printed beside the table, and is the table's."""
    m = re.search(r"^centralized \(.+\): test accuracy ([0-9.]+) %$", bench.stdout, re.M)
    assert m, bench.stdout[-2000:]
    assert float(m.group(1)) == pytest.approx(100 * bench.table.loc["centralized", "test_accuracy"], abs=0.006)


def test_ddp_smoke_table(ddp):
    t = ddp.table
    assert list(t.index) == DDP_CASES and (t["status"] == "ok").all(), t["status"].to_dict()
    finite(t, DDP_CASES, ["bytes_sent_per_rank_step_after_warmup", "step_time_s", "comm_time_s", "test_accuracy",
                          "bytes_x_of_gloo_none", "step_time_x_of_gloo_none", "acc_delta_vs_gloo_none_pts", "steps"])
    assert (t["steps"] == 10).all()  # 640 samples, world 2, batch 32
    assert ((t["test_accuracy"] > 0) & (t["test_accuracy"] <= 1)).all()
    assert t.loc["gloo-none", ["bytes_x_of_gloo_none", "step_time_x_of_gloo_none"]].tolist() == [1.0, 1.0]
    assert t.loc["gloo-none", "acc_delta_vs_gloo_none_pts"] == 0.0
    assert t.loc["centralized", "bytes_sent_per_rank_step_after_warmup"] == 0
    assert (t.drop(index="centralized")["bytes_sent_per_rank_step_after_warmup"] > 0).all()
    printed_centralized(ddp)


def test_ddp_smoke_dds_bytes_and_identical_training(ddp):
    """DDS bytes are its own wire counts (not timing): with 2 ranks the ring and the naive exchange
    each send one 6.65 MB vector a step; int8 a quarter; dgc and powersgd2 a small share. DDS dense
    (either collective) and gloo without a hook train identically (test_peers' former check)."""
    b = ddp.table["bytes_sent_per_rank_step_after_warmup"]
    for case in ("dds-dense-ring", "dds-dense-naive"):
        assert 6_600_000 < b[case] < 7_300_000, (case, b[case])
    assert 0.24 < b["dds-int8"] / b["dds-dense-ring"] < 0.3
    assert b["dds-dgc"] < 0.01 * b["dds-dense-ring"] and b["dds-powersgd2"] < 0.02 * b["dds-dense-ring"]
    gloo = pd.read_csv(ddp.run_dir("gloo-none") / "epochs-rank0.csv").iloc[-1]
    for case in ("dds-dense-ring", "dds-dense-naive"):
        dds = pd.read_csv(ddp.run_dir(case) / "epochs-rank0.csv").iloc[-1]
        assert dds["test_accuracy"] == pytest.approx(gloo["test_accuracy"], abs=0.011)
        assert dds["test_loss"] == pytest.approx(gloo["test_loss"], rel=1e-3)


@pytest.mark.parametrize("hook", ["none", "fp16", "powersgd"])
def test_ddp_smoke_gloo_runs_write_the_dds_tables(ddp, hook):
    run = ddp.run_dir(f"gloo-{hook}")
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["kind"], manifest["method"], manifest["status"], manifest["world"]) == \
        ("ddp", f"gloo-{hook}", "completed", 2)
    for rank in (0, 1):
        steps = pd.read_csv(run / f"steps-rank{rank}.csv")
        epochs = pd.read_csv(run / f"epochs-rank{rank}.csv")
        assert list(steps.columns) == COLUMNS["steps"] and list(epochs.columns) == COLUMNS["epochs"]
        assert len(steps) == 10 and (steps["bytes_sent"] > 0).all()
        assert len(epochs) == 1 and 0 < epochs["test_accuracy"].iloc[0] <= 1
    if hook == "powersgd":  # start_iter 2 dense steps, then rank-2 factors only
        density = pd.read_csv(run / "steps-rank0.csv")["density"]
        assert (density[:2] == 1.0).all() and (density[2:] < 0.05).all()


def test_ddp_smoke_centralized_run(ddp):
    run = ddp.run_dir("centralized")
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["method"], manifest["status"], manifest["processes"]) == ("centralized", "completed", 1)
    steps = pd.read_csv(run / "steps-rank0.csv")
    assert len(steps) == 10 and (steps["bytes_sent"] == 0).all()  # the steps of 2 ranks of 32 each


def test_fl_smoke_table(fl):
    t = fl.table
    assert list(t.index) == FL_CASES and (t["status"] == "ok").all(), t["status"].to_dict()
    comm = ["dds-fp32", "dds-int8_sparse", "flower", "flower-deployment"]
    finite(t, comm, ["bytes_up_per_client_round_incl_warmup", "bytes_down_per_round", "round_time_s", "overhead_s",
                     "test_accuracy", "rounds", "bytes_up_x_of_flower", "round_time_x_of_flower",
                     "acc_delta_vs_flower_pts"])
    finite(t, ["centralized"], ["test_accuracy", "acc_delta_vs_flower_pts"])
    assert (t.loc[comm, "rounds"] == 2).all() and ((t["test_accuracy"] > 0) & (t["test_accuracy"] <= 1)).all()
    assert t.loc["flower", ["bytes_up_x_of_flower", "round_time_x_of_flower"]].tolist() == [1.0, 1.0]
    assert t.loc["centralized", "bytes_up_per_client_round_incl_warmup"] == 0
    # bytes are the DDS CommStats (fp32: the 6.65 MB model plus headers) and the shared lo counters for
    # Flower (an upper bound); int8_sparse sends a small share of fp32
    assert (t.loc[["dds-fp32", "flower", "flower-deployment"], "bytes_up_per_client_round_incl_warmup"] > 6_000_000).all()
    assert t.loc["dds-int8_sparse", "bytes_up_per_client_round_incl_warmup"] < 0.1 * t.loc["dds-fp32", "bytes_up_per_client_round_incl_warmup"]
    printed_centralized(fl)


def test_fl_smoke_flower_matches_dds_fp32(fl):
    """Same model, partitions, subsets and SGD: after 2 rounds the same test accuracy and loss (float noise
    only: Flower averages weights in float32, the DDS controller deltas in float64)."""
    assert fl.table.loc["dds-fp32", "acc_delta_vs_flower_pts"] == 0.0
    losses = [pd.read_csv(fl.run_dir(case) / "rounds.csv")["test_loss"] for case in ("dds-fp32", "flower")]
    assert (abs(losses[0] - losses[1]) < 1e-4).all(), losses


def test_fl_smoke_flower_deployment_matches_flower(fl):
    """Flower's deployment runtime (SuperLink, SuperNodes, flwr run) trains exactly what its legacy
    transport trains: same Flower FedAvg in float32, same client order."""
    assert fl.table.loc["flower-deployment", "acc_delta_vs_flower_pts"] == 0.0
    losses = [pd.read_csv(fl.run_dir(case) / "rounds.csv")["test_loss"] for case in ("flower", "flower-deployment")]
    assert (abs(losses[0] - losses[1]) < 1e-6).all(), losses


def test_fl_smoke_centralized_sees_as_many_samples(fl):
    """2 rounds x 2 clients x 300 samples = 1200: 19 steps of the clients' batch of 64 (1216), one process."""
    run = fl.run_dir("centralized")
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["method"], manifest["status"], manifest["processes"], manifest["world"]) == \
        ("centralized", "completed", 1, 1)
    assert manifest["config"]["max_steps"] == 19 and manifest["config"]["training"]["batch_size"] == 64
    assert len(pd.read_csv(run / "steps-rank0.csv")) == 19
    assert len(pd.read_csv(run / "epochs-rank0.csv")) == 1
