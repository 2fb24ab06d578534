"""Where compression pays off: FL round and DDP step time and bytes against the link rate.

    python benchmarks/bench_crossover.py [--rates lan,1gbit,100mbit,10mbit,1mbit] [--quick]

One short run per mode, case and rate, one after another, with the same model and data: FL rounds
(2 clients) with DDS fp32, each compressor at its default and Flower FedAvg (bench_peers_fl's runs),
DDP steps with DDS dense, each compressor at its default and torch DDP over gloo with hooks none, fp16
and powersgd (bench_peers' runs). Rates: `lan` is loopback; every other rate is a profile of that rate
on every node's uplink, in network namespaces (root; without root they run unshaped and the table
says so). Below --slow-below a dense exchange takes tens of seconds, so runs there are shorter: FL
--slow-rounds rounds, DDP --slow-train-subset samples with --slow-skip warm-up steps. From --fast-from
up a step or round takes milliseconds and one run's median needs more of them (a loaded 2-core machine
moves single steps by tens of percent): FL --fast-rounds rounds of --fast-samples samples a client (a
shorter local training, so that the time a compressor saves on the wire is not lost in the training
time's noise), DDP --fast-train-subset samples; and every case runs --fast-repeats times, the cases of
a rate interleaved (a b, b a, a b: the machine's load drifts between runs), each row the median of its
runs. The
--loss-cases also run at --loss-rate (a rate with a share of packets lost), beside their lossless rows.
Per row: the FL round time (median over rounds) or DDP step time (median over steps after the warm-up),
the bytes a client uploads per round or a rank sends per step, and both as x of the reference (DDS
fp32, dense) at the same rate. Below the table, per case, the fastest rate at which it beat the
reference there and at every slower rate: the rate below which it pays off; beside it a figure of
the times against the rate. `--quick`: loopback and 10mbit, three cases a mode.
Writes results/bench/crossover[-quick].{csv,md,svg} (the figure as SVG: text, reproducible, diffable).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from commlab.bench import BenchParser, BenchRun
from commlab.codecs import names
from commlab.links.profiles import check_profile, link_for, split_loss
from commlab.report.runs import RunError

import bench_peers
import bench_peers_fl

GLOO = ("gloo-none", "gloo-fp16", "gloo-powersgd")
FLOWER = "flower"
REFERENCE = {"fl": "fp32", "ddp": "dense"}
QUICK = {"rates": "lan,10mbit", "fl_cases": "fp32,int8_sparse,flower", "ddp_cases": "dense,int8,gloo-none",
         "loss_cases": "", "rounds": 1}


def defaults() -> list[str]:
    """Every registered compressor once, at its default parameters ("minmax<bits>" -> "minmax")."""
    return [n.split("<")[0] for n in names() if n != "fp32"]


def rate_bps(rate: str) -> float:
    return float("inf") if rate == "lan" else link_for(rate, "controller").rate_bps


def slow(rate: str, a: argparse.Namespace) -> bool:
    return rate_bps(rate) < rate_bps(a.slow_below)


def fast(rate: str, a: argparse.Namespace) -> bool:
    return rate_bps(rate) >= rate_bps(a.fast_from)


def at_rate(rate: str, a: argparse.Namespace) -> argparse.Namespace:
    """The run settings at `rate`: the shorter ones below --slow-below, the longer ones from --fast-from."""
    tier = {}
    if slow(rate, a):
        tier = {"rounds": a.slow_rounds, "ddp_train_subset": a.slow_train_subset, "skip": a.slow_skip}
    elif fast(rate, a):
        tier = {"rounds": a.fast_rounds, "samples": a.fast_samples, "ddp_train_subset": a.fast_train_subset}
    return argparse.Namespace(**{**vars(a), **tier, "profile": rate})


def fl_case(case: str) -> str:
    return case if case == FLOWER else f"dds-{case}"


def ddp_case(case: str) -> str:
    return case if case.startswith("gloo-") else f"dds-{case}"


def fl_command(case: str, a: argparse.Namespace, run_id: str) -> list[str]:
    fl = argparse.Namespace(**{**vars(a), "samples_per_round": a.samples})
    return bench_peers_fl.command(fl_case(case), fl, run_id)


def bytes_source(mode: str, case: str, rate: str) -> str:
    """Where a row's bytes come from: DDS counts its own (DDP; FL on loopback), FL in namespaces
    reads the controller's interface, gloo and Flower read kernel counters, on loopback the shared
    lo's (an upper bound: every process on the machine adds to them)."""
    if mode == "fl" and rate != "lan":
        return "controller iface"
    if case == FLOWER or case.startswith("gloo-"):
        return "lo counters" if rate == "lan" else "rank iface"
    return "DDS CommStats"


