"""Communication time per FL round on a shaped link: fp32 uploads vs a compressed codec.

    python benchmarks/bench_link_comm.py [--backend netns|docker] [--profile 10mbit] [--rounds 3]

Runs the same short FL experiment (2 clients, 1000 samples per client and round) once per codec
with every node's uplink shaped by the link profile, then reads each run's own metrics: the
clients' comm_time_s and bytes_up. Writes per-round means and the fp32/codec ratio to
results/bench/link-comm.{csv,md} (target: >= 4x less communication time for int8_sparse on 10mbit;
the exit code is 1 below it). Backends: netns = local processes in network namespaces (root),
docker = one container per node.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd

from commlab.bench import BenchParser, BenchRun
from commlab.report.runs import load_run

LAUNCHER_BACKEND = {"netns": "local", "docker": "docker"}  # local + a shaped profile as root: namespaces
TARGET_RATIO = 4.0


def per_round(run_dir: Path) -> dict[str, float]:
    run = load_run(run_dir)
    clients, rounds = run.tables["clients"], run.tables["rounds"]
    return {"comm_time_s": float(clients["comm_time_s"].mean()),
            "bytes_up_per_client": float(clients["bytes_up"].mean()),
            "round_time_s": float(rounds["round_time_s"].mean()),
            "final_accuracy": run.final_accuracy}


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "link-comm", {"rounds": 1}, seeds=0, profile="10mbit")
    p.add_argument("--backend", choices=tuple(LAUNCHER_BACKEND), default="netns")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--codec", default="int8_sparse")
    p.add_argument("--runs", nargs=2, type=Path, metavar=("FP32_RUN", "CODEC_RUN"),
                   help="only read two finished run folders")
    a = p.parse_args(argv)
    codecs = ("fp32", a.codec)
    dirs = list(a.runs or [])
    with BenchRun(a, 0 if dirs else len(codecs)) as s:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for codec in () if dirs else codecs:
            run_id = f"bench-link-comm-{stamp}-{codec}"
            s.run([sys.executable, "-m", "commlab.fl.run", "--codec", codec, "--clients", "2", "--rounds",
                   str(a.rounds), "--samples-per-round", "1000", "--test-subset", "2000", "--profile", a.profile,
                   "--backend", LAUNCHER_BACKEND[a.backend], "--seed", str(a.seed), "--results-dir",
                   str(a.results_dir), "--run-id", run_id], run_id).check()
            dirs.append(a.results_dir / run_id)
            s.step(codec)
        rows = [{"codec": codec, **per_round(d), "run": str(d)} for codec, d in zip(codecs, dirs)]
        fp32, compressed = rows
        ratio = fp32["comm_time_s"] / compressed["comm_time_s"]
        s.write(pd.DataFrame(rows), None, f"FL communication time per round on {a.profile}: fp32 against {a.codec}",
                notes=[f"backend {a.backend}, 2 clients, {a.rounds} rounds of 1000 samples per client; means per "
                       f"round and client"],
                after=[f"fp32 / {a.codec} communication time per round: {ratio:.1f}x (target {TARGET_RATIO:g}x; "
                       f"bytes up: {a.codec} {compressed['bytes_up_per_client'] / fp32['bytes_up_per_client']:.4g} "
                       f"x of fp32)"])
    return 0 if ratio >= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
