"""DDS runs beside the reference peers on the same shaped links (docs/peers.md).

    python benchmarks/bench_peers.py [--profile 10mbit] [--world 3] [--epochs 1] [--train-subset 3000]

One run each, one after another, with the same model, data subset, IID shards, batch order, seeds
and hyper-parameters: DDS dense, dgc and powersgd2 (`python -m commlab.ddp.run`), torch DDP over gloo
with hooks none, fp16 and powersgd (`python -m commlab.peers.run --kind gloo`), and the centralized
trainer. As root with a profile other than lan every node runs in its own network namespace with
the profile on its eth0. Per case: wire bytes a rank sends per step (DDS: its CommStats; gloo: its
eth0 counters; both payload plus headers) and the median step time, over steps >= --skip (after
DGC's warm-up and PowerSGD's dense start), the final test accuracy and its delta to gloo-none.
Writes results/bench/peers.csv and prints it.
"""
from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
CASES = ("dds-dense", "dds-dgc", "dds-powersgd2", "gloo-none", "gloo-fp16", "gloo-powersgd", "centralized")
FIELDS = ["case", "bytes_sent_per_rank_step", "step_time_s", "comm_time_s", "test_accuracy",
          "acc_delta_vs_gloo_none_pts", "steps", "run_wall_s", "status", "run_id"]


def command(case: str, a: argparse.Namespace, run_id: str) -> list[str]:
    common = ["--world", str(a.world), "--epochs", str(a.epochs), "--train-subset", str(a.train_subset),
              "--profile", a.profile, "--seed", str(a.seed), "--results-dir", str(a.results_dir), "--run-id", run_id]
    if case.startswith("dds-"):
        method = case.removeprefix("dds-")
        extra = {"dgc": ["--warmup", str(a.skip), "--warmup-unit", "steps"],
                 "powersgd2": ["--method-param", f"start_iter={a.start_iter}"]}.get(method, [])
        return [sys.executable, "-m", "commlab.ddp.run", "--method", method, "--backend", "local", *extra, *common]
    if case == "centralized":
        return [sys.executable, "-m", "commlab.peers.run", "--kind", "centralized", *common]
    return [sys.executable, "-m", "commlab.peers.run", "--kind", "gloo", "--hook", case.removeprefix("gloo-"),
            "--start-iter", str(a.start_iter), *common]


def measure(run_dir: Path, skip: int) -> dict:
    steps = pd.concat([pd.read_csv(p) for p in sorted(run_dir.glob("steps-rank*.csv"))], ignore_index=True)
    after = steps[steps["step"] >= skip]
    epochs = pd.read_csv(run_dir / "epochs-rank0.csv")
    return {"bytes_sent_per_rank_step": round(after.groupby("rank")["bytes_sent"].mean().mean()),
            "step_time_s": round(after["step_time_s"].median(), 4),
            "comm_time_s": round(after["comm_time_s"].median(), 4),
            "test_accuracy": round(float(epochs["test_accuracy"].iloc[-1]), 4),
            "steps": int(steps["step"].max()) + 1}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="10mbit")
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--train-subset", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip", type=int, default=4, help="steps left out of bytes and time: DGC warm-up length (steps)")
    p.add_argument("--start-iter", type=int, default=2, help="dense steps before PowerSGD, DDS and gloo alike")
    p.add_argument("--only", default=",".join(CASES), help="comma-separated cases")
    p.add_argument("--results-dir", type=Path, default=ROOT / "results")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "peers.csv")
    a = p.parse_args()
    cases = [c for c in a.only.split(",") if c]
    unknown = set(cases) - set(CASES)
    if unknown:
        print(f"bench_peers: unknown case(s) {', '.join(sorted(unknown))}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    if a.profile != "lan" and os.geteuid() != 0:
        print(f"bench_peers: not root: profile {a.profile} will NOT be applied (runs on loopback)", flush=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rows = []
    for case in cases:
        run_id = f"{stamp}-bench-peers-{case}"
        cmd = command(case, a, run_id)
        print(f"[bench] {case}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        code = subprocess.run(cmd, cwd=ROOT).returncode
        row = {"case": case, "run_wall_s": round(time.perf_counter() - t0, 1), "run_id": run_id,
               "status": "ok" if code == 0 else f"exit {code}"}
        try:
            row.update(measure(a.results_dir / run_id, a.skip))
        except (OSError, ValueError, KeyError, IndexError) as e:
            row["status"] += f"; no tables ({type(e).__name__})"
        rows.append(row)
    ref = next((r.get("test_accuracy") for r in rows if r["case"] == "gloo-none"), None)
    for r in rows:
        if ref is not None and r.get("test_accuracy") is not None:
            r["acc_delta_vs_gloo_none_pts"] = round(100 * (r["test_accuracy"] - ref), 2)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, restval="")
        w.writeheader()
        w.writerows(rows)
    print(f"\n{a.profile}, world {a.world}, {a.epochs} epoch(s) of {a.train_subset} samples, batch 32/rank; "
          f"bytes and times over steps >= {a.skip}; written to {a.out}")
    print(pd.read_csv(a.out).drop(columns=["run_id"]).to_string(index=False))
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
