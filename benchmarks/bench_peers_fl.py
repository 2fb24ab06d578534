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
`centralized`). `--quick` (or `--smoke`): 2 rounds on small subsets, two cases at a time (CI).
Writes results/bench/peers-fl[-quick].{csv,md} and prints it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench_peers_common import PeerTable, centralized_fl_argv, run_table
from commlab.bench import BenchParser
from commlab.fl.config import TrainingSection
from commlab.report.runs import load_run

CASES = ("dds-fp32", "dds-int8_sparse", "flower", "flower-deployment", "centralized")
MEASURED = ["bytes_up_per_client_round_incl_warmup", "bytes_down_per_round", "round_time_s", "overhead_s",
            "test_accuracy", "rounds", "bytes_from"]
QUICK = {"rounds": 2, "samples_per_round": 300, "train_subset": 2000, "test_subset": 500, "jobs": 2}


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


def measure(case: str, a: argparse.Namespace, run_dir: Path) -> dict:
    run = load_run(run_dir)
    if case == "centralized":
        return {"bytes_up_per_client_round_incl_warmup": 0, "bytes_down_per_round": 0, "bytes_from": "none (one process)",
                "test_accuracy": round(run.final_accuracy, 4)}
    rounds, clients = run.tables["rounds"], run.tables["clients"]
    iface = rounds["iface_bytes_up"].notna().all() and rounds["iface_bytes_down"].notna().all()
    kind = "iface_bytes" if iface else "bytes"
    up, down = rounds[f"{kind}_up"], rounds[f"{kind}_down"]
    slowest = clients.groupby("round")["train_time_s"].max()
    overhead = (rounds.set_index("round")["round_time_s"] - slowest).dropna()
    return {"bytes_up_per_client_round_incl_warmup": round((up / rounds["n_participants"]).mean()),
            "bytes_down_per_round": round(down.mean()),
            "round_time_s": round(rounds["round_time_s"].median(), 3),
            "overhead_s": round(overhead.median(), 3),
            "test_accuracy": round(run.final_accuracy, 4), "rounds": len(rounds),
            "bytes_from": "controller iface" if iface else "CommStats / lo"}


def settings(a: argparse.Namespace) -> str:
    return (f"{a.profile}, {a.clients} clients, {a.rounds} rounds of {a.samples_per_round} samples per client, "
            f"train subset {a.train_subset or 'all'}")


def ceiling(a: argparse.Namespace) -> str:
    """The centralized peer: as many samples as all clients train in all rounds."""
    samples = a.rounds * a.clients * a.samples_per_round * TrainingSection().local_epochs
    return f"one process on the union of the clients' data, their local SGD, {samples} samples"


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "peers-fl", QUICK, seeds=0, profile="10mbit")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--samples-per-round", type=int, default=6000)
    return run_table(p, argv, TABLE)


TABLE = PeerTable("bench-peers-fl", CASES, CASES, command, measure, MEASURED, "flower",
                  {"bytes_up": "bytes_up_per_client_round_incl_warmup", "round_time": "round_time_s"},
                  "DDS FL beside Flower FedAvg and the centralized trainer", settings, ceiling, None)

if __name__ == "__main__":
    sys.exit(main())
