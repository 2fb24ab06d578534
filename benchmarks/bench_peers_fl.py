"""DDS FL beside Flower FedAvg on the same shaped links (docs/peers.md).

    python benchmarks/bench_peers_fl.py [--profile 10mbit] [--clients 2] [--rounds 10] [--smoke]

One run each, one after another, with `make fl-fp32`'s model, Dirichlet partitions, per-round
subsets, seeds and hyper-parameters: DDS fp32 and DDS int8_sparse (`python -m commlab.fl.run`) and
Flower FedAvg (`python -m commlab.peers.run --kind flower`, needs flwr). As root with a profile other
than lan every node runs in its own network namespace with the profile on its eth0; bytes are then
the controller's eth0 counters for every program (payload plus all headers); on loopback they are
the DDS CommStats and, for Flower, the shared `lo` counters (an upper bound). Per case: bytes up per
client and round, bytes down per round (controller), median round time, median round time minus
the slowest client's training ("overhead": communication, (de)serialisation, aggregation), test
accuracy after the last round, and the ratios to Flower. `--smoke`: 2 rounds on small subsets (CI).
Writes results/bench/peers-fl[-smoke].csv and prints it.
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
CASES = ("dds-fp32", "dds-int8_sparse", "flower")
FIELDS = ["case", "bytes_up_per_client_round", "bytes_down_per_round", "round_time_s", "overhead_s",
          "test_accuracy", "rounds", "bytes_up_vs_flower", "round_time_vs_flower", "acc_delta_vs_flower_pts",
          "bytes_from", "run_wall_s", "status", "run_id"]
SMOKE = {"rounds": 2, "samples_per_round": 300, "train_subset": 2000, "test_subset": 500}


def command(case: str, a: argparse.Namespace, run_id: str) -> list[str]:
    common = ["--clients", str(a.clients), "--rounds", str(a.rounds), "--samples-per-round", str(a.samples_per_round),
              "--profile", a.profile, "--seed", str(a.seed), "--results-dir", str(a.results_dir), "--run-id", run_id]
    for flag, value in (("--train-subset", a.train_subset), ("--test-subset", a.test_subset)):
        if value:
            common += [flag, str(value)]
    if case == "flower":
        return [sys.executable, "-m", "commlab.peers.run", "--kind", "flower", *common]
    return [sys.executable, "-m", "commlab.fl.run", "--codec", case.removeprefix("dds-"), "--backend", "local", *common]


def measure(run_dir: Path) -> dict:
    rounds = pd.read_csv(run_dir / "rounds.csv")
    iface = rounds["iface_bytes_up"].notna().all() and rounds["iface_bytes_down"].notna().all()
    kind = "iface_bytes" if iface else "bytes"
    up, down = rounds[f"{kind}_up"], rounds[f"{kind}_down"]
    clients = pd.concat([pd.read_csv(p) for p in sorted(run_dir.glob("clients-*.csv"))], ignore_index=True)
    slowest = clients.groupby("round")["train_time_s"].max()
    overhead = (rounds.set_index("round")["round_time_s"] - slowest).dropna()
    return {"bytes_up_per_client_round": round((up / rounds["n_participants"]).mean()),
            "bytes_down_per_round": round(down.mean()),
            "round_time_s": round(rounds["round_time_s"].median(), 3),
            "overhead_s": round(overhead.median(), 3),
            "test_accuracy": round(float(rounds["test_accuracy"].iloc[-1]), 4), "rounds": len(rounds),
            "bytes_from": "controller iface" if iface else "CommStats / lo"}


def ratios(rows: list[dict]) -> None:
    ref = next((r for r in rows if r["case"] == "flower" and "test_accuracy" in r), None)
    if ref is None:
        return
    for r in rows:
        if "test_accuracy" in r:
            r["bytes_up_vs_flower"] = round(r["bytes_up_per_client_round"] / ref["bytes_up_per_client_round"], 3)
            r["round_time_vs_flower"] = round(r["round_time_s"] / ref["round_time_s"], 3)
            r["acc_delta_vs_flower_pts"] = round(100 * (r["test_accuracy"] - ref["test_accuracy"]), 2)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="10mbit")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--samples-per-round", type=int, default=6000)
    p.add_argument("--train-subset", type=int, help="random training subset (default: all 60000)")
    p.add_argument("--test-subset", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true", help="2 rounds of 300 samples, 2000/500 sample subsets (CI)")
    p.add_argument("--only", default=",".join(CASES), help="comma-separated cases")
    p.add_argument("--results-dir", type=Path, default=ROOT / "results")
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    if a.smoke:
        for k, v in SMOKE.items():
            setattr(a, k, v)
    a.out = a.out or ROOT / "results" / "bench" / f"peers-fl{'-smoke' if a.smoke else ''}.csv"
    cases = [c for c in a.only.split(",") if c]
    unknown = set(cases) - set(CASES)
    if unknown:
        print(f"bench_peers_fl: unknown case(s) {', '.join(sorted(unknown))}; known: {', '.join(CASES)}",
              file=sys.stderr)
        return 2
    if a.profile != "lan" and os.geteuid() != 0:
        print(f"bench_peers_fl: not root: profile {a.profile} will NOT be applied (runs on loopback)", flush=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rows = []
    for i, case in enumerate(cases, 1):
        run_id = f"{stamp}-bench-peers-fl-{case}"
        cmd = command(case, a, run_id)
        print(f"[bench] case {i}/{len(cases)} {case}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        code = subprocess.run(cmd, cwd=ROOT).returncode
        row = {"case": case, "run_wall_s": round(time.perf_counter() - t0, 1), "run_id": run_id,
               "status": "ok" if code == 0 else f"exit {code}"}
        try:
            row.update(measure(a.results_dir / run_id))
        except (OSError, ValueError, KeyError, IndexError) as e:
            row["status"] += f"; no tables ({type(e).__name__})"
        rows.append(row)
    ratios(rows)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, restval="")
        w.writeheader()
        w.writerows(rows)
    print(f"\n{a.profile}, {a.clients} clients, {a.rounds} rounds of {a.samples_per_round} samples per client, "
          f"train subset {a.train_subset or 'all'}; written to {a.out}")
    print(pd.read_csv(a.out).drop(columns=["run_id"]).to_string(index=False))
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
