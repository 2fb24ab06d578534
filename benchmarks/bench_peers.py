"""DDS runs beside the reference peers on the same shaped links (docs/peers.md).

    python benchmarks/bench_peers.py [--profile 10mbit] [--world 3] [--epochs 1] [--train-subset 3000] [--smoke]
        [--model resnet18 --dataset synthetic:cifar10 --batch-size 8] [--only dds-dense-ring,gloo-none,...]

One run each, one after another, with the same model, data subset, IID shards, batch order, seeds
and hyper-parameters: DDS dense with the ring and with the naive (allgather) collective, int8, dgc and
powersgd2 (`python -m commlab.ddp.run`), torch DDP over gloo with hooks none, fp16 and powersgd
(`python -m commlab.peers.run --kind gloo`), and the centralized trainer. As root with a profile other
than lan every node runs in its own network namespace with the profile on its eth0. Per case: wire
bytes a rank sends per step (DDS: its CommStats; gloo: its eth0 counters; both payload plus headers)
the median density, the median step time and the median CPU seconds of a rank's process in a step
(every thread: steadier than wall time on a loaded machine), over steps >= --skip (after DGC's warm-up and PowerSGD's
dense start), the final test accuracy, the ratios (bytes, step time, CPU) and accuracy delta to gloo-none, the bytes as a share
of DDS dense ring's and the step time as a multiple of gloo PowerSGD's (where those ran); the
centralized accuracy (the ceiling at the same samples) is printed beside the table. --model, --dataset
and --batch-size reach every case: a large model on a slow link wants few steps (a small
--train-subset, a small batch) and a --skip that still leaves measured steps. `--quick` (or `--smoke`): world 2, 10 steps
on small subsets, two cases at a time (CI: every row present, numbers parsed, ratios computed).
Writes results/bench/peers[-quick].{csv,md} and prints it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench_peers_common import PeerTable, Ratio, run_table
from commlab.bench import BenchParser
from commlab.report.runs import load_run

CASES = ("dds-dense-ring", "dds-dense-naive", "dds-int8", "dds-dgc", "dds-powersgd2",
         "gloo-none", "gloo-fp16", "gloo-powersgd", "centralized")
KNOWN = (*CASES, "dds-dense")  # dds-dense: the collective `auto` picks (naive with multicast data, else ring)
MEASURED = ["bytes_sent_per_rank_step_after_warmup", "density_after_warmup", "step_time_s", "comm_time_s",
            "cpu_time_s", "test_accuracy", "steps"]
QUICK = {"world": 2, "epochs": 1, "train_subset": 640, "test_subset": 200, "jobs": 2}


def command(case: str, a: argparse.Namespace, run_id: str) -> list[str]:
    common = ["--world", str(a.world), "--epochs", str(a.epochs), "--train-subset", str(a.train_subset),
              "--model", a.model, "--dataset", a.dataset, "--batch-size", str(a.batch_size), "--profile", a.profile,
              "--seed", str(a.seed), "--results-dir", str(a.results_dir), "--run-id", run_id]
    if a.test_subset:
        common += ["--test-subset", str(a.test_subset)]
    if case.startswith("dds-"):
        method, _, collective = case.removeprefix("dds-").partition("-")
        extra = {"dgc": ["--warmup", str(a.skip), "--warmup-unit", "steps"],
                 "powersgd2": ["--method-param", f"start_iter={a.start_iter}"]}.get(method, [])
        extra += ["--collective", collective] if collective else []
        return [sys.executable, "-m", "commlab.ddp.run", "--method", method, "--backend", "local", *extra, *common]
    if case == "centralized":
        return [sys.executable, "-m", "commlab.peers.run", "--kind", "centralized", *common]
    return [sys.executable, "-m", "commlab.peers.run", "--kind", "gloo", "--hook", case.removeprefix("gloo-"),
            "--start-iter", str(a.start_iter), *common]


def measure(case: str, a: argparse.Namespace, run_dir: Path) -> dict:
    """Bytes, median density and times over steps >= --skip (all of them when the run is shorter), final accuracy."""
    run = load_run(run_dir)
    steps = run.tables["steps"]
    after = steps[steps["step"] >= min(a.skip, int(steps["step"].max()))]
    return {"bytes_sent_per_rank_step_after_warmup": round(after.groupby("rank")["bytes_sent"].mean().mean()),
            "density_after_warmup": float(f"{after['density'].median():.4g}"),
            "step_time_s": round(after["step_time_s"].median(), 4),
            "comm_time_s": round(after["comm_time_s"].median(), 4),
            "cpu_time_s": round(after["cpu_time_s"].median(), 4),
            "test_accuracy": round(run.final_accuracy, 4),
            "steps": int(steps["step"].max()) + 1}


WORKLOAD = {"model": "mnist_cnn", "dataset": "mnist", "batch_size": 32}  # every case's, unless given


def parser() -> BenchParser:
    """The benchmark's own flags (run_table adds the cases and the data subsets)."""
    p = BenchParser(__doc__, "peers", QUICK, seeds=0, profile="10mbit")
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--model", default=WORKLOAD["model"], help="a model by name (docs/workloads.md), every case's")
    p.add_argument("--dataset", default=WORKLOAD["dataset"], help="a dataset by name or synthetic:<name>, every case's")
    p.add_argument("--batch-size", type=int, default=WORKLOAD["batch_size"], help="per rank (centralized: world x this)")
    p.add_argument("--skip", type=int, default=4, help="steps left out of bytes and time: DGC warm-up length (steps)")
    p.add_argument("--start-iter", type=int, default=2, help="dense steps before PowerSGD, DDS and gloo alike")
    return p


def main(argv: list[str] | None = None) -> int:
    return run_table(parser(), argv, TABLE)


TABLE = PeerTable("bench-peers", CASES, KNOWN, command, measure, MEASURED, "gloo-none",
                  {"bytes": "bytes_sent_per_rank_step_after_warmup", "step_time": "step_time_s",
                   "cpu_time": "cpu_time_s"},
                  "DDS beside torch DDP over gloo and the centralized trainer",
                  lambda a: f"{a.model} on {a.dataset}, {a.profile}, world {a.world}, {a.epochs} epoch(s) of "
                            f"{a.train_subset} samples, batch {a.batch_size}/rank; bytes, density and times over "
                            f"steps >= {a.skip}",
                  lambda a: f"one process on the union of the {a.world} shards, batches of {a.world} x {a.batch_size}, "
                            f"the same steps",
                  3000, (Ratio("bytes", "bytes_sent_per_rank_step_after_warmup", "dds-dense-ring"),
                         Ratio("step_time", "step_time_s", "gloo-powersgd")))

if __name__ == "__main__":
    sys.exit(main())
