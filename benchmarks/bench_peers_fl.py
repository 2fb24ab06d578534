"""DDS FL beside Flower FedAvg on the same shaped links (docs/peers.md).

    python benchmarks/bench_peers_fl.py [--profile 10mbit] [--clients 2] [--rounds 10] [--smoke]

One run each, one after another, with `make fl-fp32`'s model, Dirichlet partitions, per-round
subsets, seeds and hyper-parameters: DDS fp32 and DDS int8_sparse (`python -m commlab.fl.run`) and
Flower FedAvg (`python -m commlab.peers.run --kind flower`, needs flwr) over its legacy gRPC API
(`flower`) and in its deployment runtime, SuperLink + SuperNodes + `flwr run` (`flower-deployment`,
`--transport deployment`). As root with a profile other
than lan every node runs in its own network namespace with the profile on its eth0; bytes are then
the controller's eth0 counters for every program (payload plus all headers); on loopback they are
the DDS CommStats and, for Flower, the shared `lo` counters (an upper bound). Per case: bytes up per
client and round, bytes down per round (controller), median round time, median round time minus
the slowest client's training ("overhead": communication, (de)serialisation, aggregation), test
accuracy after the last round, and the ratios to Flower. Beside the table: the centralized peer's
accuracy at the same number of samples (one process on the union of the clients' data, the clients'
batch size, lr and momentum, rounds x clients x samples per round x local epochs samples; case
`centralized`). `--smoke`: 2 rounds on small subsets (CI). Writes results/bench/peers-fl[-smoke].csv
and prints it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from bench_peers_common import (JOBS_NOTE, add_ratios, add_run_args, apply_smoke, centralized_fl_argv, check_cases,
                                run_cases, write_table)
from commlab.fl.config import TrainingSection

CASES = ("dds-fp32", "dds-int8_sparse", "flower", "flower-deployment", "centralized")
FIELDS = ["case", "bytes_up_per_client_round_incl_warmup", "bytes_down_per_round", "round_time_s", "overhead_s",
          "test_accuracy", "rounds", "bytes_up_x_of_flower", "round_time_x_of_flower", "acc_delta_vs_flower_pts",
          "bytes_from", "run_wall_s", "status", "run_id"]
SMOKE = {"rounds": 2, "samples_per_round": 300, "train_subset": 2000, "test_subset": 500}


def command(case: str, a: argparse.Namespace, run_id: str) -> list[str]:
    common = ["--clients", str(a.clients), "--rounds", str(a.rounds), "--samples-per-round", str(a.samples_per_round),
              "--profile", a.profile, "--seed", str(a.seed), "--results-dir", str(a.results_dir), "--run-id", run_id]
    for flag, value in (("--train-subset", a.train_subset), ("--test-subset", a.test_subset)):
        if value:
            common += [flag, str(value)]
    if case in ("flower", "flower-deployment"):
        transport = "deployment" if case == "flower-deployment" else "grpc-bidi"
        return [sys.executable, "-m", "commlab.peers.run", "--kind", "flower", "--transport", transport, *common]
    if case == "centralized":  # then the FL run's subsets, if any
        return [*centralized_fl_argv(a.clients, a.rounds, a.samples_per_round), *common[common.index("--profile"):]]
    return [sys.executable, "-m", "commlab.fl.run", "--codec", case.removeprefix("dds-"), "--backend", "local", *common]


def measure(case: str, run_dir: Path) -> dict:
    if case == "centralized":
        epochs = pd.read_csv(run_dir / "epochs-rank0.csv")
        return {"bytes_up_per_client_round_incl_warmup": 0, "bytes_down_per_round": 0, "bytes_from": "none (one process)",
                "test_accuracy": round(float(epochs["test_accuracy"].iloc[-1]), 4)}
    rounds = pd.read_csv(run_dir / "rounds.csv")
    iface = rounds["iface_bytes_up"].notna().all() and rounds["iface_bytes_down"].notna().all()
    kind = "iface_bytes" if iface else "bytes"
    up, down = rounds[f"{kind}_up"], rounds[f"{kind}_down"]
    clients = pd.concat([pd.read_csv(p) for p in sorted(run_dir.glob("clients-*.csv"))], ignore_index=True)
    slowest = clients.groupby("round")["train_time_s"].max()
    overhead = (rounds.set_index("round")["round_time_s"] - slowest).dropna()
    return {"bytes_up_per_client_round_incl_warmup": round((up / rounds["n_participants"]).mean()),
            "bytes_down_per_round": round(down.mean()),
            "round_time_s": round(rounds["round_time_s"].median(), 3),
            "overhead_s": round(overhead.median(), 3),
            "test_accuracy": round(float(rounds["test_accuracy"].iloc[-1]), 4), "rounds": len(rounds),
            "bytes_from": "controller iface" if iface else "CommStats / lo"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="10mbit")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--samples-per-round", type=int, default=6000)
    p.add_argument("--train-subset", type=int, help="random training subset (default: all 60000)")
    p.add_argument("--test-subset", type=int)
    p.add_argument("--seed", type=int, default=0)
    add_run_args(p, "2 rounds of 300 samples, 2000/500 sample subsets (CI)", "comma-separated cases", CASES)
    a = p.parse_args()
    apply_smoke(a, SMOKE, "peers-fl")
    cases = check_cases("bench_peers_fl", a.only, CASES, a.profile)
    if cases is None:
        return 2
    rows = run_cases(cases, "bench-peers-fl", a.results_dir, lambda case, run_id: command(case, a, run_id), measure,
                     a.jobs)
    add_ratios(rows, "flower", {"bytes_up_x_of_flower": "bytes_up_per_client_round_incl_warmup",
                                "round_time_x_of_flower": "round_time_s"}, "acc_delta_vs_flower_pts")
    samples = a.rounds * a.clients * a.samples_per_round * TrainingSection().local_epochs
    write_table(rows, FIELDS, a.out,
                f"{a.profile}, {a.clients} clients, {a.rounds} rounds of {a.samples_per_round} samples per client, "
                f"train subset {a.train_subset or 'all'}" + JOBS_NOTE * (a.jobs > 1),
                f"one process on the union of the clients' data, their local SGD, {samples} samples")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
