"""Adaptive bits and bandwidth (docs/adaptive.md) against fixed settings with the uplink split
equally, on heterogeneous clients: 4 clients on the hetero4 profile (2/5/10/20 Mbit/s uplinks) in
network namespaces (root), compute speed 1/1/0.5/0.25, a shared uplink B; same seeds everywhere.

Each row is one real FL run through the launcher, a cell of the sweep this writes beside the tables
(adaptive-sweep.json; the default settings' is experiments/sweeps/adaptive.json) and runs into
results/sweeps/adaptive, one cell at a time (--resume keeps the cells a stopped run finished).
Runs are interleaved (seed 0: every policy, then seed 1, ...) so that the load of this shared
2-core machine hits every policy alike. Each run ends once a round reaches the target accuracy
(--stop-accuracy) or its round times sum to --time-limit.

Time is the sum of rounds.csv `round_time_s` (TrainCmd -> ModelBlob broadcast): every policy is a
synchronous FedAvg, so evaluation and checkpoints, the same for all, are left out. Prints and writes
results/bench/<--name, adaptive>{.csv,-runs.csv,.md,.json}:
- per policy over the seeds: how many reached the target; min/median/max time to it (a seed that
  missed counts as infinitely slow); min/median/max test accuracy after --budget seconds of round
  time (a run that stopped at the target earlier keeps its last accuracy); the median client idle
  per round and the median idle of the client that waits most (rounds 3+, where the split starts;
  idle = round time - the client's own compute, encode and upload); upload bytes per round;
- per run the same, with its bits per client;
- the verdict: adaptive's median time against the best fixed baseline's, and whether its idle is
  the smallest;
- beta fitted to the equal:<bits> runs' rounds to the target (R(q) = R0 (1 + beta phi(q) / M)).

Policies: `joint`, `joint:<beta>` or `joint:<beta>:<min bits>` (the allocation of qsgd bits and
rates), `joint:<codec>` (any compressor, e.g. int8_sparse, and the allocation of its rates alone),
`equal:<bits>` (qsgd at fixed bits, B / M each), `equal:<codec>` (any compressor, B / M each).
qsgd bits go out as entropy-coded qsgdz frames (--qsgd qsgd: the fixed-width ones).

    python benchmarks/bench_adaptive.py                   # 7 policies x 3 seeds, to 97 %
    python benchmarks/bench_adaptive.py --policies joint:0.1 equal:4 --probe-bits 4 --seeds 0 --max-rounds 6 --target 0.9
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd

from commlab.bench import BenchParser, BenchRun
from commlab.bench.accuracy import median, spread, time_to_target
from commlab.codecs import CodecError, get_codec
from commlab.fl.adaptive.bits import variance_factor
from commlab.fl.adaptive.section import PROBE_ROUNDS
from commlab.report.markdown import table as markdown_table
from commlab.report.runs import Run, try_load_run
from commlab.sweep.benchmark import add_sweep_options, run_sweep, write_spec

CLIENTS = 4
# joint with beta 0 and at least 2 bits: beta as fitted by this bench over 2-8 bits (docs/adaptive.md);
# joint:int8_sparse: the same allocation of rates for the baseline with the smallest frames.
POLICIES = ["joint:0:2", "joint:int8_sparse", "equal:2", "equal:4", "equal:8", "equal:fp32", "equal:int8_sparse"]
RUN_COLUMNS = {"policy": "policy", "seed": "seed", "status": "status", "time_s": "time to target (s)",
               "round_to_target": "round reaching target", "accuracy_at_budget": "accuracy at budget (%)",
               "final_accuracy": "final accuracy (%)", "median_round_s": "median round time (s)",
               "mean_idle_s": "mean client idle / round (s)", "max_idle_s": "idle of the most waiting client (s)",
               "up_MB_per_round": "up per round, all rounds (MB)", "bits": "bits per client (rounds 3+)"}
POLICY_COLUMNS = {"policy": "policy", "reached": "seeds reaching target", "min_s": "min (s)",
                  "median_s": "median (s)", "max_s": "max (s)", "acc_min": "accuracy at budget: min (%)",
                  "acc_median": "median (%)", "acc_max": "max (%)", "mean_idle_s": "client idle / round (s)",
                  "max_idle_s": "most waiting client idle / round (s)", "up_MB_per_round": "up per round, all rounds (MB)"}


def policy_flags(policy: str, family: str = "qsgdz") -> dict:
    """"joint", "joint:<beta>", "joint:<beta>:<min bits>", "joint:<codec>", "equal:<bits>" or
    "equal:<codec>" -> launcher flags (a sweep cell's); qsgd bits are `family`'s frames (qsgdz: entropy-coded)."""
    name, _, arg = policy.partition(":")
    if name == "joint":
        beta, _, min_bits = arg.partition(":")
        try:
            return ({"codec": f"{family}15", "adaptive": "joint"} | ({"beta": float(beta)} if beta else {})
                    | ({"min-bits": int(min_bits)} if min_bits else {}))
        except ValueError:
            pass
    if name == "equal" and arg.isdigit():
        return {"codec": f"{family}15", "adaptive": "equal", "fixed-bits": int(arg)}
    if name in ("equal", "joint") and arg:
        try:
            get_codec(arg)
            return {"codec": arg, "adaptive": name, "fixed-bits": "codec"}
        except CodecError:
            pass
    raise SystemExit(f"unknown policy {policy!r}: joint, joint:<beta>[:<min bits>], joint:<codec>, "
                     "equal:<bits> or equal:<codec>")


def sweep_spec(a: argparse.Namespace) -> dict:
    """One cell per policy, seeds interleaved (seed 0 of every policy, then seed 1, ...) so that the
    load of this shared machine hits every policy alike, one at a time (they measure time); each
    run ends at the target accuracy or once its round times sum to the time limit."""
    fixed = {"clients": CLIENTS, "samples-per-round": a.samples, "profile": a.profile,
             "total-uplink-mbit": a.uplink_mbit, "probe-bits": a.probe_bits, "speed-factors": a.speed_factors,
             "train-subset": a.train_subset, "test-subset": a.test_subset}
    return {"name": a.tables.name, "launcher": "fl", "fixed": fixed,
            "cells": [policy_flags(policy, a.qsgd) for policy in a.policies], "seeds": a.seeds,
            "stop": {"rounds": a.max_rounds, "accuracy": a.target, "time_s": a.time_limit},
            "interleave_seeds": True, "jobs": 1}


def idle_times(rounds: pd.DataFrame, clients: pd.DataFrame) -> tuple[float, float]:
    """Rounds 3+ (where every policy splits B): the mean idle of all clients per round, and the mean
    over rounds of the largest idle of a client in the round (the one that waits most)."""
    busy = clients["train_time_s"] + clients["stretch_s"] + clients["encode_time_s"] + clients["upload_s"]
    rows = clients.assign(busy=busy).merge(rounds[["round", "round_time_s"]], on="round")
    rows = rows[rows["round"] > PROBE_ROUNDS]
    if rows.empty:
        return np.nan, np.nan
    idle = (rows["round_time_s"] - rows["busy"]).clip(lower=0)
    return float(idle.mean()), float(idle.groupby(rows["round"]).max().mean())


def accuracy_at(rounds: pd.DataFrame, budget_s: float) -> float | None:
    """Test accuracy (%) of the last round ending within `budget_s` of summed round time; a run
    that stopped earlier (at the target) keeps its last accuracy. None: no round that short."""
    within = rounds[rounds["round_time_s"].cumsum() <= budget_s]
    return 100 * float(within["test_accuracy"].iloc[-1]) if len(within) else None


def summarize(run: Run, target: float, budget_s: float) -> dict:
    rounds = run.tables["rounds"].sort_values("round").reset_index(drop=True)
    clients = run.tables["clients"]
    hit = time_to_target(rounds, target)
    mean_idle, max_idle = idle_times(rounds, clients)
    later = clients[clients["round"] > PROBE_ROUNDS].pivot(index="round", columns="client_id", values="bits")
    return {"time_s": hit["time_to_target_excl_eval_s"], "round_to_target": hit["step_to_target"],
            "accuracy_at_budget": accuracy_at(rounds, budget_s),
            "final_accuracy": 100 * float(rounds["test_accuracy"].iloc[-1]),
            "median_round_s": float(rounds["round_time_s"].median()), "mean_idle_s": mean_idle,
            "max_idle_s": max_idle, "up_MB_per_round": float(rounds["bytes_up"].mean() / 1e6),
            "bits": " / ".join(f"{c}: {'-'.join('' if pd.isna(b) else str(int(b)) for b in later[c])}"
                               for c in later.columns),
            "accuracy": [round(100 * x, 2) for x in rounds["test_accuracy"]],
            "round_time_s": [round(x, 1) for x in rounds["round_time_s"]]}


def summarize_policies(runs: list[dict]) -> pd.DataFrame:
    """Per policy over its seeds: min/median/max time to the target (a missed or failed seed is
    infinitely slow), min/median/max accuracy at the budget, median idle and bytes."""
    rows = []
    for policy in dict.fromkeys(r["policy"] for r in runs):
        mine = [r for r in runs if r["policy"] == policy]
        accs = [float(r["accuracy_at_budget"]) for r in mine if r.get("accuracy_at_budget") is not None]

        def med(key: str) -> float:
            return median([float(r[key]) for r in mine if r.get(key) is not None and not pd.isna(r[key])])
        rows.append({"policy": policy, **spread(mine, "time_s"),
                     "acc_min": min(accs, default=np.nan), "acc_median": median(accs), "acc_max": max(accs, default=np.nan),
                     "mean_idle_s": med("mean_idle_s"), "max_idle_s": med("max_idle_s"),
                     "up_MB_per_round": med("up_MB_per_round")})
    return pd.DataFrame(rows)


def verdict(table: pd.DataFrame) -> list[str]:
    """Each adaptive policy against the best fixed baseline (smallest median time), and its idle
    against every fixed baseline's."""
    adaptive = table[table["policy"].str.startswith("joint")]
    fixed = table[~table["policy"].str.startswith("joint")]
    if adaptive.empty or fixed.empty:
        return []
    best = fixed.loc[fixed["median_s"].idxmin()]
    lines = []
    for _, row in adaptive.iterrows():
        ratio = row["median_s"] / best["median_s"] if np.isfinite(best["median_s"]) else np.nan
        faster = row["median_s"] < best["median_s"]
        least_idle = row["max_idle_s"] < fixed["max_idle_s"].min()
        lines.append(f"{row['policy']}: median {row['median_s']:.1f} s to the target against the best fixed "
                     f"baseline {best['policy']}'s {best['median_s']:.1f} s (ratio {ratio:.3f}: "
                     f"{'sooner' if faster else 'NOT sooner'}); idle of its most waiting client "
                     f"{row['max_idle_s']:.2f} s per round, {'smaller' if least_idle else 'NOT smaller'} "
                     f"than every fixed baseline's (smallest {fixed['max_idle_s'].min():.2f} s)")
    return lines


def fit_beta(runs: list[dict]) -> str:
    """beta of R(q) = R0 (1 + beta phi(q) / M) (equal bits q for all M clients, weights 1/M) by
    least squares on the equal:<bits> runs' rounds to the target (median over seeds per q)."""
    points = {}
    for r in runs:
        name, _, arg = r["policy"].partition(":")
        if name == "equal" and arg.isdigit() and r.get("round_to_target") is not None:
            points.setdefault(int(arg), []).append(float(r["round_to_target"]))
    if len(points) < 2:
        return "beta: not fitted (needs equal:<bits> runs at two bit widths or more that reached the target)"
    bits = sorted(points)
    x = np.array([variance_factor(q) / CLIENTS for q in bits])
    y = np.array([median(points[q]) for q in bits])
    slope, r0 = np.polyfit(x, y, 1)
    beta = slope / r0 if r0 > 0 else np.nan
    pairs = ", ".join(f"{q} bits: {y[i]:g} rounds" for i, q in enumerate(bits))
    return f"beta fitted to the median rounds to the target ({pairs}): {beta:.3g} (R0 {r0:.3g} rounds)"


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "adaptive", {"policies": ["joint:0:2", "equal:4"], "seeds": [0], "max_rounds": 4,
                                          "samples": 300, "train_subset": 4000, "test_subset": 500},
                    seeds=[0, 1, 2], profile="hetero4")
    p.add_argument("--policies", nargs="*", default=POLICIES)
    p.add_argument("--max-rounds", type=int, default=30, help="cap on rounds (runs stop at the target first)")
    p.add_argument("--samples", type=int, default=1000, help="samples per client and round")
    p.add_argument("--uplink-mbit", type=float, default=8.0, help="the shared uplink B")
    p.add_argument("--probe-bits", type=int, default=2, help="joint's probe rounds (2: the frames of equal:2)")
    p.add_argument("--speed-factors", default="1,1,0.5,0.25")
    p.add_argument("--target", type=float, default=0.97, help="test accuracy to reach")
    p.add_argument("--budget", type=float, default=60.0, help="accuracy after this much summed round time (s)")
    p.add_argument("--time-limit", type=float, default=420.0, help="end a run that has not reached the target "
                   "once its round times sum to this (s)")
    p.add_argument("--train-subset", type=int, default=20000)
    p.add_argument("--test-subset", type=int, default=2000)
    p.add_argument("--qsgd", choices=("qsgd", "qsgdz"), default="qsgdz",
                   help="frames of the qsgd bits (joint, equal:<bits>): qsgdz entropy-coded, qsgd fixed-width")
    add_sweep_options(p)
    a = p.parse_args(argv)
    spec = sweep_spec(a)
    if a.write_sweep:
        write_spec(spec, a.write_sweep)
        return 0
    runs = []
    with BenchRun(a, len(spec["cells"]) * len(a.seeds), unit="cell") as s:
        for result in run_sweep(spec, a, s):
            run = {"policy": a.policies[result.entry], "seed": result.seed, "status": result.status,
                   "run_id": result.cell.run_id}
            done = try_load_run(result.run_dir)
            if done is not None:
                run.update(summarize(done, a.target, a.budget))
            runs.append(run)
        per_run, per_policy = pd.DataFrame(runs), summarize_policies(runs)
        per_run.to_csv(s.path("-runs.csv"), index=False)
        settings = (f"{CLIENTS} clients, profile {a.profile}, shared uplink B = {a.uplink_mbit:g} Mbit/s, speed "
                    f"factors {a.speed_factors}, {a.samples} samples/client/round (train subset {a.train_subset}, "
                    f"test subset {a.test_subset}), mnist_cnn, Dirichlet(0.5), seeds {' '.join(map(str, a.seeds))}; "
                    f"target {100 * a.target:g} % test accuracy (runs end there, or at {a.time_limit:g} s of round "
                    f"time, or after {a.max_rounds} rounds); accuracy at a budget of {a.budget:g} s; rounds "
                    f"1-{PROBE_ROUNDS} probe over each client's own link (joint at {a.probe_bits} bits); qsgd bits "
                    f"as {a.qsgd} frames")
        s.write(per_policy, POLICY_COLUMNS, "Adaptive bits and bandwidth against fixed settings", notes=[settings],
                after=[*verdict(per_policy), fit_beta(runs), "Per run:",
                       markdown_table(per_run.reindex(columns=list(RUN_COLUMNS)), RUN_COLUMNS)])
        s.path(".json").write_text(json.dumps({"settings": settings, "sweep": str(s.path("-sweep.json")),
                                               "argv": a.argv, "runs": runs}, indent=2, default=str))
    return 0 if all(r["status"] == "ok" for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
