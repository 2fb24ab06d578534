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
accuracy after the last round, the ratios to Flower, and round time and overhead over DDS fp32's.
Beside the table: the centralized peer's accuracy at the same number of samples (one process on the
union of the clients' data, the clients' batch size, lr and momentum, rounds x clients x samples per
round x local epochs samples; case `centralized`). `--quick` (or `--smoke`): 2 rounds on small
subsets, two cases at a time (CI).
`--repeats N`: the cases of --only N times, the order reversed every other time (a b, b a, a b, ...),
each run with its own run id; a row per case then holds each column's median over the repeats and
each ratio is the median of the repeats' own ratios (each against the reference's run of the same
repeat), so load that drifts during the benchmark weighs on both sides of a ratio alike.
Writes results/bench/peers-fl[-quick].{csv,md} and prints it.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from bench_peers_common import (PeerTable, Ratio, add_accuracy_delta, add_ratios, centralized_fl_argv, parse_cases, run_cases,
                                write_table)
from commlab.bench import BenchParser, BenchRun
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


def repeat_order(cases: list[str], repeats: int) -> list[list[str]]:
    """The cases of each repeat: as given, then reversed, then as given, ... (a b, b a, a b)."""
    return [cases if k % 2 == 0 else cases[::-1] for k in range(repeats)]


def median_row(case: str, runs: list[dict]) -> dict:
    """One row for a case run several times: each numeric column's median over the runs that have
    it, text columns from the first run, the run ids and the runs' statuses (ok if all were)."""
    row: dict = {"case": case, "run_id": " ".join(r["run_id"] for r in runs)}
    failed = [f"repeat {k + 1}: {r['status']}" for k, r in enumerate(runs) if r["status"] != "ok"]
    row["status"] = "; ".join(failed) if failed else "ok"
    for column in dict.fromkeys(c for r in runs for c in r if c not in row):
        values = [r[column] for r in runs if r.get(column) is not None]
        numeric = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if values:
            # 8 significant digits: a mean of two byte counts stays whole, a small ratio keeps its digits
            row[column] = float(f"{statistics.median(numeric):.8g}") if len(numeric) == len(values) else values[0]
    return row


def per_repeat(repeats: list[list[dict]], ratio: Ratio, cases: list[str]) -> str:
    """Each case's values of a ratio column, repeat by repeat (the spread behind its median); the
    case it is taken against (always 1) left out."""
    column, lines = ratio.column, []
    for case in (c for c in cases if c != ratio.case):
        values = [next((r.get(column) for r in rows if r["case"] == case), None) for rows in repeats]
        lines.append(f"{case} " + " ".join("-" if v is None else f"{v:g}" for v in values))
    return f"{column} per repeat: " + "; ".join(lines)


def run_repeats(a: argparse.Namespace, t: PeerTable,
                run: Callable[[list[str], str], list[dict]]) -> tuple[list[dict], str]:
    """Every repeat's cases run (in repeat_order; run(cases, label) gives their rows) and their
    ratios taken within the repeat; the rows of the table (with one repeat: its rows, else a row
    per case of the medians over the repeats) and the settings line above it."""
    repeats = []
    for k, cases in enumerate(repeat_order(a.cases, a.repeats)):
        rows = run(cases, t.label if a.repeats == 1 else f"{t.label}-r{k + 1}")
        add_ratios(rows, t.all_ratios)
        add_accuracy_delta(rows, t.reference, t.acc_delta)
        repeats.append(rows)
    if a.repeats == 1:
        return repeats[0], t.settings(a)
    rows = [median_row(case, [r for rows in repeats for r in rows if r["case"] == case]) for case in a.cases]
    notes = "\n\n".join([f"{t.settings(a)}; each case ran {a.repeats} times, the order of the cases reversed every "
                          "other time; medians over the repeats, each ratio the median of the repeats' own ratios",
                          *(per_repeat(repeats, r, a.cases) for r in t.all_ratios if r.case in a.cases)])
    return rows, notes


def parser() -> BenchParser:
    p = BenchParser(__doc__, "peers-fl", QUICK, seeds=0, profile="10mbit")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--samples-per-round", type=int, default=6000)
    p.add_argument("--repeats", type=int, default=1, help="run the cases this many times, the order reversed "
                   "every other time; the table then holds medians over the repeats (default: 1)")
    return p


def main(argv: list[str] | None = None) -> int:
    """bench_peers_common.run_table with --repeats (run_repeats)."""
    p = parser()
    a = parse_cases(p, argv, TABLE)
    if a.repeats < 1:
        p.error(f"--repeats {a.repeats}: need at least 1")
    with BenchRun(a, a.repeats * len(a.cases), "case") as s:
        rows, notes = run_repeats(a, TABLE, lambda cases, label: run_cases(
            s, cases, label, lambda case, run_id: command(case, a, run_id),
            lambda case, run_dir: measure(case, a, run_dir), a.jobs))
        write_table(s, rows, TABLE.fields, TABLE.title, notes, TABLE.ceiling(a))
    return 0 if all(r["status"] == "ok" for r in rows) else 1


TABLE = PeerTable("bench-peers-fl", CASES, CASES, command, measure, MEASURED, "flower",
                  {"bytes_up": "bytes_up_per_client_round_incl_warmup", "round_time": "round_time_s",
                   "overhead": "overhead_s"},
                  "DDS FL beside Flower FedAvg and the centralized trainer", settings, ceiling, None,
                  (Ratio("round_time", "round_time_s", "dds-fp32"), Ratio("overhead", "overhead_s", "dds-fp32")))

if __name__ == "__main__":
    sys.exit(main())
