"""Robust aggregation under a forged update: FedAvg, median, trimmed mean and norm clipping, each
clean and with the last of the clients sending -scale * its delta under its valid identity.

Every row is a real FL run through the launcher (local processes on loopback, same seeds and
settings). Prints and writes results/bench/robust.{csv,md,json}: final test accuracy, its delta
to clean FedAvg and to the same strategy clean, and the accuracy of every round (docs/security.md).
A run whose test loss passes DIVERGED_LOSS is stopped there and reported with its last round: its
model is lost, and the next round could only end at the clients' idle timeout (every client's
delta from such a model is non-finite, so none is sent).

    python benchmarks/bench_robust.py                      # make bench-robust: 4 clients, 10 rounds
    python benchmarks/bench_robust.py --strategies fedavg median --rounds 5 --samples 500
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

STRATEGIES = ["fedavg", "median", "trimmed_mean", "norm_clip"]
DIVERGED_LOSS = 1e6  # mean test cross-entropy; an untrained 10-class model has about 2.3
COLUMNS = {"strategy": "strategy", "attack": "attacker", "status": "status", "test_accuracy": "final test accuracy (%)",
           "delta_vs_fedavg_pp": "vs clean FedAvg (pp)", "delta_vs_own_clean_pp": "vs same strategy clean (pp)",
           "min_accuracy": "lowest round accuracy (%)"}


def rounds(run_dir: Path) -> pd.DataFrame:
    """rounds.csv so far (the controller may be appending to it: an unreadable one is empty)."""
    try:
        return pd.read_csv(run_dir / "rounds.csv")
    except (FileNotFoundError, pd.errors.EmptyDataError, pd.errors.ParserError):
        return pd.DataFrame(columns=["test_loss"])


def fl_run(strategy: str, attacked: bool, a: argparse.Namespace, run_id: str) -> str:
    """Run one FL run; its status: ok, diverged (stopped) or the launcher's exit code."""
    cmd = [sys.executable, "-m", "commlab.fl.run", "--strategy", strategy, "--clients", str(a.clients),
           "--rounds", str(a.rounds), "--samples-per-round", str(a.samples), "--partition", a.partition,
           "--backend", "local", "--seed", str(a.seed), "--results-dir", str(a.results_dir), "--run-id", run_id]
    if attacked:
        cmd += ["--attack", "sign_flip", "--attack-scale", str(a.scale), "--attackers", "1"]
    with open(a.results_dir / f"{run_id}.log", "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            loss = pd.to_numeric(rounds(a.results_dir / run_id)["test_loss"], errors="coerce")
            if len(loss) and loss.iloc[-1] > DIVERGED_LOSS:
                proc.terminate()  # the launcher ends the nodes it started
                proc.wait()
                return f"diverged, stopped after round {len(loss)}"
            time.sleep(2)
    return "ok" if proc.returncode == 0 else f"exit {proc.returncode}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategies", nargs="*", default=STRATEGIES, choices=STRATEGIES)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--samples", type=int, default=1000, help="samples per client and round")
    p.add_argument("--partition", default="iid", choices=["iid", "dirichlet", "shards"])
    p.add_argument("--scale", type=float, default=10.0, help="the attacker sends -scale * delta")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results-dir", type=Path, default=Path("results"))
    a = p.parse_args()
    a.results_dir = a.results_dir.resolve()
    a.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    strategies = ["fedavg", *[s for s in a.strategies if s != "fedavg"]]  # clean FedAvg is the reference
    jobs = [(s, attacked) for s in strategies for attacked in (False, True)]
    rows, curves = [], {}
    with Progress(len(jobs), "run", in_place=False) as progress:
        for k, (strategy, attacked) in enumerate(jobs):
            run_id = f"bench-robust-{stamp}-{strategy}-{'attacked' if attacked else 'clean'}"
            status = fl_run(strategy, attacked, a, run_id)
            row = {"strategy": strategy, "attack": f"1 of {a.clients}, sign flip x{a.scale:g}" if attacked else "none",
                   "status": status, "run_id": run_id}
            acc = rounds(a.results_dir / run_id).get("test_accuracy", pd.Series(dtype=float))
            if len(acc):
                row.update(test_accuracy=float(acc.iloc[-1]), min_accuracy=float(acc.min()))
                curves[f"{strategy}, {'attacked' if attacked else 'clean'}"] = acc.tolist()
            rows.append(row)
            progress.update(k + 1, f"{strategy} {'attacked' if attacked else 'clean'} {row['status']}")
    table = pd.DataFrame(rows).reindex(columns=["strategy", "attack", "status", "test_accuracy", "min_accuracy",
                                                "run_id"])
    clean = table[table["attack"] == "none"].set_index("strategy")["test_accuracy"]
    table["delta_vs_fedavg_pp"] = 100 * (table["test_accuracy"] - clean.get("fedavg"))
    table["delta_vs_own_clean_pp"] = 100 * (table["test_accuracy"] - table["strategy"].map(clean))
    out = a.results_dir / "bench"
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "robust.csv", index=False)
    settings = (f"{a.clients} clients ({a.partition}), {a.rounds} rounds, {a.samples} samples/client/round, "
                f"mnist_cnn, seed {a.seed}; attacker client-{a.clients - 1} sends -{a.scale:g} x its delta")
    per_round = pd.DataFrame([[name, *(f"{100 * x:.2f}" for x in acc), *["-"] * (a.rounds - len(acc))]
                              for name, acc in curves.items()],
                             columns=["run", *range(1, a.rounds + 1)])
    shown = table.assign(test_accuracy=100 * table["test_accuracy"], min_accuracy=100 * table["min_accuracy"])
    text = (settings + "\n\n" + markdown_table(shown, COLUMNS) + "\n\nTest accuracy (%) per round:\n\n"
            + markdown_table(per_round, {c: str(c) for c in per_round.columns}) + "\n")
    (out / "robust.md").write_text(text)
    (out / "robust.json").write_text(json.dumps({"settings": settings, "stamp": stamp, "argv": sys.argv[1:]}, indent=2))
    print(text)
    return 0 if all(r["status"] == "ok" or r["status"].startswith("diverged") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
