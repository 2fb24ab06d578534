"""Generated result tables: run a benchmark, then write the rows it saved as a markdown table under
docs/results/, headed by what a reader needs to reproduce or doubt the numbers: the exact command,
the commit, the date, the machine and the wall time. Numbers in the docs come from these files, so
none is typed by hand.

    python -m commlab.report.results_doc [--quick] [--out-dir docs/results] codecs auth transport chaos crossover
"""
from __future__ import annotations

import argparse
import csv
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from commlab.bench.options import QUICK_SUFFIX, table_stem

from .provenance import git_commit, header, machine

SWEEPS = Path("experiments/sweeps")  # relative to the checkout
# Accuracy against epsilon at settings small enough for two shared cores (its table gives the wall time).
PRIVACY_ARGS = ("--codecs", "fp32", "--rounds", "20", "--samples", "200")
# ResNet-18's 44.7 MB gradient at 10 Mbit/s: a dense step takes tens of seconds, so few steps (120
# samples, batch 8 per rank: 5 steps), DGC's warm-up and PowerSGD's dense start over in 2 of them.
PEERS_RESNET18_ARGS = ("--name", "peers-resnet18", "--model", "resnet18", "--dataset", "synthetic:cifar10",
                       "--batch-size", "8", "--train-subset", "120", "--test-subset", "96", "--skip", "2",
                       "--start-iter", "2", "--profile", "10mbit",
                       "--only", "dds-dense-ring,gloo-none,dds-dgc,gloo-powersgd")
# Every rate on the same model, about an hour on two shared cores: the references, int8_sparse and
# int8 (FL), int8 and DGC (DDP) beside Flower and gloo's hooks; the DDP ring and gloo under 5 % loss.
CROSSOVER_ARGS = ("--fl-cases", "fp32,int8_sparse,int8,flower",
                  "--ddp-cases", "dense,int8,dgc,gloo-none,gloo-fp16,gloo-powersgd")
# DDS FL beside Flower on the fast links: every case 4 times, the order reversed every other time,
# ratios taken within each repeat, so a load drifting on shared cores favours neither side.
PEERS_FL_ARGS = ("--only", "dds-fp32,dds-int8_sparse,flower", "--repeats", "4", "--rounds", "5",
                 "--samples-per-round", "300", "--train-subset", "2000", "--test-subset", "500")
Column = tuple[str, str]  # (heading, format spec for float(value); "" keeps the value as written)
# The first columns of both probe benchmarks (auth, transport): which link, what was sent, how often.
PROBE_COLUMNS: dict[str, Column] = {"link": ("link", ""), "size": ("message bytes", ",.0f"),
                                    "count": ("messages", ""), "repeat": ("repetitions (median)", "")}


def accuracy_gaps(rows: list[dict], runs: list[dict]) -> list[str]:
    """Per mode of a compressor matrix: the best and the worst compressor by median test accuracy
    (``rows``, one per compressor), and the best-to-worst gap in percentage points within each seed
    (``runs``, one per compressor and seed): its median, min and max over the seeds. The centralized
    peer, a ceiling without a link, is no compressor and stays out."""
    def scored(items: list[dict], mode: str) -> list[dict]:
        return [r for r in items if r["mode"] == mode and r["compressor"] != "centralized"
                and r["test_accuracy"] not in ("", None)]

    lines = []
    for mode in dict.fromkeys(r["mode"] for r in rows):
        ranked = sorted((float(r["test_accuracy"]), r["compressor"]) for r in scored(rows, mode))
        if not ranked:
            continue
        (worst, worst_name), (best, best_name) = ranked[0], ranked[-1]
        line = (f"- {mode.upper()}: best {best_name} {100 * best:.2f} %, worst {worst_name} {100 * worst:.2f} % "
                f"(median accuracy over seeds), best-to-worst gap {100 * (best - worst):.2f} pp")
        by_seed: dict[str, list[float]] = {}
        for r in (r for r in scored(runs, mode) if r["status"] == "ok"):
            by_seed.setdefault(str(r["seed"]), []).append(float(r["test_accuracy"]))
        gaps = sorted(100 * (max(acc) - min(acc)) for acc in by_seed.values())
        if gaps:
            seeds = f"{len(gaps)} seed{'s' if len(gaps) > 1 else ''}"
            line += (f"; within each seed ({seeds}): median {statistics.median(gaps):.2f} pp, "
                     f"min {gaps[0]:.2f} pp, max {gaps[-1]:.2f} pp")
        lines.append(line)
    return lines


