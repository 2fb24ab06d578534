"""Robust aggregation under a forged update: every rule (FedAvg, median, trimmed mean, norm
clipping, Krum, Multi-Krum, FLTrust), clean and with the last client sending -scale * its delta
under its valid identity; by default with 3 and 10 non-IID (Dirichlet 0.5) clients and a x100
flip, on request also 4 IID clients with a x10 flip (`--settings iid4`).

Every row is a real FL run through the launcher (local processes on loopback, same seeds and
settings). Prints and writes results/bench/robust.{csv,md,json}: final test accuracy, its delta
to clean FedAvg and to the same rule clean, each run's wall time, and the accuracy of every round
(docs/security.md), headed by the command, commit, date, machine and wall time. A run whose test loss
passes DIVERGED_LOSS is ended there and reported with its last round: its model is lost, and the
next round could only end at the clients' idle timeout (every client's delta from such a model is
non-finite, so none is sent).

    python benchmarks/bench_robust.py                      # make bench-robust: 8 rounds, 20,000 training samples
    python benchmarks/bench_robust.py --settings iid4 dirichlet3 dirichlet10 --rounds 20 --samples 1000 --train-subset 0
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from commlab.bench import BenchParser, BenchRun
from commlab.report.markdown import table as markdown_table
from commlab.report.runs import try_load_run

# Mean test cross-entropy; an untrained 10-class model has about 2.3. A -100x flip takes FedAvg to
# thousands in one round, and the honest deltas from that model are already non-finite.
DIVERGED_LOSS = 1e3
# Round deadline (s): honest rounds here take well under it; a round left with only the forged
# update (the honest ones were non-finite and rejected) closes here, not at the launcher's 300 s.
ROUND_DEADLINE_S = 120
TARGET_PP = 5.0      # a robust rule under attack should end within this of clean FedAvg
COLUMNS = {"setting": "setting", "rule": "rule", "attack": "attacker", "status": "status",
           "test_accuracy": "final test accuracy (%)", "delta_vs_fedavg_pp": "vs clean FedAvg (pp)",
           "delta_vs_own_clean_pp": "vs same rule clean (pp)", "min_accuracy": "lowest round accuracy (%)",
           "wall_s": "wall time (s)"}


@dataclass(frozen=True)
class Setting:
    """Clients, their split, how hard the last one's flipped update pulls, and the samples each
    client trains on per round (fewer with more clients: a round costs about the same)."""
    clients: int
    partition: str
    scale: float
    samples: int

    def label(self) -> str:
        return f"{self.clients} clients {self.partition}, {self.samples} samples/round, x{self.scale:g} flip"


SETTINGS = {"iid4": Setting(4, "iid", 10.0, 500), "dirichlet3": Setting(3, "dirichlet", 100.0, 500),
            "dirichlet10": Setting(10, "dirichlet", 100.0, 200)}
DEFAULT_SETTINGS = ["dirichlet3", "dirichlet10"]
RULES = ["fedavg", "median", "trimmed_mean", "norm_clip", "krum", "multi_krum", "fltrust"]


def rule_args(rule: str, clients: int, a: argparse.Namespace) -> list[str]:
    """Launcher flags of a rule with `clients` clients, one of them an attacker (f = 1)."""
    if rule == "trimmed_mean":  # cut at least the one attacker per side: 3 clients need 1/3, not 0.25
        return ["--strategy", "trimmed_mean", "--trim-fraction", f"{max(0.25, 1.01 / clients):.4f}"]
    if rule == "krum":
        return ["--strategy", "krum", "--num-malicious", "1"]
    if rule == "multi_krum":  # all but f of the updates
        return ["--strategy", "krum", "--num-malicious", "1", "--keep", str(clients - 1)]
    if rule == "fltrust":
        return ["--strategy", "fltrust", "--root-samples", str(a.root_samples)]
    return ["--strategy", rule]


def rounds(run_dir: Path) -> pd.DataFrame:
    """The rounds so far (the controller may be appending to them); none before the first."""
    run = try_load_run(run_dir, growing=True)
    return pd.DataFrame(columns=["test_loss", "test_accuracy"]) if run is None else run.tables["rounds"]


def diverged(run_dir: Path) -> str | None:
    loss = rounds(run_dir)["test_loss"]
    if len(loss) and not loss.iloc[-1] <= DIVERGED_LOSS:  # NaN too
        return f"diverged, stopped after round {len(loss)}"
    return None


def fl_run(s: BenchRun, setting: Setting, rule: str, attacked: bool, a: argparse.Namespace, run_id: str) -> str:
    """Run one FL run; its status: ok, diverged (stopped: the launcher ends its nodes) or the
    launcher's exit code."""
    cmd = [sys.executable, "-m", "commlab.fl.run", *rule_args(rule, setting.clients, a),
           "--clients", str(setting.clients), "--partition", setting.partition, "--rounds", str(a.rounds),
           "--samples-per-round", str(setting.samples), "--test-subset", str(a.test_subset), "--backend", "local",
           "--deadline", str(ROUND_DEADLINE_S), "--seed", str(a.seed), "--results-dir", str(a.results_dir),
           "--run-id", run_id]
    if a.train_subset:
        cmd += ["--train-subset", str(a.train_subset)]
    if attacked:
        cmd += ["--attack", "sign_flip", "--attack-scale", str(setting.scale), "--attackers", "1"]
    return s.run(cmd, run_id, stop=lambda: diverged(a.results_dir / run_id)).status


