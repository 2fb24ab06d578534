"""Accuracy against privacy spent: DP-FedAvg (docs/privacy.md) on MNIST with 100 clients, 10
sampled per round, at three noise multipliers, beside the same run without privacy, for each
uplink codec given.

Every row is one real FL run through the launcher: the 100 clients are logical clients hosted by
--procs client processes (local processes on loopback), same seeds, data and settings in every
run. The controller clips each update to --clip, adds Gaussian noise of std z * clip to their sum
and divides by 10; epsilon is what the run wrote to rounds.csv after its last round (the RDP
accountant of dp-accounting, delta --delta, sampling rate 10/100). The "secure aggregation"
column is the bits a coordinate of the masked upload takes if the same codec's levels were summed
under SecAgg+ (commlab.privacy.field).

A second table (privacy-secagg) runs one SecAgg+ round in this process per codec of
--secagg-codecs: 10 clients of a mnist_cnn-sized update (--secagg-length), neighbours 8,
threshold 5, 3 clients dropping after sharing keys. Per codec: the codec's own frame against the
masked frame (bytes, and both as x of fp32), and the round's time as x of a plain sum of the same
quantized updates, measured in the same run; the sum is checked bit for bit against the plain one.

    python benchmarks/bench_privacy.py                       # make bench-privacy
    python benchmarks/bench_privacy.py --noise 0.01 0.1 --rounds 30 --codecs fp32 qsgd8
    python benchmarks/bench_privacy.py --quick               # 4 rounds, one codec, fewer samples, 100,000 coordinates
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time

import numpy as np
import pandas as pd

from commlab.bench import BenchParser, BenchRun
from commlab.codecs import get_codec
from commlab.models import build_model, num_params
from commlab.privacy.field import FieldQuantizer, field_steps
from commlab.privacy.secagg import SecAggClient, SecAggParams, encode_masked
from commlab.privacy.secagg_server import run_in_process
from commlab.report.runs import try_load_run

CLIENTS, PER_ROUND = 100, 10
COLUMNS = {"codec": "uplink codec", "noise": "noise multiplier z", "rounds": "rounds",
           "samples": "samples per client and round", "status": "status",
           "test_accuracy": "final test accuracy (%)", "delta_pp": "vs no privacy (pp)",
           "epsilon": "epsilon", "up_MB_per_round": "bytes up per round (MB)",
           "secagg_bits": "secure aggregation: bits/coordinate", "wall_s": "wall time (s)"}


def secagg_bits(codec: str) -> str:
    """Bits a coordinate of a SecAgg+ upload of this codec's levels summed over a round's clients."""
    try:
        return str(FieldQuantizer(1.0, field_steps(codec), PER_ROUND).bits)
    except ValueError as e:
        return f"not combinable ({str(e).split(': ', 1)[1].split(':')[0]})"


SECAGG_COLUMNS = {"codec": "codec", "codec_bytes": "codec frame (bytes)", "codec_x_fp32": "x of fp32",
                  "masked_bytes": "SecAgg+ masked frame (bytes)", "masked_x_fp32": "x of fp32",
                  "masked_x_codec": "x of the codec", "bits": "bits/coordinate",
                  "round_x_plain_sum": "round time, x of a plain sum", "exact": "sum bit-exact"}


def secagg_round(codec: str, length: int, seed: int) -> dict:
    """One in-process SecAgg+ round of 10 clients, 3 dropping before their masked input."""
    q = FieldQuantizer(1.0, field_steps(codec), PER_ROUND)
    names = tuple(f"client-{i}" for i in range(PER_ROUND))
    params = SecAggParams(names, degree=8, threshold=5, graph_seed=seed, quantizer=q, length=length)
    rng = np.random.default_rng(seed)
    levels = {c: q.encode(rng.normal(0, 0.3, length), rng) for c in names}
    gone = set(names[2:5])
    plain_s = math.inf
    for _ in range(5):  # the fastest of five: one sum of small arrays is too short to time once
        started = time.perf_counter()
        plain = sum(levels[c].astype(np.uint64) for c in names if c not in gone)
        plain_s = min(plain_s, time.perf_counter() - started)
    clients = [SecAggClient(c, params, random.Random(f"{seed}-{c}").randbytes) for c in names]
    started = time.perf_counter()
    (total, _), masked = run_in_process(params, clients, levels, gone_before_masked=gone)
    round_s = time.perf_counter() - started
    fp32 = get_codec("fp32").wire_size(length)
    codec_bytes, masked_bytes = get_codec(codec).wire_size(length), len(encode_masked(next(iter(masked.values())), q.bits))
    return {"codec": codec, "codec_bytes": codec_bytes, "codec_x_fp32": codec_bytes / fp32,
            "masked_bytes": masked_bytes, "masked_x_fp32": masked_bytes / fp32, "masked_x_codec": masked_bytes / codec_bytes,
            "bits": q.bits, "round_x_plain_sum": round_s / plain_s, "exact": bool(np.array_equal(total, plain))}


def fl_run(s: BenchRun, codec: str, noise: float | None, a: argparse.Namespace, run_id: str) -> str:
    cmd = [sys.executable, "-m", "commlab.fl.run", "--codec", codec, "--clients", str(CLIENTS),
           "--per-round", str(PER_ROUND), "--procs", str(a.procs), "--rounds", str(a.rounds),
           "--samples-per-round", str(a.samples), "--batch-size", str(a.batch_size), "--lr", str(a.lr),
           "--partition", "iid", "--test-subset", str(a.test_subset), "--train-subset", str(a.train_subset),
           "--backend", "local", "--seed", str(a.seed), "--results-dir", str(a.results_dir), "--run-id", run_id]
    if noise is not None:
        cmd += ["--dp-noise", str(noise), "--dp-clip", str(a.clip), "--dp-delta", str(a.delta)]
    return s.run(cmd, run_id).status


def run_all(s: BenchRun, a: argparse.Namespace, stamp: str) -> pd.DataFrame:
    rows = []
    for codec in a.codecs:
        for noise in [None, *a.noise]:
            run_id = f"bench-privacy-{stamp}-{codec}-{'plain' if noise is None else f'z{noise:g}'}"
            started = time.monotonic()
            status = fl_run(s, codec, noise, a, run_id)
            row = {"codec": codec, "noise": "none" if noise is None else f"{noise:g}", "rounds": a.rounds,
                   "samples": a.samples, "status": status,
                   "run_id": run_id, "secagg_bits": secagg_bits(codec), "wall_s": round(time.monotonic() - started)}
            run = try_load_run(a.results_dir / run_id)
            if run is not None and len(run.tables["rounds"]):
                r = run.tables["rounds"]
                row.update(test_accuracy=float(r["test_accuracy"].iloc[-1]), up_MB_per_round=r["bytes_up"].mean() / 1e6,
                           epsilon=float(r["epsilon"].iloc[-1]) if noise is not None else float("inf"))
            rows.append(row)
            s.step(f"{codec} z={row['noise']} {status}")
    table = pd.DataFrame(rows).reindex(columns=[*COLUMNS, "run_id"])
    plain = table[table["noise"] == "none"].set_index("codec")["test_accuracy"]
    return table.assign(delta_pp=100 * (table["test_accuracy"] - table["codec"].map(plain)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = BenchParser(__doc__, "privacy", {"rounds": 4, "codecs": ["fp32"], "samples": 100, "train_subset": 10000,
                                         "test_subset": 500, "secagg_length": 100_000}, seeds=0)
    # With 10 clients a round, z 1 puts noise of std 0.1 on every weight of the mean: training
    # diverges to non-finite updates in the first rounds, so the levels stop at 0.3.
    p.add_argument("--noise", type=float, nargs="+", default=[0.03, 0.1, 0.3], help="noise multipliers z")
    p.add_argument("--codecs", nargs="+", default=["fp32", "qsgd8"])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--procs", type=int, default=4, help="client processes hosting the 100 clients")
    p.add_argument("--clip", type=float, default=1.0, help="L2 bound of a client update")
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--samples", type=int, default=300, help="samples per client and round")
    p.add_argument("--batch-size", type=int, default=30)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_data_subsets(train=60000, test=2000)
    p.add_argument("--secagg-codecs", nargs="+", default=["int8", "qsgd8", "qsgd4", "minmax4", "terngrad"])
    p.add_argument("--secagg-length", type=int, default=num_params(build_model("mnist_cnn")),
                   help="coordinates of the update in the SecAgg+ table (default: mnist_cnn's)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with BenchRun(a, len(a.codecs) * (len(a.noise) + 1)) as s:  # the SecAgg+ table takes seconds: not counted
        table = run_all(s, a, stamp)
        settings = (f"MNIST, mnist_cnn, {CLIENTS} clients (iid) hosted by {a.procs} processes, {PER_ROUND} sampled "
                    f"per round, {a.rounds} rounds, {a.samples} samples per client and round in batches of "
                    f"{a.batch_size}, lr {a.lr}, clip {a.clip}, delta {a.delta:g}, seed {a.seed}; epsilon from the "
                    f"RDP accountant at sampling rate {PER_ROUND / CLIENTS:g}")
        shown = table.assign(test_accuracy=100 * table["test_accuracy"])
        s.write(table, COLUMNS, "Accuracy against privacy spent (DP-FedAvg)", notes=[settings], shown=shown)
        secagg = pd.DataFrame([secagg_round(codec, a.secagg_length, a.seed) for codec in a.secagg_codecs])
        s.write(secagg, SECAGG_COLUMNS, "SecAgg+ upload and round cost by codec", suffix="-secagg",
                notes=[f"{a.secagg_length} coordinates, {PER_ROUND} clients, neighbours 8, threshold 5, "
                       "3 dropping after sharing keys; field grid over [-1, 1] with the codec's level count"])
    return 0 if (table["status"] == "ok").all() and secagg["exact"].all() else 1


if __name__ == "__main__":
    sys.exit(main())
