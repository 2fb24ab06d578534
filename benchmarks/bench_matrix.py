"""Compressor matrix: every registered compressor in FL and in DDP, measured in one go on the same
seeds, data and settings, against fp32 (FL) and dense (DDP) from the same run of this benchmark.

For each compressor x mode it prints and writes (results/bench/matrix.csv, matrix.md):
  bytes a node sends per round (FL, per client) or per step and peer (DDP, after DGC's warm-up),
  as a share of the fp32 / dense payload; test accuracy and its delta to fp32 / dense at equal
  rounds / steps; communication time per round / step.
Beside them, per mode, the centralized peer (one process on the union of the nodes' data, the same
sample budget: commlab.peers.run --kind centralized), the accuracy ceiling, with no bytes.
With several seeds (--seeds 0 1 2) every compressor and its reference run once per seed: the delta
is the median of the per-seed deltas (each against the reference of the same seed), with their
min and max; accuracy is the median, bytes and comm time the mean. The per-run rows go to
<name>-runs.csv, which --update merges with.
The runs are the cells of a sweep (docs/sweeps.md) this writes to <name>-sweep.json beside the
tables and runs into results/sweeps/<name>: a stopped matrix continues with --resume, and
`python -m commlab.sweep results/bench/matrix-sweep.json --report-only` draws its figures.

    python benchmarks/bench_matrix.py                       # short runs (make bench-matrix)
    python benchmarks/bench_matrix.py --only dgc --modes ddp --seeds 0 1 2 --name matrix-seeds [settings]
    python benchmarks/bench_matrix.py --only int8 dgc --modes ddp --ddp-epochs 2 --ddp-train-subset 20000
    python benchmarks/bench_matrix.py --update --only minmax2 [same settings]   # re-run rows of the last matrix
    python benchmarks/bench_matrix.py --dataset fashion_mnist --seeds 0 1 2 --name matrix-fashion_mnist
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from bench_ddp import summarise as summarise_ddp
from bench_peers_common import centralized_fl_argv
from commlab.bench import BenchParser, BenchRun
from commlab.codecs import names
from commlab.models import build_model, num_params
from commlab.report.runs import load_run
from commlab.sweep.benchmark import add_sweep_options, run_sweep, write_spec

COLUMNS = {"mode": "mode", "compressor": "compressor", "status": "status",
           "bytes_per_node": "bytes per node per round (FL, incl. warm-up) / step and peer (DDP, after warm-up)",
           "bytes_x_of_fp32": "x of fp32",
           "test_accuracy": "test accuracy", "accuracy_delta_pp": "delta (pp)", "comm_time_s": "comm time (s)"}
SEED_COLUMNS = {"seeds": "seeds", "delta_min_pp": "delta min (pp)", "delta_max_pp": "delta max (pp)"}
MEASURED = ["bytes_per_node", "comm_time_s", "test_accuracy"]
CENTRALIZED = "centralized"  # the peer's row: no compressor, no link
# The settings every row of one matrix must share (--update checks them against the last matrix's).
SETTINGS = ("dataset", "clients", "fl_rounds", "fl_samples", "world", "ddp_epochs", "ddp_train_subset", "dgc_warmup")

# One concrete name per registered family: "minmax<bits>" -> minmax2/4/8 and so on.
FAMILIES = {"minmax": ["minmax2", "minmax4", "minmax8"], "qsgd": ["qsgd4", "qsgd16"], "powersgd": ["powersgd2"]}


def compressors() -> list[str]:
    out = []
    for n in names():
        base = n.split("<")[0]
        out += FAMILIES.get(base, [base])
    return out


def cell(mode: str, name: str, a: argparse.Namespace) -> dict:
    """The sweep cell of one row: FL or DDP with compressor ``name`` (fp32: dense DDP), or the
    centralized peer at that mode's budget (the seed is the sweep's)."""
    if name == CENTRALIZED:
        budget = (centralized_fl_argv(a.clients, a.fl_rounds, a.fl_samples)[5:] if mode == "fl" else
                  ["--world", str(a.world), "--epochs", str(a.ddp_epochs), "--train-subset", str(a.ddp_train_subset)])
        return {"launcher": "centralized", **{k.removeprefix("--"): v for k, v in zip(budget[::2], budget[1::2])},
                "profile": "lan", "dataset": a.dataset}
    if mode == "fl":
        return {"launcher": "fl", "codec": name, "clients": a.clients, "rounds": a.fl_rounds,
                "samples-per-round": a.fl_samples, "dataset": a.dataset}
    return {"launcher": "ddp", "method": "dense" if name == "fp32" else name, "world": a.world,
            "epochs": a.ddp_epochs, "train-subset": a.ddp_train_subset, "warmup": a.dgc_warmup,
            "dataset": a.dataset}


def summarise(mode: str, name: str, run_dir: Path, world: int) -> dict:
    if name == CENTRALIZED:
        return {"bytes_per_node": 0.0, "comm_time_s": 0.0, "test_accuracy": load_run(run_dir).final_accuracy}
    if mode == "fl":
        run = load_run(run_dir)
        rounds = run.tables["rounds"]
        return {"bytes_per_node": float((rounds["bytes_up"] / rounds["n_participants"]).mean()),
                "comm_time_s": float(run.tables["clients"]["comm_time_s"].mean()),
                "test_accuracy": run.final_accuracy}
    s = summarise_ddp(run_dir)
    return {"bytes_per_node": s["bytes_sent_per_step_after_warmup"] / max(world - 1, 1), "comm_time_s": s["comm_wait_ms"] / 1000,
            "test_accuracy": s["test_accuracy"]}


def combine(runs: pd.DataFrame, payload: int) -> pd.DataFrame:
    """One row per mode and compressor from the per-seed runs: the accuracy delta of each seed
    against the fp32/dense run of the same seed (paired, so the seed's own luck cancels), then the
    median and range over seeds; bytes and comm time averaged, accuracy the median."""
    runs = runs.copy()
    ref = runs[runs["compressor"] == "fp32"].set_index(["mode", "seed"])
    key = pd.MultiIndex.from_frame(runs[["mode", "seed"]])
    runs["ref_bytes"] = ref["bytes_per_node"].reindex(key).to_numpy()
    runs["delta_pp"] = 100 * (runs["test_accuracy"] - ref["test_accuracy"].reindex(key).to_numpy())
    rows = []
    for (mode, name), g in runs.groupby(["mode", "compressor"], sort=False):
        ok = g[g["status"] == "ok"]
        failed = g[g["status"] != "ok"]
        row = {"mode": mode, "compressor": name, "run_id": ";".join(g["run_id"]),
               "status": "ok" if failed.empty else ";".join(failed["status"]), "seeds": len(ok)}
        if not ok.empty:
            row.update({"bytes_per_node": ok["bytes_per_node"].mean(), "comm_time_s": ok["comm_time_s"].mean(),
                        "test_accuracy": ok["test_accuracy"].median(),
                        "bytes_x_of_fp32": ok["bytes_per_node"].mean() / ok["ref_bytes"].mean(),
                        "payload_share": ok["bytes_per_node"].mean() / payload,
                        "accuracy_delta_pp": ok["delta_pp"].median(),
                        "delta_min_pp": ok["delta_pp"].min(), "delta_max_pp": ok["delta_pp"].max()})
        rows.append(row)
    order = {name: k for k, name in reversed(list(enumerate(["fp32", *compressors(), CENTRALIZED])))}  # first wins
    table = pd.DataFrame(rows)
    return table.sort_values(["mode", "compressor"], key=lambda c: c.map(order) if c.name == "compressor"
                             else c.map({"fl": 0, "ddp": 1}), ignore_index=True)


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "matrix", {"only": ["int8", "dgc"], "fl_rounds": 1, "fl_samples": 500,
                                        "ddp_train_subset": 1920}, seeds=[0])
    p.add_argument("--only", nargs="*", help="compressors to run (default: every registered one); fp32 and the "
                   "centralized peer always run")
    p.add_argument("--dataset", default="mnist", help="an image dataset of MNIST's shape (mnist_cnn reads it): "
                   "mnist, fashion_mnist, synthetic:mnist")
    p.add_argument("--modes", nargs="*", default=["fl", "ddp"], choices=["fl", "ddp"])
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--fl-rounds", type=int, default=3)
    p.add_argument("--fl-samples", type=int, default=2000, help="samples per client and round")
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--ddp-epochs", type=int, default=1)
    p.add_argument("--ddp-train-subset", type=int, default=6000)
    p.add_argument("--dgc-warmup", type=float, default=0.25, help="DGC warm-up in epochs")
    add_sweep_options(p)
    p.add_argument("--update", action="store_true", help="re-run only these compressors (and --seeds) of the last "
                   "matrix of --name, with its settings; its fp32/dense runs stay the reference unless named")
    a = p.parse_args(argv)
    settings_now = {k: getattr(a, k) for k in SETTINGS}
    previous = None
    if a.update:
        runs_csv, meta = (a.tables.with_name(a.tables.name + suffix) for suffix in ("-runs.csv", ".json"))
        if not runs_csv.exists():
            p.error(f"--update needs {runs_csv} (the per-run rows of a matrix run with --name {a.name})")
        last = {"dataset": "mnist", **json.loads(meta.read_text())["argv"]}  # matrices before --dataset: MNIST
        if last != settings_now:
            p.error(f"--update needs the settings of the last matrix: {last}")
        previous = pd.read_csv(runs_csv)
    # fp32/dense is every row's reference and centralized its ceiling: always run, except by --update,
    # which re-runs them only when named.
    chosen = ([] if previous is not None else ["fp32"]) \
        + [n for n in (a.only or compressors()) if n not in ("fp32", CENTRALIZED) or previous is not None] \
        + ([] if previous is not None else [CENTRALIZED])
    payload = 4 * num_params(build_model("mnist_cnn"))
    jobs = [(mode, name) for mode in a.modes for name in chosen]
    spec = {"name": a.tables.name, "cells": [cell(*job, a) for job in jobs], "seeds": a.seeds}
    if a.write_sweep:
        write_spec(spec, a.write_sweep)
        return 0
    rows = []
    with BenchRun(a, len(jobs) * len(a.seeds), unit="cell") as s:
        for result in run_sweep(spec, a, s):
            mode, name = jobs[result.entry]
            row = {"mode": mode, "compressor": name, "seed": result.seed, "run_id": result.cell.run_id,
                   "status": result.record["status"]}
            if result.ok:
                row.update(summarise(mode, name, result.run_dir, a.world))
            rows.append(row)
        runs = pd.DataFrame(rows).reindex(columns=["mode", "compressor", "seed", "run_id", "status", *MEASURED])
        if previous is not None:  # the runs made now replace their earlier ones (same row and seed); the rest stay
            key = ["mode", "compressor", "seed"]
            redone = previous.set_index(key).index.isin(runs.set_index(key).index)
            runs = pd.concat([previous[~redone], runs], ignore_index=True)
        runs.to_csv(s.path("-runs.csv"), index=False)
        table = combine(runs, payload)
        settings = {"fl": f"FL: {a.clients} clients, {a.fl_rounds} rounds, {a.fl_samples} samples/client/round",
                    "ddp": f"DDP: WORLD={a.world}, {a.ddp_epochs} epoch(s), {a.ddp_train_subset} training samples, "
                           f"DGC warm-up {a.dgc_warmup} epochs"}
        all_seeds = sorted(int(x) for x in runs["seed"].unique())
        seeds = [f"seeds {', '.join(map(str, all_seeds))}: delta = median of the per-seed deltas"] if len(all_seeds) > 1 else []
        s.write(table, {**COLUMNS, **(SEED_COLUMNS if len(all_seeds) > 1 else {})},
                f"Every compressor in FL and DDP against fp32 / dense on {a.dataset}",
                notes=["\n".join(settings[m] for m in ("fl", "ddp") if (table["mode"] == m).any()), *seeds])
        s.path(".json").write_text(json.dumps({"settings": settings, "sweep": str(s.path("-sweep.json")), "argv": settings_now},
                                              indent=2))
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
