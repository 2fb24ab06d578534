"""Where compression pays off: FL round and DDP step time and bytes against the link rate.

    python benchmarks/bench_crossover.py [--rates lan,1gbit,100mbit,10mbit,1mbit] [--quick]

One short run per mode, case and rate, one after another, with the same model and data: FL rounds
(2 clients; `commlab.fl.run`) with fp32 and each compressor (bench_matrix.compressors), DDP steps (`commlab.ddp.run`)
with dense and each compressor at its default, and torch DDP over gloo with hooks none, fp16 and
powersgd (`commlab.peers.run`). Rates: `lan` is loopback; every other rate is a profile of that rate
on every node's uplink, in network namespaces (root; without root they run unshaped and the table
says so). Per row: the FL round time (mean over rounds) or DDP step time (median over steps >= --skip),
the bytes a client uploads per round or a rank sends per step, and both as x of the reference (fp32,
dense) at the same rate. Below the table, per compressor, the fastest rate at which it beat the
reference there and at every slower rate: the rate below which it pays off. `--quick`: loopback
and 10mbit, three cases a mode.
Writes results/bench/crossover[-quick].{csv,md}.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pandas as pd

from commlab.bench import BenchParser, BenchRun
from commlab.links.profiles import check_profile
from commlab.links.spec import LinkSpec
from commlab.report.runs import RunError, load_run

import bench_peers
from bench_matrix import compressors

GLOO = ("gloo-none", "gloo-fp16", "gloo-powersgd")
REFERENCE = {"fl": "fp32", "ddp": "dense"}
QUICK = {"rates": "lan,10mbit", "fl_cases": "fp32,int8_sparse,signsgd", "ddp_cases": "dense,int8,gloo-none",
         "rounds": 1, "epochs": 1, "train_subset": 640, "test_subset": 200}


def rate_bps(rate: str) -> float:
    return float("inf") if rate == "lan" else LinkSpec(rate).rate_bps


def fl_command(case: str, rate: str, a: argparse.Namespace, run_id: str) -> list[str]:
    return [sys.executable, "-m", "commlab.fl.run", "--codec", case, "--clients", "2", "--rounds", str(a.rounds),
            "--samples-per-round", str(a.samples), "--train-subset", str(a.train_subset), "--test-subset",
            str(a.test_subset or 2000), "--profile", rate, "--backend", "local", "--seed", str(a.seed),
            "--results-dir", str(a.results_dir), "--run-id", run_id]


def fl_measure(run_dir: Path) -> dict:
    run = load_run(run_dir)
    rounds = run.tables["rounds"]
    return {"time_s": round(float(rounds["round_time_s"].mean()), 4),
            "bytes": round(float(rounds["bytes_up"].mean()) / 2)}  # per client: two clients upload


def ddp_command(case: str, rate: str, a: argparse.Namespace, run_id: str) -> list[str]:
    peer_case = case if case.startswith("gloo-") else f"dds-{case}"
    return bench_peers.command(peer_case, argparse.Namespace(**{**bench_peers.WORKLOAD, **vars(a), "profile": rate}),
                               run_id)


def ddp_measure(run_dir: Path, a: argparse.Namespace) -> dict:
    m = bench_peers.measure("", a, run_dir)
    return {"time_s": m["step_time_s"], "bytes": m["bytes_sent_per_rank_step_after_warmup"]}


def payoff(rows: list[dict], mode: str) -> dict[str, str | None]:
    """Per case of `mode`: the fastest rate R at which it took less time than the reference, at R and
    at every slower rate measured (None: not even at the slowest)."""
    out: dict[str, str | None] = {}
    for case in dict.fromkeys(r["case"] for r in rows if r["mode"] == mode and r["case"] != REFERENCE[mode]):
        measured = sorted((r for r in rows if r["mode"] == mode and r["case"] == case
                           and r.get("time_x_of_reference") is not None), key=lambda r: rate_bps(r["rate"]))
        out[case] = None
        for r in measured:
            if r["time_x_of_reference"] >= 1:
                break
            out[case] = r["rate"]
    return out


def payoff_lines(rows: list[dict]) -> list[str]:
    """Below the table: per mode and case, the rate below which it pays off; fills the rows' column."""
    lines = []
    for mode in REFERENCE:
        for case, rate in payoff(rows, mode).items():
            for r in rows:
                if r["mode"] == mode and r["case"] == case:
                    r["pays_off_at_or_below"] = rate or "none measured"
            lines.append(f"{mode} {case}: " + (f"pays off at {rate} and below" if rate
                                               else "does not pay off at the slowest rate measured"))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "crossover", QUICK, seeds=0)
    p.add_argument("--rates", default="lan,1gbit,100mbit,10mbit,1mbit", help="link profiles, comma-separated")
    every = [c for c in compressors() if c != "fp32"]
    p.add_argument("--fl-cases", default=",".join(["fp32", *every]), help="codecs (default: fp32 and every compressor)")
    p.add_argument("--ddp-cases", default=",".join(["dense", *every, *GLOO]),
                   help="methods and gloo-<hook> (default: dense, every compressor, gloo none/fp16/powersgd)")
    p.add_argument("--rounds", type=int, default=2, help="FL rounds a run")
    p.add_argument("--samples", type=int, default=1000, help="FL samples a client trains a round")
    p.add_argument("--world", type=int, default=2, help="DDP ranks")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--train-subset", type=int, default=2000)
    p.add_argument("--test-subset", type=int, default=None)
    p.add_argument("--skip", type=int, default=4, help="DDP steps left out of times and bytes (warm-ups)")
    p.add_argument("--start-iter", type=int, default=2, help="dense steps before PowerSGD, DDS and gloo alike")
    a = p.parse_args(argv)
    rates = [check_profile(r) for r in a.rates.split(",")]
    plan = [(mode, case, rate) for mode, cases in (("fl", a.fl_cases), ("ddp", a.ddp_cases))
            for case in cases.split(",") if case for rate in rates]
    shaped = os.geteuid() == 0
    rows: list[dict] = []
    with BenchRun(a, len(plan)) as s:
        for mode, case, rate in plan:
            run_id = f"bench-crossover-{mode}-{case}-{rate}-{os.getpid()}"
            command = fl_command if mode == "fl" else ddp_command
            outcome = s.run(command(case, rate, a, run_id), run_id)
            row = {"mode": mode, "case": case, "rate": rate, "status": outcome.status, "run_id": run_id}
            try:
                run_dir = a.results_dir / run_id
                row.update(fl_measure(run_dir) if mode == "fl" else ddp_measure(run_dir, a))
            except (RunError, OSError, KeyError, IndexError) as e:
                row["status"] += f"; no tables ({type(e).__name__})"
            rows.append(row)
            s.step(f"{mode} {case} at {rate}: {row['status']}")
        for r in rows:
            ref = next((x for x in rows if x["mode"] == r["mode"] and x["rate"] == r["rate"]
                        and x["case"] == REFERENCE[r["mode"]] and "time_s" in x), None)
            if ref and "time_s" in r:
                r["time_x_of_reference"] = round(r["time_s"] / ref["time_s"], 3)
                r["bytes_x_of_reference"] = round(r["bytes"] / ref["bytes"], 4) if ref["bytes"] else None
        after = payoff_lines(rows)
        columns = ["mode", "case", "rate", "time_s", "bytes", "time_x_of_reference", "bytes_x_of_reference",
                   "pays_off_at_or_below", "status", "run_id"]
        s.write(pd.DataFrame(rows).reindex(columns=columns), {c: c for c in columns if c != "run_id"},
                "FL round and DDP step time and bytes against the link rate",
                notes=[f"FL: 2 clients, {a.rounds} round(s) of {a.samples} samples, mean round time, bytes a client "
                       f"uploads a round; DDP: world {a.world}, {a.epochs} epoch(s) of {a.train_subset} samples, "
                       f"median step time and bytes a rank sends a step over steps >= {a.skip}; x of fp32 (FL) or "
                       f"dense (DDP) at the same rate; lan is loopback"
                       + ("" if shaped else "; NOT root: every rate ran unshaped on loopback")],
                after=after)
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
