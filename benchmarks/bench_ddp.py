"""DDP benchmark: dense allreduce vs DGC on the same seeds, data and WORLD, measured in one go.
Prints bytes on the wire per step after DGC's warm-up (PowerSGD: after its whole steps) and their
ratio, final test accuracy (and the gap), step time, pure comm wait and coding time, all from
results/<run-id>/ (CommStats).

    python benchmarks/bench_ddp.py [--world 3] [--epochs 2] [-- extra commlab.ddp.run flags]
    python benchmarks/bench_ddp.py --runs DENSE_RUN_ID DGC_RUN_ID   # only analyse existing runs
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from commlab.codecs import build_compression
from commlab.progress import Progress


def run(method: str, world: int, epochs: int, results: Path, extra: list[str]) -> str:
    run_id = f"bench-ddp-{method}-w{world}-{time.strftime('%Y%m%d-%H%M%S')}"
    cmd = [sys.executable, "-m", "commlab.ddp.run", "--method", method, "--world", str(world), "--epochs",
           str(epochs), "--backend", "local", "--results-dir", str(results), "--run-id", run_id, *extra]
    subprocess.run(cmd, check=True)
    return run_id


def steady_from(manifest: dict) -> int:
    """The first step of the steady state: after DGC's warm-up, after PowerSGD's whole steps
    (start_iter); 0 for every other method. The run's compressor says (Compression.steady_from)."""
    config = manifest["config"]
    compression = build_compression(manifest["method"], config.get("method_params", {}), [], setting="ddp")
    return compression.steady_from(manifest["steps_per_epoch"])


def summarise(run_dir: Path) -> dict:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    steps = pd.concat(pd.read_csv(p) for p in sorted(run_dir.glob("steps-rank*.csv")))
    epochs = pd.read_csv(run_dir / "epochs-rank0.csv")
    settled = steps[steps["step"] >= steady_from(manifest)]  # bytes of the steady state
    return {"method": manifest["method"], "world": manifest["world"], "status": manifest["status"],
            "steps": int(steps["step"].max()) + 1,
            "bytes_sent_per_step_after_warmup": settled["bytes_sent"].mean(),
            "bytes_received_per_step_after_warmup": settled["bytes_received"].mean(),
            "density": settled["density"].mean(),
            "step_time_ms": 1000 * steps["step_time_s"].mean(),
            "comm_wait_ms": 1000 * steps["comm_time_s"].mean(),
            "compute_ms": 1000 * steps["compute_time_s"].mean(),
            "compress_ms": 1000 * steps["compress_time_s"].mean(),
            "decompress_ms": 1000 * steps["decompress_time_s"].mean(),
            "test_accuracy": float(epochs["test_accuracy"].iloc[-1])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--results-dir", type=Path, default=Path("results"))
    p.add_argument("--runs", nargs=2, metavar=("DENSE", "DGC"))
    p.add_argument("extra", nargs="*", help="passed to commlab.ddp.run (after --)")
    a = p.parse_args()
    ids = a.runs
    if not ids:
        # Plain lines between the runs: each run draws its own bar on the terminal.
        with Progress(2, "run", in_place=False) as progress:
            ids = []
            for method in ("dense", "dgc"):
                ids.append(run(method, a.world, a.epochs, a.results_dir, a.extra))
                progress.update(len(ids), f"{method} done")
    dense, dgc = (summarise(a.results_dir / i) for i in ids)
    table = pd.DataFrame([dense, dgc]).set_index("method")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.round(4).T.to_string())
    x_of_fp32 = dgc["bytes_sent_per_step_after_warmup"] / dense["bytes_sent_per_step_after_warmup"]
    print(f"\nbytes sent per step after warm-up, DGC: {x_of_fp32:.4g} x of fp32 (dense), "
          f"a compression factor of {1 / x_of_fp32:.0f}")
    print(f"test accuracy: dense {100 * dense['test_accuracy']:.2f}%, DGC {100 * dgc['test_accuracy']:.2f}% "
          f"(gap {100 * (dense['test_accuracy'] - dgc['test_accuracy']):+.2f} points)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
