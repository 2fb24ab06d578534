"""The part bench_peers.py (DDP vs gloo) and bench_peers_fl.py (FL vs Flower) share: run the cases one
after another (smoke: two at a time), measure each from its run's tables, add the ratios to the
reference peer, write the CSV, print it with the centralized peer's accuracy beside it."""
from __future__ import annotations

import argparse
import csv
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

from commlab.fl.config import OptimizerSection, TrainingSection

ROOT = Path(__file__).resolve().parents[1]
JOBS_NOTE = ("\n(cases ran concurrently: times and loopback byte counters (gloo, Flower) include the other runs'; "
             "a check of the pipeline, not a measurement)")


def centralized_fl_argv(clients: int, rounds: int, samples_per_round: int) -> list[str]:
    """`commlab.peers.run` flags of the centralized peer at an FL run's budget: the clients' local
    SGD (batch, lr, momentum, weight decay) on the union of their data, as many samples as every
    client trains in every round. Add --profile, --seed, the subsets and where results go."""
    tr, opt = TrainingSection(), OptimizerSection()
    samples = rounds * clients * samples_per_round * tr.local_epochs
    return [sys.executable, "-m", "commlab.peers.run", "--kind", "centralized", "--world", "1",
            "--batch-size", str(tr.batch_size), "--lr", str(tr.lr), "--momentum", str(opt.momentum),
            "--weight-decay", str(opt.weight_decay), "--samples", str(samples), "--train-subset", "0"]


def add_run_args(p: argparse.ArgumentParser, smoke_help: str, only_help: str, default_cases: tuple[str, ...]) -> None:
    """The flags both benchmarks take: --smoke, --only, --jobs, --results-dir, --out."""
    p.add_argument("--smoke", action="store_true", help=smoke_help)
    p.add_argument("--only", default=",".join(default_cases), help=only_help)
    p.add_argument("--jobs", type=int, help="cases run at once (default 1; --smoke: 2, its times and loopback "
                   "counters then include the other run's: it checks the pipeline, it measures nothing)")
    p.add_argument("--results-dir", type=Path, default=ROOT / "results")
    p.add_argument("--out", type=Path)


def apply_smoke(a: argparse.Namespace, smoke: dict, table: str) -> None:
    """With --smoke, its settings and two jobs; the CSV defaults to results/bench/<table>[-smoke].csv."""
    if a.smoke:
        for k, v in smoke.items():
            setattr(a, k, v)
    a.jobs = a.jobs or (2 if a.smoke else 1)
    a.out = a.out or ROOT / "results" / "bench" / f"{table}{'-smoke' if a.smoke else ''}.csv"


def check_cases(prog: str, only: str, known: tuple[str, ...], profile: str) -> list[str] | None:
    """The cases of --only in order, or None (after one line naming the unknown ones)."""
    cases = [c for c in only.split(",") if c]
    unknown = set(cases) - set(known)
    if unknown:
        print(f"{prog}: unknown case(s) {', '.join(sorted(unknown))}; known: {', '.join(known)}", file=sys.stderr)
        return None
    if profile != "lan" and os.geteuid() != 0:
        print(f"{prog}: not root: profile {profile} will NOT be applied (runs on loopback)", flush=True)
    return cases


def run_cases(cases: list[str], label: str, results_dir: Path, command: Callable[[str, str], list[str]],
              measure: Callable[[str, Path], dict], jobs: int = 1) -> list[dict]:
    """One run per case, one after another (jobs > 1: that many at once, each run's output in
    <results-dir>/<run-id>.log; for smoke runs only, times and loopback counters then include the
    other runs'); a row per case, in the order of cases, with its status and what measure() read."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results_dir.mkdir(parents=True, exist_ok=True)

    def one(i: int, case: str) -> dict:
        run_id = f"{stamp}-{label}-{case}"
        cmd = command(case, run_id)
        log = results_dir / f"{run_id}.log"
        print(f"[bench] case {i}/{len(cases)} {case}: {' '.join(cmd[1:])}" + (f" (log: {log})" if jobs > 1 else ""),
              flush=True)
        t0 = time.perf_counter()
        if jobs > 1:
            with open(log, "w") as f:
                code = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
        else:
            code = subprocess.run(cmd, cwd=ROOT).returncode
        row = {"case": case, "run_wall_s": round(time.perf_counter() - t0, 1), "run_id": run_id,
               "status": "ok" if code == 0 else f"exit {code}"}
        try:
            row.update(measure(case, results_dir / run_id))
        except (OSError, ValueError, KeyError, IndexError) as e:
            row["status"] += f"; no tables ({type(e).__name__})"
        if jobs > 1:
            print(f"[bench] case {i}/{len(cases)} {case}: {row['status']} in {row['run_wall_s']} s", flush=True)
        return row

    if jobs <= 1:
        return [one(i, case) for i, case in enumerate(cases, 1)]
    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(one, range(1, len(cases) + 1), cases))


def add_ratios(rows: list[dict], ref_case: str, ratios: dict[str, str], acc_delta: str) -> None:
    """ratios: {column: measured column} gets row / reference (where both are measured and the
    reference is not 0); acc_delta gets the test accuracy's difference to the reference in points."""
    ref = next((r for r in rows if r["case"] == ref_case and "test_accuracy" in r), None)
    if ref is None:
        return
    for r in rows:
        for col, of in ratios.items():
            if r.get(of) is not None and ref.get(of):
                r[col] = round(r[of] / ref[of], 3)
        if "test_accuracy" in r:
            r[acc_delta] = round(100 * (r["test_accuracy"] - ref["test_accuracy"]), 2)


def write_table(rows: list[dict], fields: list[str], out: Path, title: str, centralized_note: str) -> None:
    """Write the CSV and print it, then the centralized peer's accuracy (the ceiling) beside it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(rows)
    print(f"\n{title}; written to {out}")
    print(pd.read_csv(out).drop(columns=["run_id"]).to_string(index=False))
    acc = next((r.get("test_accuracy") for r in rows if r["case"] == "centralized"), None)
    if acc is None or not math.isfinite(acc):
        print("centralized: not run or no accuracy (case centralized)")
    else:
        print(f"centralized ({centralized_note}): test accuracy {100 * acc:.2f} %")
