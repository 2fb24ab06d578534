"""What secure aggregation and DP cost an FL run: the same int8 run of 4 clients on loopback, plain,
with --secagg (SecAgg+, docs/privacy.md), with DP-FedAvg's noise added by the controller (--dp-noise),
and with both (the clients add the noise under SecAgg+), same seeds, data and settings.

Per run: the bytes each client sent per round (its clients-<i>.csv bytes_up: the update frame, or
SecAgg+'s keys, shares, masked input and unmask reply, with the transport's own traffic), the
bytes the controller received per round (rounds.csv bytes_up), the mean round time (rounds.csv
round_time_s, training included), each as x of the plain run measured in the same invocation.

    python benchmarks/bench_secagg.py            # make bench-secagg
    python benchmarks/bench_secagg.py --quick    # 2 rounds
"""
from __future__ import annotations

import argparse
import sys
import time

import pandas as pd

from commlab.bench import BenchParser, BenchRun
from commlab.report.runs import try_load_run

CLIENTS = 4
# z 0.1: with 4 clients a round, z 0.5 puts noise of std 0.125 on every weight of the mean each round,
# and the clients' training diverges to non-finite updates by round 2.
DP = ["--dp-noise", "0.1", "--dp-clip", "1.0", "--dp-delta", "1e-3"]
MODES = {"plain": [], "secagg": ["--secagg"], "dp": DP, "secagg-dp": ["--secagg", *DP]}  # dp: z 0.1 (notes)
COLUMNS = {"mode": "aggregation", "status": "status", "rounds": "rounds",
           "client_up_kB": "sent per client and round (kB)", "client_up_x": "x of plain",
           "controller_in_kB": "received by the controller per round (kB)", "controller_in_x": "x of plain",
           "round_s": "mean round time (s)", "round_x": "x of plain", "test_accuracy": "final test accuracy (%)",
           "epsilon": "epsilon"}


def fl_run(s: BenchRun, mode: str, a: argparse.Namespace, run_id: str) -> str:
    cmd = [sys.executable, "-m", "commlab.fl.run", "--codec", "int8", "--clients", str(CLIENTS),
           "--rounds", str(a.rounds), "--samples-per-round", str(a.samples), "--batch-size", "32",
           "--partition", "iid", "--train-subset", str(a.train_subset), "--test-subset", str(a.test_subset),
           "--backend", "local", "--seed", str(a.seed), "--results-dir", str(a.results_dir), "--run-id", run_id,
           *MODES[mode]]
    return s.run(cmd, run_id).status


def row_of(mode: str, status: str, a: argparse.Namespace, run_id: str) -> dict:
    row: dict = {"mode": mode, "status": status}
    run = try_load_run(a.results_dir / run_id)
    if run is not None and len(run.tables["rounds"]):
        rounds, clients = run.tables["rounds"], run.tables["clients"]
        row.update(rounds=len(rounds), client_up_kB=clients["bytes_up"].mean() / 1e3,
                   controller_in_kB=rounds["bytes_up"].mean() / 1e3, round_s=rounds["round_time_s"].mean(),
                   test_accuracy=100 * float(rounds["test_accuracy"].iloc[-1]),
                   epsilon=float(rounds["epsilon"].iloc[-1]) if "--dp-noise" in MODES[mode] else None)
    return row


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = BenchParser(__doc__, "secagg", {"rounds": 2}, seeds=0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--samples", type=int, default=256, help="samples per client and round")
    p.add_data_subsets(train=4000, test=500)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rows = []
    with BenchRun(a, len(MODES)) as s:
        for mode in MODES:
            run_id = f"bench-secagg-{stamp}-{mode}"
            rows.append(row_of(mode, fl_run(s, mode, a, run_id), a, run_id))
            s.step(f"{mode} {rows[-1]['status']}")
        table = pd.DataFrame(rows).reindex(columns=list(COLUMNS))
        plain = table[table["mode"] == "plain"].iloc[0]
        for value, ratio in (("client_up_kB", "client_up_x"), ("controller_in_kB", "controller_in_x"),
                             ("round_s", "round_x")):
            table[ratio] = table[value] / plain[value]
        s.write(table, COLUMNS, "Secure aggregation (SecAgg+) and DP against plain FedAvg, int8 uplink",
                notes=[f"MNIST, mnist_cnn, {CLIENTS} clients (iid), one process each on loopback, {a.rounds} rounds, "
                       f"{a.samples} samples per client and round, seed {a.seed}; SecAgg+ with every other client "
                       "as neighbour, threshold 2, clip 1; DP: z 0.1, clip 1, delta 1e-3, all 4 clients each round"])
    return 0 if (table["status"] == "ok").all() else 1


if __name__ == "__main__":
    sys.exit(main())
