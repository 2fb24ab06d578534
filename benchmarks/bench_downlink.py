"""Both directions, one-to-many: the compressed model broadcast and data multicast, measured in one
run on shaped links (network namespaces, root; every node's uplink at --profile, 10 Mbit/s by default).

Three parts, each printed as a table and written to results/bench/downlink-<part>.csv:
  fl         FL, 2 clients: fp32 both ways unicast (the plain setup) against a compressed upload
             and downlink with multicast: round time over local training time, time to the target
             accuracy (sum of round times; the first whole-model broadcast excluded for both), final
             accuracy after the same rounds.
  broadcast  the controller's bytes per round for the fp32 broadcast with multicast, over one model,
             for 2 and 4 clients (transport estimate and interface counter).
  ddp        DDP WORLD=3 DGC: bytes a rank sends per step after warm-up, multicast allgather over unicast.

    python benchmarks/bench_downlink.py                    # all parts (make bench-downlink)
    python benchmarks/bench_downlink.py --parts broadcast ddp
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from bench_ddp import summarise as summarise_ddp
from commlab.bench import BenchParser, BenchRun
from commlab.bench.accuracy import time_to_target
from commlab.report.runs import load_run

def launch(s: BenchRun, a: argparse.Namespace, run_id: str, argv: list[str]) -> Path:
    """One launcher run (its folder and log under results/bench/downlink/); a failure ends the benchmark."""
    s.run([*argv, "--profile", a.profile, "--seed", str(a.seed), "--results-dir", str(a.runs_dir), "--run-id", run_id],
          f"bench/downlink/{run_id}").check()
    return a.runs_dir / run_id


def fl(s: BenchRun, a: argparse.Namespace, run_id: str, up: str, down: str, multicast: str, clients: int, rounds: int,
       samples: int) -> Path:
    return launch(s, a, run_id, [sys.executable, "-m", "commlab.fl.run", "--codec", up, "--downlink-codec", down,
                                 "--multicast", multicast, "--clients", str(clients), "--rounds", str(rounds),
                                 "--samples-per-round", str(samples)])


def fl_summary(run_dir: Path, target: float) -> dict:
    run = load_run(run_dir)
    rounds = run.tables["rounds"]
    train = run.tables["clients"].groupby("round")["train_time_s"].max()  # a round waits for its slowest client
    reached = time_to_target(rounds, target)["time_to_target_excl_eval_s"]  # the sum of round times up to it
    return {"round_time_s": rounds["round_time_s"].mean(), "train_time_s": train.mean(),
            "round_over_train": rounds["round_time_s"].mean() / train.mean(),
            "bytes_up_per_round_incl_warmup": rounds["bytes_up"].mean(),
            "bytes_down_per_round": rounds["bytes_down"].mean(),
            "time_to_target_s": float("nan") if reached is None else reached,
            "final_accuracy": run.final_accuracy}


def part_fl(s: BenchRun, a: argparse.Namespace) -> pd.DataFrame:
    rows = []
    for label, up, down, multicast in (("fp32 both ways, unicast", "fp32", "fp32", "off"),
                                       (f"{a.codec} both ways, multicast", a.codec, a.codec, "data")):
        run_dir = fl(s, a, f"downlink-fl-{up}-{down}-{multicast}", up, down, multicast, 2, a.rounds, a.samples)
        rows.append({"setup": label, **fl_summary(run_dir, a.target)})
        s.step(label)
    df = pd.DataFrame(rows)
    base = df.iloc[0]
    df["time_to_target_speedup"] = base["time_to_target_s"] / df["time_to_target_s"]
    df["accuracy_delta_pp"] = 100 * (df["final_accuracy"] - base["final_accuracy"])
    return df


def part_broadcast(s: BenchRun, a: argparse.Namespace) -> pd.DataFrame:
    rows = []
    for clients in (2, 4):
        run = load_run(fl(s, a, f"downlink-bc-{clients}", "int8_sparse", "fp32", "data", clients, 3, 500))
        model = run.manifest["initial_model_bytes"]
        rounds = run.tables["rounds"].iloc[1:]  # round 1 may carry repairs of the first broadcast
        rows.append({"clients": clients, "model_bytes": model, "bytes_down_per_round": rounds["bytes_down"].mean(),
                     "x_of_one_model": rounds["bytes_down"].mean() / model,
                     "interface_x_of_one_model": rounds["iface_bytes_down"].mean() / model})
        s.step(f"broadcast, {clients} clients")
    return pd.DataFrame(rows)


def part_ddp(s: BenchRun, a: argparse.Namespace) -> pd.DataFrame:
    rows = []
    for multicast in ("off", "data"):
        summary = summarise_ddp(launch(s, a, f"downlink-ddp-dgc-{multicast}", [
            sys.executable, "-m", "commlab.ddp.run", "--method", "dgc", "--world", "3", "--epochs", "1",
            "--train-subset", str(a.ddp_train_subset), "--warmup", "0.25", "--multicast", multicast]))
        rows.append({"allgather": "multicast" if multicast == "data" else "unicast",
                     "bytes_sent_per_step_after_warmup": summary["bytes_sent_per_step_after_warmup"],
                     "step_time_ms": summary["step_time_ms"]})
        s.step(f"ddp dgc, multicast {multicast}")
    df = pd.DataFrame(rows)
    df["x_of_unicast"] = df["bytes_sent_per_step_after_warmup"] / df["bytes_sent_per_step_after_warmup"].iloc[0]
    return df


# part -> (its runs, how many, the title of its table)
PARTS: dict[str, tuple[Callable[[BenchRun, argparse.Namespace], pd.DataFrame], int, str]] = {
    "fl": (part_fl, 2, "FL: compressed upload and downlink with multicast against fp32 unicast"),
    "broadcast": (part_broadcast, 2, "The controller's broadcast bytes per round, over one model"),
    "ddp": (part_ddp, 2, "DDP DGC: multicast allgather against unicast"),
}


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "downlink", {"rounds": 2, "samples": 500, "ddp_train_subset": 1920}, seeds=0,
                    profile="10mbit")
    p.add_argument("--parts", nargs="*", choices=list(PARTS), default=list(PARTS))
    p.add_argument("--codec", default="int8_sparse", help="compressor of both directions in the fl part")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--samples", type=int, default=6000, help="per client and round")
    p.add_argument("--target", type=float, default=0.97, help="test accuracy for time-to-accuracy")
    p.add_argument("--ddp-train-subset", type=int, default=6000)
    a = p.parse_args(argv)
    if os.geteuid() != 0:
        p.error("shaped links and multicast need network namespaces: run as root")
    a.runs_dir = a.results_dir / "bench" / "downlink"
    with BenchRun(a, sum(PARTS[name][1] for name in a.parts)) as s:
        for name in a.parts:
            run_part, _, title = PARTS[name]
            s.write(run_part(s, a), None, f"{title} ({a.profile})", suffix=f"-{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
