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
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from bench_ddp import summarise as summarise_ddp
from commlab.progress import Progress
from commlab.report.markdown import table as markdown_table


def run(cmd: list[str], log: Path) -> None:
    with open(log, "w") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise SystemExit(f"bench_downlink: {' '.join(cmd[2:5])}... failed (exit {code}), see {log}")


def fl(a: argparse.Namespace, run_id: str, up: str, down: str, multicast: str, clients: int, rounds: int,
       samples: int) -> Path:
    run([sys.executable, "-m", "commlab.fl.run", "--codec", up, "--downlink-codec", down, "--multicast", multicast,
         "--clients", str(clients), "--rounds", str(rounds), "--samples-per-round", str(samples),
         "--profile", a.profile, "--seed", str(a.seed), "--results-dir", str(a.results_dir), "--run-id", run_id],
        a.results_dir / f"{run_id}.log")
    return a.results_dir / run_id


def fl_summary(run_dir: Path, target: float) -> dict:
    rounds = pd.read_csv(run_dir / "rounds.csv")
    clients = pd.concat(pd.read_csv(p) for p in sorted(run_dir.glob("clients-*.csv")))
    train = clients.groupby("round")["train_time_s"].max()  # a round waits for its slowest client
    elapsed = rounds["round_time_s"].cumsum()
    reached = rounds.index[rounds["test_accuracy"] >= target]
    return {"round_time_s": rounds["round_time_s"].mean(), "train_time_s": train.mean(),
            "round_over_train": rounds["round_time_s"].mean() / train.mean(),
            "bytes_up_per_round_incl_warmup": rounds["bytes_up"].mean(),
            "bytes_down_per_round": rounds["bytes_down"].mean(),
            "time_to_target_s": float(elapsed[reached[0]]) if len(reached) else float("nan"),
            "final_accuracy": float(rounds["test_accuracy"].iloc[-1])}


def part_fl(a: argparse.Namespace, progress: Progress) -> pd.DataFrame:
    rows = []
    for label, up, down, multicast in (("fp32 both ways, unicast", "fp32", "fp32", "off"),
                                       (f"{a.codec} both ways, multicast", a.codec, a.codec, "data")):
        run_dir = fl(a, f"downlink-fl-{up}-{down}-{multicast}", up, down, multicast, 2, a.rounds, a.samples)
        rows.append({"setup": label, **fl_summary(run_dir, a.target)})
        progress.update(progress.done + 1, label)
    df = pd.DataFrame(rows)
    base = df.iloc[0]
    df["time_to_target_speedup"] = base["time_to_target_s"] / df["time_to_target_s"]
    df["accuracy_delta_pp"] = 100 * (df["final_accuracy"] - base["final_accuracy"])
    return df


def part_broadcast(a: argparse.Namespace, progress: Progress) -> pd.DataFrame:
    rows = []
    for clients in (2, 4):
        run_dir = fl(a, f"downlink-bc-{clients}", "int8_sparse", "fp32", "data", clients, 3, 500)
        model = json.loads((run_dir / "manifest.json").read_text())["initial_model_bytes"]
        rounds = pd.read_csv(run_dir / "rounds.csv").iloc[1:]  # round 1 may carry repairs of the first broadcast
        label = f"broadcast, {clients} clients"
        rows.append({"clients": clients, "model_bytes": model, "bytes_down_per_round": rounds["bytes_down"].mean(),
                     "x_of_one_model": rounds["bytes_down"].mean() / model,
                     "interface_x_of_one_model": rounds["iface_bytes_down"].mean() / model})
        progress.update(progress.done + 1, label)
    return pd.DataFrame(rows)


def part_ddp(a: argparse.Namespace, progress: Progress) -> pd.DataFrame:
    rows = []
    for multicast in ("off", "data"):
        run_id = f"downlink-ddp-dgc-{multicast}"
        run([sys.executable, "-m", "commlab.ddp.run", "--method", "dgc", "--world", "3", "--epochs", "1",
             "--train-subset", str(a.ddp_train_subset), "--warmup", "0.25", "--multicast", multicast,
             "--profile", a.profile, "--seed", str(a.seed), "--results-dir", str(a.results_dir), "--run-id", run_id],
            a.results_dir / f"{run_id}.log")
        s = summarise_ddp(a.results_dir / run_id)
        label = f"ddp dgc, multicast {multicast}"
        rows.append({"allgather": "multicast" if multicast == "data" else "unicast",
                     "bytes_sent_per_step_after_warmup": s["bytes_sent_per_step_after_warmup"],
                     "step_time_ms": s["step_time_ms"]})
        progress.update(progress.done + 1, label)
    df = pd.DataFrame(rows)
    df["x_of_unicast"] = df["bytes_sent_per_step_after_warmup"] / df["bytes_sent_per_step_after_warmup"].iloc[0]
    return df


PARTS = {"fl": (part_fl, 2), "broadcast": (part_broadcast, 2), "ddp": (part_ddp, 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", nargs="*", choices=list(PARTS), default=list(PARTS))
    p.add_argument("--profile", default="10mbit")
    p.add_argument("--codec", default="int8_sparse", help="compressor of both directions in the fl part")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--samples", type=int, default=6000, help="per client and round")
    p.add_argument("--target", type=float, default=0.97, help="test accuracy for time-to-accuracy")
    p.add_argument("--ddp-train-subset", type=int, default=6000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results-dir", type=Path, default=Path("results"))
    a = p.parse_args()
    if os.geteuid() != 0:
        print("bench_downlink: shaped links and multicast need network namespaces: run as root", file=sys.stderr)
        return 2
    a.results_dir = a.results_dir.resolve() / "bench" / "downlink"
    a.results_dir.mkdir(parents=True, exist_ok=True)
    with Progress(sum(PARTS[name][1] for name in a.parts), "run", in_place=False) as progress:
        for name in a.parts:
            df = PARTS[name][0](a, progress)
            out = a.results_dir.parent / f"downlink-{name}.csv"
            df.to_csv(out, index=False)
            progress.log(f"\n{name} ({a.profile}; {out}):\n{markdown_table(df, {c: c for c in df.columns})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
