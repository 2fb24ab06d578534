"""FedBuff against synchronous FedAvg on heterogeneous clients (docs/scale.md): wall time
until the test accuracy first reaches the target, 20 clients on the `hetero` links in network
namespaces (root), same seeds, data, samples and learning rate for both strategies.

Each row is one real FL run through the launcher, a cell of the sweep this writes beside the tables
(fedbuff-sweep.json; the default settings' is experiments/sweeps/fedbuff.json) and runs into
results/sweeps/fedbuff, one cell at a time (--resume keeps the cells a stopped run finished,
--retry-failed runs the failed ones again, --tables-only rebuilds the tables). The runs are
interleaved (seed 0 fedavg, seed 0 fedbuff, seed 1 fedavg, ...) so that the load of this shared
2-core machine hits both alike.
Prints and writes results/bench/fedbuff.{csv,md,json}: per run the wall time to the target, the
round (FedAvg) or server version (FedBuff) that reached it, final accuracy, aggregations, updates
and rejected updates, bytes up; per strategy min/median/max over seeds of the time to target, how
many seeds reached it, and the ratio fedbuff/fedavg of the medians.

Time is rounds.csv `wall_time_s`: seconds from the start of training (after the initial model was
sent) to the broadcast of the model that reached the target, the evaluations and checkpoints of
the rows before it included. The sum of `round_time_s` leaves those out, and FedBuff's clients
keep training while the controller evaluates, so that sum would flatter FedBuff; it is reported
too ("excl. evaluation"). A seed that never reaches the target counts as infinitely slow in the
median and the max.

Settings and why:
- Links: profile `hetero`, client i on 20, 5 or 2 Mbit/s by i mod 3 (this kernel has no netem
  qdisc: rates only, no delay or loss; the run's manifest `link_applied` records what was applied).
- Compute: --speed-factors 1,1,0.5,0.25 cycling over the clients (as bench_adaptive): half the
  clients at full speed, a quarter at half and a quarter at a quarter speed, the straggler spread
  FedBuff is meant for (a synchronous round waits for the slowest, 4x). Four factors against three
  link rates: lcm 12, so every speed meets every link rate and slow compute is not tied to a slow
  link (client 11, speed 0.25 on 2 Mbit/s, is the slowest).
- Codec int8_sparse up (the default experiment's), fp32 down; Dirichlet(0.5), mnist_cnn, lr 0.05,
  momentum 0.9, one local epoch of --samples 160 samples in batches of 16 (10 local steps) per client
  and update: small batches keep the CPU work to 97 % within reach of this 2-core host.
- FedAvg: synchronous, all clients every round, at most --rounds rounds.
- FedBuff: all clients training at once (concurrency 20), buffer --buffer-size 15. With buffer 10
  (half the clients) a trial run (seed 0, docs/scale.md) phase-locked: every client came back about
  every second version, so the buffers alternated between two nearly disjoint halves of the
  clients, each a biased (non-IID) sample, and the accuracy swung by up to 25 points between
  versions. 15 of 20 makes consecutive buffers overlap and each one closer to the whole population,
  while a version still needs no straggler. --aggregations defaults to rounds * clients /
  buffer_size: the same number of client updates as FedAvg's budget.
  --max-staleness 20: in that trial a client came back 1-3 versions after it started, the
  quarter-speed ones 2-3, and up to 11 for the first update (started while all 21 processes were
  still warming up); the default 10 would have thrown some of those away. 20 only stops runaway
  staleness; s(tau) = 1/sqrt(1 + tau) already shrinks stale updates.
- Each run ends as soon as a row reaches the target (the launcher's --stop-accuracy; --full runs
  every round), with a cap of --rounds FedAvg rounds / --aggregations FedBuff versions.
- --train-subset 15000 keeps each of the 21 processes near 0.4 GB; a run is also ended, and its cell
  failed, if the host's available memory drops below --min-free-mb (the machine is shared).

    python benchmarks/bench_fedbuff.py                       # 3 seeds x {fedavg, fedbuff}, 20 clients
    python benchmarks/bench_fedbuff.py --seeds 0 --rounds 10 --buffer-size 5
    python benchmarks/bench_fedbuff.py --quick               # 4 clients, 2 rounds, one seed: the pipeline only
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import pandas as pd

from commlab.bench import BenchParser, BenchRun
from commlab.bench.accuracy import median, seconds_or_inf, spread, time_to_target, wall_times
from commlab.report.markdown import table as markdown_table
from commlab.report.runs import try_load_run
from commlab.sweep.benchmark import CellResult, add_sweep_options, run_sweep, write_spec

STRATEGIES = ("fedavg", "fedbuff")
RUN_COLUMNS = {"seed": "seed", "strategy": "strategy", "status": "status",
               "time_to_target_s": "wall time to target (s)", "step_to_target": "round/version reaching it",
               "time_to_target_excl_eval_s": "excl. evaluation (s)", "final_accuracy": "final accuracy (%)",
               "aggregations": "aggregations", "updates": "updates", "rejected": "rejected",
               "median_gap": "versions between a client's updates, median", "max_gap": "max",
               "up_MB": "bytes up (MB)", "up_MB_to_target": "up to target (MB)", "wall_s": "run wall (s)"}
SUMMARY_COLUMNS = {"strategy": "strategy", "reached": "seeds reaching target", "min_s": "min (s)",
                   "median_s": "median (s)", "max_s": "max (s)", "ratio": "median / fedavg median",
                   "median_excl_eval_s": "median excl. evaluation (s)", "median_final_accuracy": "median final accuracy (%)",
                   "median_aggregations": "median aggregations", "median_up_MB": "median bytes up (MB)"}


def strategy_flags(strategy: str, a: argparse.Namespace) -> dict:
    """Launcher flags (a sweep cell's) of a strategy: its rounds (FedAvg) or versions (FedBuff)."""
    if strategy == "fedavg":
        return {"strategy": "fedavg", "rounds": a.rounds}
    if strategy == "fedbuff":
        return {"strategy": "fedbuff", "rounds": a.aggregations, "buffer-size": a.buffer_size,
                "max-staleness": a.max_staleness}
    raise SystemExit(f"unknown strategy {strategy!r}: {', '.join(STRATEGIES)}")


def sweep_spec(a: argparse.Namespace) -> dict:
    """One cell per strategy, seeds interleaved (seed 0 fedavg, seed 0 fedbuff, seed 1 ...) so that
    the load of this shared machine hits both alike, one at a time (they measure time). A run ends
    once a round reaches the target (the launcher's --stop-accuracy; --full: every round), or when
    the host's available memory drops below --min-free-mb (the cell fails: rerun with --retry-failed)."""
    fixed = {"codec": a.codec, "clients": a.clients, "samples-per-round": a.samples, "batch-size": a.batch_size,
             "lr": a.lr, "profile": a.profile, "speed-factors": a.speed_factors, "test-subset": a.test_subset,
             **({"train-subset": a.train_subset} if a.train_subset else {})}
    stop = {"free_memory_below_mb": a.min_free_mb, **({"accuracy": a.target} if a.stop_at_target else {})}
    return {"name": a.tables.name, "launcher": "fl", "fixed": fixed,
            "cells": [strategy_flags(strategy, a) for strategy in a.strategies], "seeds": a.seeds, "stop": stop,
            "interleave_seeds": True, "jobs": 1}


def version_gaps(clients: pd.DataFrame) -> list[int]:
    """Server versions between each client's consecutive updates (round labels in clients-<i>.csv:
    an update labelled r trained from version r-1). An update's staleness is this gap or one less
    (a client whose update was not stale waits for the next version): FedAvg's gaps are all 1."""
    gaps: list[int] = []
    for _, rows in clients.groupby("client_id"):
        labels = sorted(rows["round"].astype(int))
        gaps += [b - a for a, b in zip(labels, labels[1:])]
    return gaps


def summarize_run(rounds: pd.DataFrame, target: float, clients: pd.DataFrame | None = None) -> dict:
    """What one run measured ({} when it has no rows: it failed before its first round)."""
    if rounds.empty:
        return {}
    rounds = rounds.sort_values("round").reset_index(drop=True)
    wall = wall_times(rounds)
    gaps = version_gaps(clients) if clients is not None and len(clients) else []
    return {**time_to_target(rounds, target),
            "median_gap": float(pd.Series(gaps).median()) if gaps else None, "max_gap": max(gaps) if gaps else None,
            "final_accuracy": 100 * float(rounds["test_accuracy"].iloc[-1]), "aggregations": len(rounds),
            "updates": int(rounds["n_participants"].sum()), "rejected": int(rounds["rejected_updates"].sum()),
            "up_MB": float(rounds["bytes_up"].sum() / 1e6), "wall_s": float(wall.iloc[-1]),
            "accuracy": [round(100 * x, 2) for x in rounds["test_accuracy"]], "wall_time_s": [round(x, 1) for x in wall]}


def summarize_strategies(runs: list[dict], baseline: str = "fedavg") -> pd.DataFrame:
    """Per strategy over its runs (seeds): min/median/max time to target, a run that never reached
    it (or failed) counting as infinitely slow; how many reached it; the median over the baseline's."""
    rows = []
    for strategy in dict.fromkeys(r["strategy"] for r in runs):
        mine = [r for r in runs if r["strategy"] == strategy]
        excl = [seconds_or_inf(r, "time_to_target_excl_eval_s") for r in mine]

        def med(key: str) -> float:
            return median([float(r[key]) for r in mine if r.get(key) is not None])
        rows.append({"strategy": strategy, **spread(mine, "time_to_target_s"),
                     "median_excl_eval_s": median(excl), "median_final_accuracy": med("final_accuracy"),
                     "median_aggregations": med("aggregations"), "median_up_MB": med("up_MB")})
    table = pd.DataFrame(rows)
    base = table.loc[table["strategy"] == baseline, "median_s"]
    ref = float(base.iloc[0]) if len(base) else math.nan
    table["ratio"] = [m / ref if math.isfinite(m) and math.isfinite(ref) and ref > 0 else math.nan
                      for m in table["median_s"]]
    return table


def shown(df: pd.DataFrame) -> pd.DataFrame:
    """Infinite times as "not reached", missing as "-" (markdown cells)."""
    def cell(v):
        if isinstance(v, float) and math.isinf(v):
            return "not reached"
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        return v
    return df.apply(lambda col: col.map(cell))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = BenchParser(__doc__, "fedbuff", {"seeds": [0], "clients": 4, "rounds": 2, "aggregations": 2, "buffer_size": 2,
                                         "samples": 100, "train_subset": 4000, "test_subset": 1000},
                    seeds=[0, 1, 2], profile="hetero")
    p.add_argument("--strategies", nargs="*", default=list(STRATEGIES))
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--rounds", type=int, default=30, help="FedAvg rounds (a cap: a run ends at the target)")
    p.add_argument("--aggregations", type=int, help="FedBuff server versions (default: rounds * clients / buffer size)")
    p.add_argument("--buffer-size", type=int, default=15)
    p.add_argument("--max-staleness", type=int, default=20)
    p.add_argument("--samples", type=int, default=160, help="samples per client and update")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--codec", default="int8_sparse")
    p.add_argument("--speed-factors", default="1,1,0.5,0.25")
    p.add_argument("--target", type=float, default=0.97, help="test accuracy to reach")
    p.add_argument("--train-subset", type=int, default=15000, help="0: the whole training set")
    p.add_argument("--test-subset", type=int, default=2000)
    p.add_argument("--full", dest="stop_at_target", action="store_false",
                   help="run every round / version (default: end a run once it reached the target)")
    p.add_argument("--min-free-mb", type=float, default=400.0,
                   help="end a run when the host's available memory drops below this (the machine is shared)")
    add_sweep_options(p)
    a = p.parse_args(argv)
    if a.aggregations is None:
        a.aggregations = max(1, round(a.rounds * a.clients / a.buffer_size))
    for strategy in a.strategies:
        strategy_flags(strategy, a)
    return a


def run_row(result: CellResult, a: argparse.Namespace) -> dict:
    """A cell's row: its seed, strategy, run id and status, and what its run folder measured."""
    row = {"seed": result.seed, "strategy": a.strategies[result.entry], "run_id": result.cell.run_id,
           "status": result.status}
    run = try_load_run(result.run_dir)
    if run is not None:
        clients = run.tables["clients"]
        row = {**row, **summarize_run(run.tables["rounds"], a.target, clients if len(clients) else None)}
    return row


def write_outputs(s: BenchRun, rows: list[dict], a: argparse.Namespace) -> None:
    bench_s = s.wall_s
    runs = pd.DataFrame(rows)
    summary = summarize_strategies(rows)
    budget = "each run ended once it reached the target" if a.stop_at_target else "every run to its end"
    settings = (f"{a.clients} clients, profile {a.profile} in network namespaces, speed factors {a.speed_factors} "
                f"(cycling), codec {a.codec} up / fp32 down, {a.samples} samples/client/update in batches of "
                f"{a.batch_size}, lr {a.lr:g}, mnist_cnn, Dirichlet(0.5)"
                f"{f', train subset {a.train_subset}' if a.train_subset else ''}, test subset {a.test_subset}; "
                f"FedAvg: at most {a.rounds} synchronous rounds of all clients; FedBuff: at most {a.aggregations} "
                f"versions, buffer {a.buffer_size}, max staleness {a.max_staleness}, all clients training at once; "
                f"{budget}; seeds {' '.join(map(str, a.seeds))}; target {100 * a.target:g} % test accuracy; "
                f"benchmark wall time {bench_s / 60:.1f} min")
    curves = pd.DataFrame([[r["seed"], r["strategy"], " ".join(f"{w:.0f}s:{x:.2f}" for w, x in
                                                             zip(r.get("wall_time_s", []), r.get("accuracy", [])))]
                           for r in rows], columns=["seed", "strategy", "curve"])
    per_run = runs.drop(columns=["accuracy", "wall_time_s"], errors="ignore")
    s.write(per_run, RUN_COLUMNS, "FedBuff against synchronous FedAvg: wall time to the target accuracy",
            notes=[settings, markdown_table(shown(summary.reindex(columns=list(SUMMARY_COLUMNS))), SUMMARY_COLUMNS),
                   "Per run:"],
            shown=shown(per_run.reindex(columns=list(RUN_COLUMNS))),
            after=["Test accuracy (%) against wall time since the start of training (s), per row:",
                   markdown_table(curves, {"seed": "seed", "strategy": "strategy", "curve": "wall s: accuracy %"})])
    s.path(".json").write_text(json.dumps(
        {"settings": settings, "sweep": str(s.path("-sweep.json")), "argv": a.argv, "bench_wall_s": round(bench_s, 1),
         "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
         "summary": summary.replace({math.inf: None}).to_dict(orient="records"), "runs": rows},
        indent=2, default=str))


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    spec = sweep_spec(a)
    if a.write_sweep:
        write_spec(spec, a.write_sweep)
        return 0
    if os.geteuid() != 0 and not a.tables_only:
        print("bench_fedbuff: needs root (the hetero links are network namespaces with shaped veths); skipped")
        return 0
    with BenchRun(a, len(spec["cells"]) * len(a.seeds), unit="cell") as s:
        rows = [run_row(result, a) for result in run_sweep(spec, a, s)]
        write_outputs(s, rows, a)
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