def matrix_gaps(table_csv: Path) -> list[str]:
    """accuracy_gaps of a matrix's table and of its per-run rows beside it (<name>-runs.csv: bench_matrix)."""
    return accuracy_gaps(read_rows(table_csv), read_rows(table_csv.with_name(table_csv.stem + "-runs.csv")))


def peer_ratios(table_csv: Path) -> list[str]:
    """bench_peers' comparisons, one line each where both cases ran: DDS DGC's bytes per step and
    rank after its warm-up as a share of DDS dense ring's, its step time as a multiple of gloo
    PowerSGD's, and DDS dense ring's step time as a multiple of gloo without a hook."""
    rows = {r["case"]: r for r in read_rows(table_csv)}

    def value(case: str, column: str) -> float | None:
        text = rows.get(case, {}).get(column, "")
        return float(text) if text else None

    lines = []
    dgc, dense = (value(c, "bytes_sent_per_rank_step_after_warmup") for c in ("dds-dgc", "dds-dense-ring"))
    if dgc and dense:
        lines.append(f"- DDS dgc after its warm-up sends 1/{dense / dgc:.0f} of DDS dense ring's bytes per step and rank")
    for case, ref, what in (("dds-dgc", "gloo-powersgd", "gloo powersgd's"), ("dds-dense-ring", "gloo-none",
                                                                               "gloo's without a hook")):
        mine, theirs = value(case, "step_time_s"), value(ref, "step_time_s")
        if mine and theirs:
            lines.append(f"- {case} step time: {mine / theirs:.3f} x {what} (median step, steps after the warm-up)")
    return lines


def fl_peer_ratios(table_csv: Path) -> list[str]:
    """bench_peers_fl's comparisons (medians of the repeats' own ratios), then each ratio repeat by
    repeat as the benchmark wrote it above its table."""
    rows = {r["case"]: r for r in read_rows(table_csv)}
    lines = []
    for case, column, what in (("dds-fp32", "round_time_x_of_flower", "round time, x Flower's"),
                               ("dds-fp32", "overhead_x_of_flower", "overhead, x Flower's"),
                               ("dds-int8_sparse", "round_time_x_of_dds_fp32", "round time, x DDS fp32's"),
                               ("dds-int8_sparse", "overhead_x_of_dds_fp32", "overhead, x DDS fp32's")):
        value = rows.get(case, {}).get(column, "")
        if value:
            lines.append(f"- {case} {what}: {float(value):.3f} (median over the repeats)")
    written = table_csv.with_suffix(".md").read_text().splitlines()
    return lines + [f"- {line}" for line in written if " per repeat: " in line]


def written_beside(table_csv: Path) -> list[str]:
    """The lines a benchmark wrote beside its table for the reader (<name>-notes.md: its settings
    and verdicts)."""
    return table_csv.with_name(table_csv.stem + "-notes.md").read_text().splitlines()


def identical_rounds(table_csv: Path) -> list[str]:
    """How many rounds' models were bit-identical across the two deployments."""
    rows = read_rows(table_csv)
    return [f"rounds with bit-identical models: {sum(r['equal'] == 'True' for r in rows)}/{len(rows)}"]


@dataclass(frozen=True)
class Bench:
    title: str
    script: str
    columns: dict[str, Column]
    args: tuple[str, ...] = ()  # the published settings (--quick is added after them)
    summary: Callable[[Path], list[str]] | None = None  # lines under the table, from its CSV (and those beside it)
    # Its runs are a sweep file's cells (experiments/sweeps/<name>[-quick].json, the benchmark's own
    # with these args): the sweep runs them, then the benchmark builds its table from them (--resume).
    sweep: bool = False
    figure: bool = False  # the benchmark draws <name>.svg beside its table: copied beside the document, shown


    def sweep_file(self, name: str, quick: bool) -> Path:
        return SWEEPS / f"{name}{QUICK_SUFFIX if quick else ''}.json"


