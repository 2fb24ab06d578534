"""The part bench_peers.py (DDP vs gloo) and bench_peers_fl.py (FL vs Flower) share (run_table):
the cases to run (--only) and how many at once (--jobs; --quick: two), a row per case measured from
its run's tables, the ratios to the reference peer, and the table with the centralized peer's
accuracy below it."""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from commlab.bench import BenchParser, BenchRun
from commlab.fl.config import OptimizerSection, TrainingSection
from commlab.report.runs import RunError

JOBS_NOTE = ("(cases ran concurrently: times and loopback byte counters (gloo, Flower) include the other runs'; "
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


Command = Callable[[str, argparse.Namespace, str], list[str]]  # (case, args, run id) -> argv
Measure = Callable[[str, argparse.Namespace, Path], dict]  # (case, args, run folder) -> measured columns
Describe = Callable[[argparse.Namespace], str]


@dataclass(frozen=True)
class Ratio:
    """A column of ratios: each row's measured column `of` over case `case`'s."""
    name: str
    of: str
    case: str

    @property
    def column(self) -> str:
        return f"{self.name}_x_of_{self.case.replace('-', '_')}"


@dataclass(frozen=True)
class PeerTable:
    """What one peer benchmark compares: its cases, how each is run and measured, the reference
    peer and the columns of ratios to it, what the table says above and below it."""
    label: str  # in run ids: <stamp>-<label>-<case>
    cases: tuple[str, ...]  # run by default, in this order
    known: tuple[str, ...]
    command: Command
    measure: Measure
    measured: list[str]  # the columns measure() fills
    reference: str
    ratios: dict[str, str]  # <name>_x_of_<reference> is the row's measured column over the reference's
    title: str
    settings: Describe
    ceiling: Describe  # the centralized peer's budget
    train_subset: int | None  # --train-subset's default (None: all 60,000)
    more_ratios: tuple[Ratio, ...] = ()  # ratios to other cases than the reference (empty where it did not run)

    @property
    def ref(self) -> str:
        return self.reference.replace("-", "_")

    @property
    def acc_delta(self) -> str:
        return f"acc_delta_vs_{self.ref}_pts"

    @property
    def all_ratios(self) -> list[Ratio]:
        return [*(Ratio(name, of, self.reference) for name, of in self.ratios.items()), *self.more_ratios]

    @property
    def fields(self) -> list[str]:
        return ["case", *self.measured, *(r.column for r in self.all_ratios), self.acc_delta,
                "run_wall_s", "status", "run_id"]


def run_table(p: BenchParser, argv: list[str] | None, t: PeerTable) -> int:
    """Every case of --only run and measured, the ratios to the reference, the table written with
    the settings above it and the centralized peer's accuracy below it."""
    a = parse_cases(p, argv, t)
    with BenchRun(a, len(a.cases), "case") as s:
        rows = run_cases(s, a.cases, t.label, lambda case, run_id: t.command(case, a, run_id),
                         lambda case, run_dir: t.measure(case, a, run_dir), a.jobs)
        add_ratios(rows, t.all_ratios)
        add_accuracy_delta(rows, t.reference, t.acc_delta)
        write_table(s, rows, t.fields, t.title, t.settings(a), t.ceiling(a))
    return 0 if all(r["status"] == "ok" for r in rows) else 1


def parse_cases(p: BenchParser, argv: list[str] | None, t: PeerTable) -> argparse.Namespace:
    """The arguments, with --only, --jobs and the data subsets; a.cases the cases of --only in
    order (an unknown or repeated one: one line, exit 2; a repeat would share its first run's id and
    folder, so its tables would be appended to the first's)."""
    p.add_argument("--train-subset", type=int, default=t.train_subset,
                   help=f"random training subset (default: {t.train_subset or 'all 60000'})")
    p.add_argument("--test-subset", type=int, help="random test subset (default: all 10000)")
    p.add_argument("--only", default=",".join(t.cases), help=f"comma-separated cases of {', '.join(t.known)}")
    p.add_argument("--jobs", type=int, default=1, help="cases run at once (--quick: 2, its times and loopback "
                   "counters then include the other run's: it checks the pipeline, it measures nothing)")
    a = p.parse_args(argv)
    a.cases = [c for c in a.only.split(",") if c]
    unknown = set(a.cases) - set(t.known)
    if unknown:
        p.error(f"unknown case(s) {', '.join(sorted(unknown))}; known: {', '.join(t.known)}")
    repeated = sorted({c for c in a.cases if a.cases.count(c) > 1})
    if repeated:
        p.error(f"case(s) {', '.join(repeated)} given more than once in --only; run the benchmark again to repeat them")
    if a.profile != "lan" and os.geteuid() != 0:
        print(f"{p.prog}: not root: profile {a.profile} will NOT be applied (runs on loopback)", flush=True)
    return a


def run_cases(s: BenchRun, cases: list[str], label: str, command: Callable[[str, str], list[str]],
              measure: Callable[[str, Path], dict], jobs: int = 1) -> list[dict]:
    """One run per case, one after another (jobs > 1: that many at once; for quick runs only,
    times and loopback counters then include the other runs'); a row per case, in the order of
    cases, with its status and what measure() read from its run folder."""
    stamp = time.strftime("%Y%m%d-%H%M%S")

    def one(case: str) -> dict:
        run_id = f"{stamp}-{label}-{case}"
        outcome = s.run(command(case, run_id), run_id)
        row = {"case": case, "run_wall_s": round(outcome.wall_s, 1), "run_id": run_id, "status": outcome.status}
        try:
            row.update(measure(case, s.args.results_dir / run_id))
        except (RunError, OSError, KeyError, IndexError) as e:
            row["status"] += f"; no tables ({type(e).__name__})"
        s.step(f"{case} {row['status']} in {row['run_wall_s']} s")
        return row

    with ThreadPoolExecutor(max(jobs, 1)) as pool:
        return list(pool.map(one, cases))


def add_ratios(rows: list[dict], ratios: list[Ratio]) -> None:
    """Each ratio's column gets the row's measured value over its case's (to 4 significant digits:
    a sparse codec's bytes are a small fraction), where both are measured and the case's is not 0."""
    by_case = {r["case"]: r for r in rows}
    for ratio in ratios:
        ref = by_case.get(ratio.case, {}).get(ratio.of)
        for r in rows:
            if r.get(ratio.of) is not None and ref:
                r[ratio.column] = float(f"{r[ratio.of] / ref:.4g}")


def add_accuracy_delta(rows: list[dict], ref_case: str, column: str) -> None:
    """column gets the test accuracy's difference to the reference case's, in points."""
    ref = next((r for r in rows if r["case"] == ref_case and "test_accuracy" in r), None)
    if ref is None:
        return
    for r in rows:
        if "test_accuracy" in r:
            r[column] = round(100 * (r["test_accuracy"] - ref["test_accuracy"]), 2)


def write_table(s: BenchRun, rows: list[dict], fields: list[str], title: str, settings: str,
                centralized_note: str) -> None:
    """The table of every case (the CSV with run ids), the centralized peer's accuracy (the
    ceiling) on its own line below it."""
    acc = next((r.get("test_accuracy") for r in rows if r["case"] == "centralized"), None)
    ceiling = ("centralized: not run or no accuracy (case centralized)" if acc is None or not math.isfinite(acc)
               else f"centralized ({centralized_note}): test accuracy {100 * acc:.2f} %")
    notes = [settings] + ([JOBS_NOTE] if s.args.jobs > 1 else [])
    s.write(pd.DataFrame(rows).reindex(columns=fields), {f: f for f in fields if f != "run_id"}, title,
            notes=notes, after=[ceiling])