def fl_measure(case: str, a: argparse.Namespace, run_dir: Path) -> dict:
    m = bench_peers_fl.measure(fl_case(case), a, run_dir)
    return {"time_s": m["round_time_s"], "bytes": m["bytes_up_per_client_round_incl_warmup"],
            "bytes_from": bytes_source("fl", case, a.profile)}


def ddp_command(case: str, a: argparse.Namespace, run_id: str) -> list[str]:
    ddp = {**bench_peers.WORKLOAD, **vars(a), "train_subset": a.ddp_train_subset}
    return bench_peers.command(ddp_case(case), argparse.Namespace(**ddp), run_id)


def ddp_measure(case: str, a: argparse.Namespace, run_dir: Path) -> dict:
    m = bench_peers.measure(ddp_case(case), a, run_dir)
    return {"time_s": m["step_time_s"], "bytes": m["bytes_sent_per_rank_step_after_warmup"],
            "bytes_from": bytes_source("ddp", case, a.profile)}


def payoff(rows: list[dict], mode: str) -> dict[str, str | None]:
    """Per case of `mode`: the fastest rate R at which it took less time than the reference, at R and
    at every slower rate measured (None: not even at the slowest). Lossy rates stand apart."""
    ladder = [r for r in rows if r["mode"] == mode and split_loss(r["rate"])[1] is None]
    out: dict[str, str | None] = {}
    for case in dict.fromkeys(r["case"] for r in ladder if r["case"] != REFERENCE[mode]):
        measured = sorted((r for r in ladder if r["case"] == case and r.get("time_x_of_reference") is not None),
                          key=lambda r: rate_bps(r["rate"]))
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
            lines.append(f"- {mode} {case}: " + (f"pays off at {rate} and below" if rate
                                                 else "does not pay off at the slowest rate measured"))
    return lines


def figure(rows: list[dict]) -> Figure:
    """Per mode, each case's time against the link rate (loopback drawn right of the fastest shaped rate)."""
    ladder = [r for r in rows if split_loss(r["rate"])[1] is None and r.get("time_s") is not None]
    lan_x = 10 * max([rate_bps(r["rate"]) for r in ladder if r["rate"] != "lan"] or [1e9])

    def x(rate: str) -> float:
        return lan_x if rate == "lan" else rate_bps(rate)

    fig = Figure(figsize=(12, 5.5), layout="constrained")
    for ax, mode in zip(fig.subplots(1, 2), REFERENCE):
        for case in dict.fromkeys(r["case"] for r in ladder if r["mode"] == mode):
            points = sorted((x(r["rate"]), r["time_s"]) for r in ladder if r["mode"] == mode and r["case"] == case)
            reference = case == REFERENCE[mode]
            peer = case == FLOWER or case.startswith("gloo-")
            ax.plot(*zip(*points), marker="o", linewidth=2.5 if reference else 1, color="black" if reference else None,
                    linestyle="--" if peer else "-", label=case)
        ticks = {x(r["rate"]): r["rate"] for r in ladder}
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(sorted(ticks), [ticks[t] for t in sorted(ticks)])
        ax.set_xlabel("link rate (every node's uplink; lan: loopback)")
        ax.set_ylabel("FL round time (s)" if mode == "fl" else "DDP step time (s)")
        ax.set_title(f"{mode.upper()}: time against the link rate (dashed: gloo / Flower)")
        ax.legend(fontsize=7, ncol=2)
    return fig


