"""DDP benchmark: dense allreduce vs DGC on the same seeds, data and WORLD, measured in one go.
Writes bytes on the wire per step after DGC's warm-up (PowerSGD: after its whole steps) and their
ratio, final test accuracy (and the gap), step time, pure comm wait and coding time, all from
results/<run-id>/ (CommStats), to results/bench/ddp.{csv,md}.

    python benchmarks/bench_ddp.py [--world 3] [--epochs 2] [-- extra commlab.ddp.run flags]
    python benchmarks/bench_ddp.py --runs DENSE_RUN_ID DGC_RUN_ID   # only analyse existing runs
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd

from commlab.bench import BenchParser, BenchRun
from commlab.codecs import build_compression
from commlab.report.runs import load_run

METHODS = ("dense", "dgc")
COLUMNS = {"method": "method", "world": "world", "status": "status", "steps": "steps",
           "bytes_sent_per_step_after_warmup": "bytes sent per step, after warm-up",
           "bytes_received_per_step_after_warmup": "bytes received per step, after warm-up",
           "density": "density", "step_time_ms": "step (ms)", "comm_wait_ms": "comm wait (ms)",
           "compute_ms": "compute (ms)", "compress_ms": "compress (ms)", "decompress_ms": "decompress (ms)",
           "test_accuracy": "test accuracy"}


def steady_from(manifest: dict) -> int:
    """The first step of the steady state: after DGC's warm-up, after PowerSGD's whole steps
    (start_iter); 0 for every other method. The run's compressor says (Compression.steady_from)."""
    config = manifest["config"]
    compression = build_compression(manifest["method"], config.get("method_params", {}), [], setting="ddp")
    return compression.steady_from(manifest["steps_per_epoch"])


def summarise(run_dir: Path) -> dict:
    run = load_run(run_dir)
    steps = run.tables["steps"]
    settled = steps[steps["step"] >= steady_from(run.manifest)]  # bytes of the steady state
    return {"method": run.manifest["method"], "world": run.manifest["world"], "status": run.manifest["status"],
            "steps": int(steps["step"].max()) + 1,
            "bytes_sent_per_step_after_warmup": settled["bytes_sent"].mean(),
            "bytes_received_per_step_after_warmup": settled["bytes_received"].mean(),
            "density": settled["density"].mean(),
            "step_time_ms": 1000 * steps["step_time_s"].mean(),
            "comm_wait_ms": 1000 * steps["comm_time_s"].mean(),
            "compute_ms": 1000 * steps["compute_time_s"].mean(),
            "compress_ms": 1000 * steps["compress_time_s"].mean(),
            "decompress_ms": 1000 * steps["decompress_time_s"].mean(),
            "test_accuracy": run.final_accuracy}


def main(argv: list[str] | None = None) -> int:
    p = BenchParser(__doc__, "ddp", {"epochs": 1, "train_subset": 1920, "extra": ["--warmup", "0.25"]}, profile="lan")
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--train-subset", type=int, default=20000, help="training samples shared by the ranks (0: all)")
    p.add_argument("--runs", nargs=2, metavar=("DENSE", "DGC"), help="only read two finished runs")
    p.add_argument("extra", nargs="*", help="passed to commlab.ddp.run (after --)")
    a = p.parse_args(argv)
    ids = list(a.runs or [])
    with BenchRun(a, total=0 if ids else len(METHODS)) as s:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for method in () if ids else METHODS:
            run_id = f"bench-ddp-{method}-w{a.world}-{stamp}"
            s.run([sys.executable, "-m", "commlab.ddp.run", "--method", method, "--world", str(a.world),
                   "--epochs", str(a.epochs), "--train-subset", str(a.train_subset), "--profile", a.profile,
                   "--backend", "local", "--results-dir", str(a.results_dir), "--run-id", run_id, *a.extra],
                  run_id).check()
            ids.append(run_id)
            s.step(f"{method} done")
        dense, dgc = (summarise(a.results_dir / i) for i in ids)
        x_of_fp32 = dgc["bytes_sent_per_step_after_warmup"] / dense["bytes_sent_per_step_after_warmup"]
        s.write(pd.DataFrame([dense, dgc]), COLUMNS, "DDP: dense allreduce against DGC",
                notes=[f"runs {', '.join(ids)}"],
                after=[f"bytes sent per step after warm-up, DGC: {x_of_fp32:.4g} x of fp32 (dense), "
                       f"a compression factor of {1 / x_of_fp32:.0f}",
                       f"test accuracy: dense {100 * dense['test_accuracy']:.2f}%, DGC "
                       f"{100 * dgc['test_accuracy']:.2f}% (gap "
                       f"{100 * (dense['test_accuracy'] - dgc['test_accuracy']):+.2f} points)"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