BENCHES = {
    "codecs": Bench(
        "Codecs: wire bytes, encode/decode speed against memcpy, reconstruction error",
        "benchmarks/bench_codecs.py",
        {"vector": ("vector", ""), "numel": ("values", ",.0f"), "codec": ("codec", ""),
         "wire_bytes": ("wire bytes", ",.0f"), "wire_x_of_fp32": ("wire, x of fp32", ".4f"),
         "encode_MBps": ("encode MB/s", ".0f"), "decode_MBps": ("decode MB/s", ".0f"),
         "memcpy_MBps": ("memcpy MB/s, timed beside", ".0f"),
         "roundtrip_x_memcpy": ("encode+decode, x of memcpy", ".3f"), "max_abs_err": ("max abs error", ".3g"),
         "mean_abs_err": ("mean abs error", ".3g")}),
    "auth": Bench(
        "Message protection: DDS goodput of plain, authenticated (MAC) and encrypted (AEAD) messages",
        "benchmarks/bench_auth.py",
        {**PROBE_COLUMNS, "plain_MBps": ("plain MB/s", ".2f"), "mac_MBps": ("MAC MB/s", ".2f"),
         "aead_MBps": ("AEAD MB/s", ".2f"), "mac_cost": ("MAC goodput cost", ".1%"),
         "aead_cost": ("AEAD goodput cost", ".1%"), "aead_cost_middle_half": ("AEAD cost, middle half of rounds", ""),
         "plain_cpu_ms_per_MB": ("plain CPU ms/MB", ".2f"), "mac_cpu_cost": ("MAC CPU cost", ".1%"),
         "aead_cpu_cost": ("AEAD CPU cost", ".1%"),
         "aead_cpu_cost_middle_half": ("AEAD CPU cost, middle half of rounds", ""),
         "mac_in_process_cost": ("MAC CPU cost in process", ".1%"),
         "aead_in_process_cost": ("AEAD CPU cost in process", ".1%"),
         "load": ("machine load (1 min)", ".1f")}),
    "transport": Bench(
        "Transport: DDS against TCP goodput between the same two endpoints",
        "benchmarks/bench_transport.py",
        {**PROBE_COLUMNS, "dds_MBps": ("DDS MB/s", ".2f"), "tcp_MBps": ("TCP MB/s", ".2f"),
         "ratio": ("DDS / TCP", ".2f"), "dds_wire_bytes_est": ("DDS wire bytes (estimate)", ",.0f"),
         "payload_bytes": ("payload bytes", ",.0f")}),
    "chaos": Bench(
        "Chaos: FL and DDP runs while nodes are paused past their lease, killed, restarted, starved, share the machine, "
        "or lose their link",
        "benchmarks/bench_chaos.py",
        {"case": ("case", ""), "fault": ("fault", ""), "expected": ("expected", ""), "outcome": ("outcome", ""),
         "passed": ("passed", ""), "wall_s": ("wall s", ".0f")}),
    "crossover": Bench(
        "Crossover: FL round and DDP step time and bytes against the link rate",
        "benchmarks/bench_crossover.py",
        {"mode": ("mode", ""), "case": ("case", ""), "rate": ("link", ""), "time_s": ("round / step s", ".3f"),
         "bytes": ("bytes a node sends", ",.0f"), "time_x_of_reference": ("time, x of fp32 / dense", ".3f"),
         "bytes_x_of_reference": ("bytes, x of fp32 / dense", ".4f"),
         "pays_off_at_or_below": ("pays off at or below", ""), "bytes_from": ("bytes from", ""),
         "status": ("status", "")},
        args=CROSSOVER_ARGS, summary=written_beside, figure=True),
    "matrix-fashion_mnist": Bench(
        "Every compressor on Fashion-MNIST, FL and DDP, 3 seeds: accuracy against fp32 / dense",
        "benchmarks/bench_matrix.py",
        {"mode": ("mode", ""), "compressor": ("compressor", ""), "status": ("status", ""), "seeds": ("seeds", ""),
         "bytes_x_of_fp32": ("bytes, x of fp32", ".4f"), "test_accuracy": ("test accuracy (median)", ".4f"),
         "accuracy_delta_pp": ("delta (pp, median)", ".2f"), "delta_min_pp": ("delta min (pp)", ".2f"),
         "delta_max_pp": ("delta max (pp)", ".2f"), "comm_time_s": ("comm time (s)", ".3f")},
        args=("--dataset", "fashion_mnist", "--name", "matrix-fashion_mnist", "--seeds", "0", "1", "2",
              "--fl-rounds", "1", "--fl-samples", "1000", "--ddp-train-subset", "3000"),
        summary=matrix_gaps, sweep=True),
    **{f"peers-fl-{rate}": Bench(
        f"FL at {link}: DDS fp32 and int8_sparse beside Flower FedAvg, every case 4 times in alternating order",
        "benchmarks/bench_peers_fl.py",
        {"case": ("case", ""), "status": ("status", ""), "round_time_s": ("round s (median)", ".3f"),
         "overhead_s": ("overhead s (median)", ".3f"),
         "round_time_x_of_flower": ("round time, x Flower", ".3f"),
         "round_time_x_of_dds_fp32": ("round time, x DDS fp32", ".3f"),
         "bytes_up_per_client_round_incl_warmup": ("bytes up per client and round", ",.0f"),
         "test_accuracy": ("test accuracy", ".4f")},
        args=("--name", f"peers-fl-{rate}", "--profile", profile, *PEERS_FL_ARGS), summary=fl_peer_ratios)
       for rate, profile, link in (("lan", "lan", "loopback"), ("1gbit", "1000mbit", "1 Gbit/s"))},
    "peers-resnet18": Bench(
        "ResNet-18 DDP at 10 Mbit/s: DDS dense ring and DGC beside torch DDP over gloo, without a hook and with PowerSGD",
        "benchmarks/bench_peers.py",
        {"case": ("case", ""), "status": ("status", ""), "steps": ("steps", ""),
         "bytes_sent_per_rank_step_after_warmup": ("bytes per step and rank after warm-up", ",.0f"),
         "bytes_x_of_dds_dense_ring": ("bytes, x of DDS dense ring", ".4g"),
         "density_after_warmup": ("density after warm-up", ".4g"), "step_time_s": ("step time (s, median)", ".2f"),
         "step_time_x_of_gloo_none": ("step time, x of gloo none", ".3f"),
         "step_time_x_of_gloo_powersgd": ("step time, x of gloo powersgd", ".3f"),
         "comm_time_s": ("comm time (s, median)", ".2f"), "test_accuracy": ("test accuracy", ".4f")},
        args=PEERS_RESNET18_ARGS, summary=peer_ratios),
    "privacy": Bench(
        "Privacy: DP-FedAvg accuracy against epsilon, MNIST, 100 clients, 10 per round",
        "benchmarks/bench_privacy.py",
        {"codec": ("uplink codec", ""), "noise": ("noise multiplier z", ""), "rounds": ("rounds", ""),
         "samples": ("samples per client and round", ""), "status": ("status", ""),
         "test_accuracy": ("final test accuracy", ".2%"), "delta_pp": ("vs no privacy (pp)", ".2f"),
         "epsilon": ("epsilon", ".3g"), "up_MB_per_round": ("bytes up per round (MB)", ".3f"),
         "secagg_bits": ("SecAgg+ bits/coordinate", ""), "wall_s": ("wall s", ".0f")},
        args=PRIVACY_ARGS),
    "swarm-engines": Bench(
        "The same FL run on compose and on a swarm across two Docker engines: per-round models",
        "benchmarks/bench_swarm_engines.py",
        {"round": ("round", ""), "compose_model": ("compose model", ""), "swarm_model": ("two-engine swarm model", ""),
         "equal": ("bit-identical", ""), "compose_accuracy": ("compose test accuracy", ".4f"),
         "swarm_accuracy": ("swarm test accuracy", ".4f")},
        summary=identical_rounds),
    "secagg": Bench(
        "Secure aggregation (SecAgg+) and DP against plain FedAvg: bytes, round time and accuracy on the same links",
        "benchmarks/bench_secagg.py",
        {"codec": ("uplink codec", ""), "mode": ("aggregation", ""), "status": ("status", ""), "rounds": ("rounds", ".0f"),
         "client_up_kB": ("sent per client and round (kB)", ".1f"), "client_up_x": ("x of plain", ".3f"),
         "wire_up_kB": ("on the wire per client and round (kB)", ".1f"),
         "controller_in_kB": ("received by the controller per round (kB)", ".1f"),
         "round_s": ("mean round time (s)", ".2f"), "round_x": ("x of plain", ".2f"),
         "test_accuracy": ("final test accuracy (%)", ".2f"), "accuracy_pp": ("vs plain (pp)", ".2f"),
         "epsilon": ("epsilon", ".3g")}),
}