def save_figure(fig: Figure, path: Path) -> None:
    """The figure as SVG with no date and fixed element ids: the same rows give the same bytes."""
    with matplotlib.rc_context({"svg.hashsalt": "crossover"}):
        fig.savefig(path, format="svg", metadata={"Date": None})


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = BenchParser(__doc__, "crossover", QUICK, seeds=0)
    p.add_argument("--rates", default="lan,1gbit,100mbit,10mbit,1mbit", help="link profiles, comma-separated")
    p.add_argument("--fl-cases", default=",".join(["fp32", *defaults(), FLOWER]),
                   help="codecs and flower (default: fp32, every compressor at its default, Flower FedAvg)")
    p.add_argument("--ddp-cases", default=",".join(["dense", *defaults(), *GLOO]),
                   help="methods and gloo-<hook> (default: dense, every compressor at its default, gloo none/fp16/powersgd)")
    p.add_argument("--loss-rate", default="10mbit-loss5", help="a lossy profile the --loss-cases also run at")
    p.add_argument("--loss-cases", default="ddp:dense,ddp:gloo-none",
                   help="mode:case pairs run at --loss-rate too (empty: none)")
    p.add_argument("--rounds", type=int, default=2, help="FL rounds a run")
    p.add_argument("--samples", type=int, default=500, help="FL samples a client trains a round")
    p.add_argument("--clients", type=int, default=2, help="FL clients")
    p.add_argument("--world", type=int, default=2, help="DDP ranks")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--train-subset", type=int, default=1000, help="FL: the samples the clients' data come from")
    p.add_argument("--ddp-train-subset", type=int, default=384, help="DDP: one epoch's samples")
    p.add_argument("--test-subset", type=int, default=200)
    p.add_argument("--skip", type=int, default=2, help="DDP steps left out of times and bytes (warm-ups)")
    p.add_argument("--start-iter", type=int, default=2, help="dense steps before PowerSGD, DDS and gloo alike")
    p.add_argument("--slow-below", default="10mbit", help="rates below this one run the shorter settings")
    p.add_argument("--slow-rounds", type=int, default=1, help="FL rounds a run below --slow-below")
    p.add_argument("--slow-train-subset", type=int, default=256, help="DDP samples below --slow-below")
    p.add_argument("--slow-skip", type=int, default=2, help="DDP warm-up steps below --slow-below")
    p.add_argument("--fast-from", default="1gbit", help="this rate and faster ones (lan) run the longer settings")
    p.add_argument("--fast-rounds", type=int, default=16, help="FL rounds a run from --fast-from")
    p.add_argument("--fast-samples", type=int, default=128, help="FL samples a client trains a round from --fast-from")
    p.add_argument("--fast-train-subset", type=int, default=4096, help="DDP samples from --fast-from")
    p.add_argument("--fast-repeats", type=int, default=3, help="runs of each case from --fast-from (median)")
    a = p.parse_args(argv)
    for rate in [*a.rates.split(","), a.slow_below, a.fast_from, a.loss_rate]:
        check_profile(rate)
    if a.start_iter > min(a.skip, a.slow_skip):
        p.error(f"--start-iter {a.start_iter}: PowerSGD's dense steps must be warm-up steps (--skip, --slow-skip)")
    return a


def plan(a: argparse.Namespace) -> list[tuple[str, str, str, int]]:
    """(mode, case, rate, repeat) of every run: the rates fastest first, so the short runs come
    first; from --fast-from, --fast-repeats rounds of the rate's cases, interleaved."""
    cases = [(mode, c) for mode, given in (("fl", a.fl_cases), ("ddp", a.ddp_cases)) for c in given.split(",") if c]
    out = []
    for rate in a.rates.split(","):
        orders = bench_peers_fl.repeat_order(cases, a.fast_repeats if fast(rate, a) else 1)
        out += [(mode, case, rate, k) for k, order in enumerate(orders) for mode, case in order]
    for pair in filter(None, a.loss_cases.split(",")):
        mode, _, case = pair.partition(":")
        if (mode, case) not in cases:
            raise SystemExit(f"--loss-cases {pair!r}: not one of the --fl-cases / --ddp-cases as fl:<case> or ddp:<case>")
        out.append((mode, case, a.loss_rate, 0))
    return out


