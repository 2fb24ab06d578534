"""Adaptive bits and bandwidth (docs/adaptive.md) against fixed qsgd bits with the uplink split
equally, on heterogeneous clients: 4 clients on the hetero4 profile (2/5/10/20 Mbit/s uplinks) in
network namespaces (root), compute speed 1/1/0.5/0.25, a shared uplink B; same seeds everywhere.

Each row is one real FL run through the launcher. Prints and writes results/bench/adaptive.{csv,md,json}:
wall time (sum of round times, TrainCmd -> ModelBlob) to the target accuracy and the part of it
after the two probe rounds (every policy runs rounds 1-2 at its bits over each client's own link),
final accuracy, median round time, mean client idle time per round (round time - the client's own
compute, encode and upload), upload bytes per round, and the bits of each client per round.

    python benchmarks/bench_adaptive.py                           # joint, equal:4, equal:8
    python benchmarks/bench_adaptive.py --policies joint joint:0.1 equal:2 --rounds 6 --samples 300
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from commlab.progress import Progress
from commlab.report.markdown import table as markdown_table

COLUMNS = {"policy": "policy", "status": "status", "time_to_target_s": "wall time to target (s)",
           "round_to_target": "round reaching target", "after_probe_s": "of which rounds 3+ (s)", "final_accuracy": "final accuracy (%)",
           "median_round_s": "median round time (s)", "mean_idle_s": "mean client idle / round (s)",
           "up_MB_per_round": "up per round (MB)", "bits": "bits per client (rounds 3+)"}


def policy_flags(policy: str) -> list[str]:
    """"joint", "joint:<beta>" or "equal:<bits>" -> launcher flags."""
    name, _, arg = policy.partition(":")
    if name == "joint":
        try:
            return ["--adaptive", "joint"] + (["--beta", str(float(arg))] if arg else [])
        except ValueError:
            pass
    if name == "equal" and arg.isdigit():
        return ["--adaptive", "equal", "--fixed-bits", arg]
    raise SystemExit(f"unknown policy {policy!r}: joint, joint:<beta> or equal:<bits>")


def fl_run(policy: str, a: argparse.Namespace, run_id: str) -> str:
    cmd = [sys.executable, "-m", "commlab.fl.run", "--codec", "qsgd15", *policy_flags(policy),
           "--clients", "4", "--rounds", str(a.rounds), "--samples-per-round", str(a.samples),
           "--profile", a.profile, "--backend", "local", "--total-uplink-mbit", str(a.uplink_mbit),
           "--probe-bits", str(a.probe_bits), "--speed-factors", a.speed_factors, "--seed", str(a.seed),
           "--train-subset", str(a.train_subset), "--test-subset", str(a.test_subset),
           "--results-dir", str(a.results_dir), "--run-id", run_id]
    with open(a.results_dir / f"{run_id}.log", "w") as f:
        f.write(" ".join(cmd) + "\n")
        f.flush()
        code = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
    return "ok" if code == 0 else f"exit {code}"


def summarize(run_dir: Path, target: float) -> dict:
    rounds = pd.read_csv(run_dir / "rounds.csv")
    clients = pd.concat([pd.read_csv(p) for p in sorted(run_dir.glob("clients-*.csv"))])
    wall = rounds["round_time_s"].cumsum()
    hit = rounds.index[rounds["test_accuracy"] >= target]
    busy = clients["train_time_s"] + clients["stretch_s"] + clients["encode_time_s"] + clients["upload_s"]
    idle = clients.assign(busy=busy).merge(rounds[["round", "round_time_s"]], on="round")
    idle = (idle["round_time_s"] - idle["busy"]).clip(lower=0)
    later = clients[clients["round"] >= 3].pivot(index="round", columns="client_id", values="bits")
    return {"time_to_target_s": float(wall[hit[0]]) if len(hit) else None,
            "round_to_target": int(rounds["round"][hit[0]]) if len(hit) else None,
            "after_probe_s": float(wall[hit[0]] - wall[1]) if len(hit) and hit[0] >= 2 else None,
            "final_accuracy": 100 * float(rounds["test_accuracy"].iloc[-1]),
            "median_round_s": float(rounds["round_time_s"].median()), "mean_idle_s": float(idle.mean()),
            "up_MB_per_round": float(rounds["bytes_up"].mean() / 1e6),
            "bits": " / ".join(f"{c}: {'-'.join(str(int(b)) for b in later[c])}" for c in later.columns),
            "accuracy": [round(100 * x, 2) for x in rounds["test_accuracy"]],
            "round_time_s": [round(x, 1) for x in rounds["round_time_s"]]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policies", nargs="*", default=["joint", "equal:4", "equal:8"])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--samples", type=int, default=500, help="samples per client and round")
    p.add_argument("--profile", default="hetero4")
    p.add_argument("--uplink-mbit", type=float, default=8.0, help="the shared uplink B")
    p.add_argument("--probe-bits", type=int, default=4)
    p.add_argument("--speed-factors", default="1,1,0.5,0.25")
    p.add_argument("--target", type=float, default=0.85, help="test accuracy to reach")
    p.add_argument("--train-subset", type=int, default=20000)
    p.add_argument("--test-subset", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results-dir", type=Path, default=Path("results"))
    a = p.parse_args()
    for policy in a.policies:
        policy_flags(policy)
    a.results_dir = a.results_dir.resolve()
    a.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rows = []
    with Progress(len(a.policies), "run", in_place=False) as progress:
        for k, policy in enumerate(a.policies):
            run_id = f"bench-adaptive-{stamp}-{policy.replace(':', '')}"
            row = {"policy": policy, "status": fl_run(policy, a, run_id), "run_id": run_id}
            if (a.results_dir / run_id / "rounds.csv").exists():
                row.update(summarize(a.results_dir / run_id, a.target))
            rows.append(row)
            progress.update(k + 1, f"{policy} {row['status']}")
    table = pd.DataFrame(rows)
    out = a.results_dir / "bench"
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "adaptive.csv", index=False)
    settings = (f"4 clients, profile {a.profile}, shared uplink B = {a.uplink_mbit:g} Mbit/s, speed factors "
                f"{a.speed_factors}, {a.rounds} rounds, {a.samples} samples/client/round (train subset "
                f"{a.train_subset}, test subset {a.test_subset}), mnist_cnn, Dirichlet(0.5), seed {a.seed}; "
                f"target {100 * a.target:g} % test accuracy; joint probes rounds 1-2 at {a.probe_bits} bits over "
                f"each client's own link")
    per_round = pd.DataFrame([[r["policy"], *(f"{x:.2f}" for x in r.get("accuracy", []))] for r in rows])
    per_round.columns = ["policy", *range(1, len(per_round.columns))]
    times = pd.DataFrame([[r["policy"], *(f"{x:.1f}" for x in r.get("round_time_s", []))] for r in rows])
    times.columns = ["policy", *range(1, len(times.columns))]
    text = (settings + "\n\n" + markdown_table(table.reindex(columns=list(COLUMNS)), COLUMNS)
            + "\n\nTest accuracy (%) per round:\n\n" + markdown_table(per_round, {c: str(c) for c in per_round.columns})
            + "\n\nRound time (s) per round:\n\n" + markdown_table(times, {c: str(c) for c in times.columns}) + "\n")
    (out / "adaptive.md").write_text(text)
    (out / "adaptive.json").write_text(json.dumps({"settings": settings, "stamp": stamp, "argv": sys.argv[1:],
                                                   "runs": rows}, indent=2, default=str))
    print(text)
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