def cell(value: object, spec: str) -> str:
    if not spec or value in ("", None):
        return str(value)
    return format(float(value), spec)


def table(rows: list[dict], columns: dict[str, Column]) -> list[str]:
    lines = ["| " + " | ".join(h for h, _ in columns.values()) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(cell(row[k], spec) for k, (_, spec) in columns.items()) + " |"
                    for row in rows]


def document(title: str, head: list[str], rows: list[dict], columns: dict[str, Column],
             after: list[str] = ()) -> str:
    return "\n".join([f"# {title}", "", "Generated; do not edit: `make results` rewrites this file.", "",
                      *head, "", *table(rows, columns), *(["", *after] if after else []), ""])


def read_rows(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def run(name: str, quick: bool, out_dir: Path, root: Path) -> Path:
    """Run benchmark ``name`` in ``root`` (its output goes to the terminal; a sweep benchmark's
    cells through its sweep file first) and write its table from the rows it saved
    (results/bench/<name>[-quick].csv: commlab.bench)."""
    bench = BENCHES[name]
    args = [bench.script, *bench.args, *(["--quick"] if quick else [])]
    steps = [args]
    if bench.sweep:
        steps = [["-m", "commlab.sweep", str(bench.sweep_file(name, quick))], [*args, "--resume"]]
    command = " then ".join(f"`{shlex.join(['python', *step])}`" for step in steps)
    command += f" (run by `make results{' QUICK=1' if quick else ''}`)"
    commit, date, start = git_commit(root), datetime.now(timezone.utc), time.monotonic()
    for step in steps:
        done = subprocess.run([sys.executable, *step], cwd=root)
        if done.returncode != 0:
            raise SystemExit(f"{name}: `{shlex.join(step)}` exited {done.returncode}; {out_dir} left as it was")
    wall_s = time.monotonic() - start
    out = out_dir / f"{name}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    head = header(command, commit, date, machine(), wall_s)
    table_csv = table_stem(root / "results", name, quick).with_suffix(".csv")
    rows = read_rows(table_csv)
    after = bench.summary(table_csv) if bench.summary else []
    if bench.figure:
        shutil.copyfile(table_csv.with_suffix(".svg"), out_dir / f"{name}.svg")
        after += ["", f"![{bench.title}]({name}.svg)"]
    out.write_text(document(bench.title, head, rows, bench.columns, after))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m commlab.report.results_doc", description=__doc__.split("\n\n")[0])
    p.add_argument("benches", nargs="+", choices=list(BENCHES))
    p.add_argument("--quick", action="store_true", help="small settings: minutes instead of the published run")
    p.add_argument("--out-dir", type=Path, default=Path("docs/results"))
    args = p.parse_args(argv)
    for name in args.benches:
        print(f"wrote {run(name, args.quick, args.out_dir, Path.cwd())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