def merge_repeats(rows: list[dict]) -> list[dict]:
    """One row per (mode, case, rate): a case run several times gets the median of its runs."""
    keys = dict.fromkeys((r["mode"], r["case"], r["rate"]) for r in rows)
    groups = [[r for r in rows if (r["mode"], r["case"], r["rate"]) == key] for key in keys]
    return [runs[0] if len(runs) == 1 else bench_peers_fl.median_row(runs[0]["case"], runs) for runs in groups]


def notes(a: argparse.Namespace, shaped: bool) -> list[str]:
    return [f"FL: {a.clients} clients, {a.rounds} round(s) of {a.samples} samples a client ({a.fast_rounds} of "
            f"{a.fast_samples} from {a.fast_from}, {a.slow_rounds} below {a.slow_below}) from {a.train_subset} training samples, median "
            f"round time, bytes a client uploads a round ('bytes from' says whose counters: loopback's lo counters are "
            f"shared, an upper bound). DDP: world {a.world}, {a.epochs} epoch of {a.ddp_train_subset} samples "
            f"({a.fast_train_subset} from {a.fast_from}, {a.slow_train_subset} below {a.slow_below}), median step time and bytes a rank sends a step over the steps after the first "
            f"{a.skip} ({a.slow_skip} below {a.slow_below}), DGC's warm-up and PowerSGD's {a.start_iter} dense "
            f"step(s) among them. Model mnist_cnn on MNIST subsets ({a.test_subset} test samples): time and bytes "
            f"do not depend on accuracy. Batch {bench_peers.WORKLOAD['batch_size']} a rank. Compressors at their "
            f"defaults. From {a.fast_from} each case ran {a.fast_repeats} times, the cases interleaved, each row the "
            f"median of its runs. x of DDS fp32 (FL) or dense (DDP) at the same rate; lan is loopback; {a.loss_rate} rows: the "
            f"same cases with packets lost, not in the ladder"
            + ("" if shaped else "; NOT root: every rate ran unshaped on loopback")]


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    runs = plan(a)
    shaped = os.geteuid() == 0
    rows: list[dict] = []
    with BenchRun(a, len(runs)) as s:
        for mode, case, rate, repeat in runs:
            run_id = f"bench-crossover-{mode}-{case}-{rate}{f'-r{repeat + 1}' if repeat else ''}-{os.getpid()}"
            settings = at_rate(rate, a)
            command, measure = (fl_command, fl_measure) if mode == "fl" else (ddp_command, ddp_measure)
            outcome = s.run(command(case, settings, run_id), run_id)
            row = {"mode": mode, "case": case, "rate": rate, "status": outcome.status, "run_id": run_id}
            try:
                row.update(measure(case, settings, a.results_dir / run_id))
            except (RunError, OSError, KeyError, IndexError) as e:
                row["status"] += f"; no tables ({type(e).__name__})"
            if not math.isfinite(row.get("time_s", 0.0)):
                row.pop("time_s")
            rows.append(row)
            s.step(f"{mode} {case} at {rate}: {row['status']}")
        rows = merge_repeats(rows)
        for r in rows:
            ref = next((x for x in rows if x["mode"] == r["mode"] and x["rate"] == r["rate"]
                        and x["case"] == REFERENCE[r["mode"]] and "time_s" in x), None)
            if ref and "time_s" in r:
                r["time_x_of_reference"] = round(r["time_s"] / ref["time_s"], 3)
                r["bytes_x_of_reference"] = round(r["bytes"] / ref["bytes"], 4) if ref["bytes"] else None
        after = payoff_lines(rows)
        s.path(".svg").parent.mkdir(parents=True, exist_ok=True)
        save_figure(figure(rows), s.path(".svg"))
        columns = ["mode", "case", "rate", "time_s", "bytes", "time_x_of_reference", "bytes_x_of_reference",
                   "pays_off_at_or_below", "bytes_from", "status", "run_id"]
        s.write(pd.DataFrame(rows).reindex(columns=columns), {c: c for c in columns if c != "run_id"},
                "FL round and DDP step time and bytes against the link rate", notes=notes(a, shaped),
                after=[*after, f"![time against the link rate]({s.path('.svg').name})"])
        s.path("-notes.md").write_text("\n\n".join([*notes(a, shaped), *after]) + "\n")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
