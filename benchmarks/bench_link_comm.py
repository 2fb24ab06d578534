"""Communication time per FL round on a shaped link: fp32 uploads vs a compressed codec.

    python benchmarks/bench_link_comm.py [--backend netns|docker] [--profile 10mbit] [--rounds 3]

Runs the same short FL experiment (2 clients, 1000 samples per client and round) once per codec
with every node's uplink shaped by the link profile, then reads each run's own metrics: the
clients' comm_time_s (clients-*.csv) and bytes_up (rounds.csv). Prints per-round means and the
fp32/codec ratio (target: >= 4x less communication time for int8_sparse on 10mbit).
Backends: netns = local processes in network namespaces (root), docker = one container per node.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

from commlab.fl.run import build_configs, parse_args
from commlab.progress import Progress


def run(codec: str, a: argparse.Namespace) -> Path:
    controller, clients = build_configs(parse_args([
        "--codec", codec, "--clients", "2", "--rounds", str(a.rounds), "--samples-per-round", "1000",
        "--test-subset", "2000", "--profile", a.profile, "--results-dir", a.results_dir]))
    if a.backend == "docker":
        from commlab.testbed.docker_run import run_fl
        return run_fl(controller, clients, a.profile, Path(a.results_dir))
    from commlab.testbed.netns_run import run_fl_netns
    return run_fl_netns(controller, clients, a.profile)


def per_round(run_dir: Path) -> dict[str, float]:
    rows = [r for p in sorted(run_dir.glob("clients*.csv")) for r in csv.DictReader(open(p))]
    rounds = list(csv.DictReader(open(run_dir / "rounds.csv")))
    return {"comm_time_s": statistics.mean(float(r["comm_time_s"]) for r in rows),
            "bytes_up_per_client": statistics.mean(int(r["bytes_up"]) for r in rows),
            "round_time_s": statistics.mean(float(r["round_time_s"]) for r in rounds),
            "final_accuracy": float(rounds[-1]["test_accuracy"])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=("netns", "docker"), default="netns")
    p.add_argument("--profile", default="10mbit")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--codec", default="int8_sparse")
    p.add_argument("--results-dir", default="results")
    p.add_argument("--runs", nargs=2, type=Path, metavar=("FP32_RUN", "CODEC_RUN"),
                   help="only read two finished run folders")
    a = p.parse_args(argv)
    dirs = a.runs
    if not dirs:
        with Progress(2, "run") as progress:
            dirs = []
            for codec in ("fp32", a.codec):
                progress.update(len(dirs), f"running {codec}")
                dirs.append(run(codec, a))
            progress.update(len(dirs), "done")
    stats = [per_round(d) for d in dirs]
    for name, s, d in zip(("fp32", a.codec), stats, dirs):
        print(f"{name:12s} comm {s['comm_time_s']:.3f} s/round/client, up {s['bytes_up_per_client'] / 1e6:.3f} MB"
              f"/round/client, round {s['round_time_s']:.1f} s, final acc {s['final_accuracy']:.3f}  ({d})")
    ratio = stats[0]["comm_time_s"] / stats[1]["comm_time_s"]
    print(f"fp32 / {a.codec} communication time per round: {ratio:.1f}x "
          f"(bytes up: {a.codec} {stats[1]['bytes_up_per_client'] / stats[0]['bytes_up_per_client']:.4g} x of fp32)")
    return 0 if ratio >= 4 else 1


if __name__ == "__main__":
    sys.exit(main())
