"""The same FL experiment on compose and on a single-node Docker Swarm: bytes (DDS's count and
the interfaces' counters) and accuracy must match (docs/scale.md). One run each, same seeds and flags; DDS multicast off on both, because
an overlay network carries none. Writes the table and the swarm/compose ratios to
results/bench/stack.{csv,md}.

    python benchmarks/bench_stack.py [--rounds 5 --samples 6000]     # make bench-stack (root)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from commlab.bench import BenchParser, BenchRun
from commlab.output.run_folder import new_run_id
from commlab.report.runs import load_run

BACKENDS = ("docker", "swarm")
SUMMED = ("bytes_up", "bytes_down", "iface_bytes_up", "iface_bytes_down")


def add_fl_options(p: BenchParser, rounds: int, samples: int) -> None:
    """The FL run's settings, shared with bench_swarm_engines."""
    p.add_argument("--codec", default="int8_sparse")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--samples", type=int, default=samples, help="per client and round")


def fl_run(s: BenchRun, a: argparse.Namespace, backend: str, name: str) -> Path:
    """One FL run through the launcher on `backend`, multicast off; its run folder."""
    run_id = new_run_id("fl", f"{name}-{backend}")
    s.run([sys.executable, "-m", "commlab.fl.run", "--backend", backend, "--multicast", "off", "--run-id", run_id,
           "--codec", a.codec, "--clients", str(a.clients), "--rounds", str(a.rounds), "--samples-per-round",
           str(a.samples), "--profile", a.profile, "--seed", str(a.seed), "--results-dir", str(a.results_dir)],
          f"bench/{name}-{backend}").check()
    return a.results_dir / run_id


def run(s: BenchRun, a: argparse.Namespace, backend: str) -> dict:
    run_dir = fl_run(s, a, backend, "stack")
    run_id = run_dir.name
    run = load_run(run_dir)
    rounds = run.tables["rounds"]
    return {"backend": backend, "run_id": run_id, "rounds": len(rounds), **{k: int(rounds[k].sum()) for k in SUMMED},
            "test_accuracy": run.final_accuracy, "median_round_s": float(rounds["round_time_s"].median())}


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "stack", {"rounds": 2, "samples": 1000}, seeds=0, profile="10mbit")
    add_fl_options(p, rounds=5, samples=6000)
    a = p.parse_args(argv)
    with BenchRun(a, len(BACKENDS)) as s:
        rows = []
        for backend in BACKENDS:
            rows.append(run(s, a, backend))
            s.step(backend)
        compose, swarm = rows
        s.write(pd.DataFrame(rows), None, "The same FL run on compose and on a single-node Docker Swarm",
                notes=[f"{a.codec}, {a.clients} clients, {a.rounds} rounds of {a.samples} samples per client, "
                       f"profile {a.profile}, DDS multicast off"],
                after=["\n".join([*(f"{key}: swarm {swarm[key] / compose[key]:.4f} x of compose" for key in SUMMED),
                                  f"accuracy: swarm - compose "
                                  f"{100 * (swarm['test_accuracy'] - compose['test_accuracy']):+.2f} pp"])])
    return 0


if __name__ == "__main__":
    sys.exit(main())