def run_all(s: BenchRun, a: argparse.Namespace, stamp: str) -> tuple[pd.DataFrame, dict[str, list[float]]]:
    """Every (setting, rule, clean/attacked) run; the rows and each run's accuracy per round."""
    settings = {name: replace(SETTINGS[name], samples=a.samples or SETTINGS[name].samples) for name in a.settings}
    rows, curves = [], {}
    for name, rule, attacked in jobs(a):
        setting, kind = settings[name], "attacked" if attacked else "clean"
        run_id = f"bench-robust-{stamp}-{name}-{rule}-{kind}"
        started = time.monotonic()
        status = fl_run(s, setting, rule, attacked, a, run_id)
        row = {"setting": setting.label(), "rule": rule, "status": status, "run_id": run_id,
               "attack": f"1 of {setting.clients}, sign flip x{setting.scale:g}" if attacked else "none",
               "wall_s": round(time.monotonic() - started)}
        acc = rounds(a.results_dir / run_id)["test_accuracy"]
        if len(acc):
            row.update(test_accuracy=float(acc.iloc[-1]), min_accuracy=float(acc.min()))
            curves[f"{name}, {rule}, {kind}"] = acc.tolist()
        rows.append(row)
        s.step(f"{name} {rule} {kind} {status}")
    return pd.DataFrame(rows).reindex(columns=[*COLUMNS, "run_id"]), curves


def jobs(a: argparse.Namespace) -> list[tuple[str, str, bool]]:
    """(setting, rule, attacked) of every run; clean FedAvg first, each setting's reference."""
    rules = ["fedavg", *[r for r in a.rules if r != "fedavg"]]
    return [(name, rule, attacked) for name in a.settings for rule in rules for attacked in (False, True)]


def with_deltas(table: pd.DataFrame) -> pd.DataFrame:
    """The pp columns: each run against clean FedAvg and against the same rule clean, per setting."""
    clean = table[table["attack"] == "none"].set_index(["setting", "rule"])["test_accuracy"]
    own = [clean.get((s, r)) for s, r in zip(table["setting"], table["rule"])]
    fedavg = [clean.get((s, "fedavg")) for s in table["setting"]]
    return table.assign(delta_vs_fedavg_pp=100 * (table["test_accuracy"] - pd.to_numeric(pd.Series(fedavg))),
                        delta_vs_own_clean_pp=100 * (table["test_accuracy"] - pd.to_numeric(pd.Series(own))))


def verdicts(table: pd.DataFrame) -> list[str]:
    """Per setting: the robust rule that ended highest under attack, against the target."""
    lines = []
    for setting, rows in table.groupby("setting", sort=False):
        attacked = rows[(rows["attack"] != "none") & (rows["rule"] != "fedavg")].dropna(subset=["test_accuracy"])
        if attacked.empty:
            continue
        best = attacked.loc[attacked["test_accuracy"].idxmax()]
        gap = -float(best["delta_vs_fedavg_pp"])
        outcome = "within the target" if gap <= TARGET_PP else f"misses it by {gap - TARGET_PP:.2f} pp"
        lines.append(f"- {setting}: best under attack {best['rule']}, {100 * best['test_accuracy']:.2f} %, "
                     f"{abs(gap):.2f} pp {'below' if gap >= 0 else 'above'} clean FedAvg "
                     f"({outcome} of {TARGET_PP:g} pp)")
    return lines


def report(s: BenchRun, table: pd.DataFrame, curves: dict[str, list[float]], a: argparse.Namespace) -> None:
    settings = (f"{a.rounds} rounds, mnist_cnn, "
                f"{f'train subset {a.train_subset}' if a.train_subset else 'full training set'}, "
                f"test subset {a.test_subset}, seed {a.seed}, Dirichlet alpha 0.5; the attacker is the last client; "
                f"trimmed mean cuts at least one value per side; Krum and Multi-Krum assume f = 1 and Multi-Krum "
                f"keeps n - 1; FLTrust's server holds a clean root set of {a.root_samples} training samples")
    per_round = pd.DataFrame([[name, *(f"{100 * x:.2f}" for x in acc), *["-"] * (a.rounds - len(acc))]
                              for name, acc in curves.items()], columns=["run", *range(1, a.rounds + 1)])
    shown = table.assign(test_accuracy=100 * table["test_accuracy"], min_accuracy=100 * table["min_accuracy"])
    s.write(table, COLUMNS, "Robust aggregation under a forged update", notes=[settings], shown=shown,
            after=["\n".join(verdicts(table)), "Test accuracy (%) per round:",
                   markdown_table(per_round, {c: str(c) for c in per_round.columns})])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = BenchParser(__doc__, "robust", {"settings": ["dirichlet3"], "rules": ["fedavg", "median"], "rounds": 2,
                                        "train_subset": 4000, "test_subset": 500}, seeds=0)
    p.add_argument("--settings", nargs="*", default=DEFAULT_SETTINGS, choices=list(SETTINGS))
    p.add_argument("--rules", nargs="*", default=RULES, choices=RULES)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--samples", type=int, help="samples per client and round (default: the setting's, "
                   f"{', '.join(f'{k} {v.samples}' for k, v in SETTINGS.items())})")
    p.add_data_subsets(train=20000, test=2000)
    p.add_argument("--root-samples", type=int, default=100, help="fltrust: the server's clean root set")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with BenchRun(a, len(jobs(a))) as s:
        table, curves = run_all(s, a, stamp)
        table = with_deltas(table)
        report(s, table, curves, a)
        s.path(".json").write_text(json.dumps({"stamp": stamp, "argv": a.argv, "curves": curves,
                                               "bench_wall_s": round(s.wall_s)}, indent=2))
    return 0 if all(s == "ok" or s.startswith("diverged") for s in table["status"]) else 1


if __name__ == "__main__":
    sys.exit(main())
