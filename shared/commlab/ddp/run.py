"""`python -m commlab.ddp.run --method dense|dgc --world N --epochs E --backend local|docker|auto`

Builds the WORLD identical worker configs of one DDP run (unique run id and DDS domain), then
starts the workers: as local processes (WORLD/RANK in their environment, progress streamed, only
our own children ever signalled) or through the container backend.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

from commlab.ddp.config import WorkerConfig
from commlab.fl.run import _end
from commlab.fl.schema import ConfigError, from_dict, to_dict
from commlab.metrics import new_run_id

WORKER = Path(__file__).resolve().parents[3] / "nodes" / "worker.py"
GRACE_S = 15.0  # after a worker fails, the others get collective_timeout_s + this to notice and exit


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m commlab.ddp.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--method", choices=("dense", "dgc"), default="dgc")
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--backend", choices=("local", "docker", "auto"), default="local")
    p.add_argument("--profile", default="lan", help="link profile (commlab.netem), recorded in the manifest")
    p.add_argument("--train-subset", type=int, default=20000, help="random training subset (0: all 60000)")
    p.add_argument("--test-subset", type=int, help="random test subset (default: all)")
    p.add_argument("--batch-size", type=int, default=32, help="per worker")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--density", type=float, default=0.001, help="DGC density after warm-up")
    p.add_argument("--warmup", type=float, default=1.0, help="DGC warm-up length in --warmup-unit")
    p.add_argument("--warmup-unit", choices=("steps", "epochs"), default="epochs")
    p.add_argument("--collective-timeout", type=float, default=30.0)
    p.add_argument("--summary-every", type=int, default=50)
    p.add_argument("--resume-from", help="run folder whose per-rank checkpoints to continue from")
    p.add_argument("--results-dir", default="results")
    p.add_argument("--run-id")
    p.add_argument("--domain-id", type=int, help="DDS domain (default: random in 100..232)")
    return p.parse_args(argv)


def build_config(a: argparse.Namespace) -> dict:
    """The worker config every rank reads, validated through the workers' own schema."""
    domain = a.domain_id if a.domain_id is not None else random.Random(time.time_ns() ^ os.getpid()).randrange(100, 233)
    cfg = {"run_id": a.run_id or new_run_id("ddp", f"{a.method}-w{a.world}"), "method": a.method,
           "results_dir": str(Path(a.results_dir).resolve()), "link_profile": a.profile,
           "dds": {"domain_id": domain, "interface": "lo", "peers": ["127.0.0.1"]},
           "dataset": {"name": "mnist", "train_subset": a.train_subset or None, "test_subset": a.test_subset},
           "training": {"epochs": a.epochs, "batch_size": a.batch_size, "lr": a.lr, "seed": a.seed},
           "dgc": {"final_density": a.density, "warmup_length": a.warmup, "warmup_unit": a.warmup_unit},
           "collective_timeout_s": a.collective_timeout, "summary_every": a.summary_every,
           "resume_from": str(Path(a.resume_from).resolve()) if a.resume_from else None}
    return to_dict(from_dict(WorkerConfig, cfg))


def _relay(proc: subprocess.Popen) -> None:
    """Copy a worker's output to ours as it comes (workers prefix their lines with their rank)."""
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()


def run_local(cfg: dict, world: int) -> int:
    """Start WORLD workers; non-zero if any failed. After the first failure the others get the
    collective timeout to report the lost rank themselves, then they are ended."""
    cfg_dir = Path(cfg["results_dir"]) / cfg["run_id"] / "configs"
    cfg_dir.mkdir(parents=True, exist_ok=True)
    path = cfg_dir / "worker.json"
    path.write_text(json.dumps(cfg, indent=2))
    procs, threads = [], []
    try:
        for rank in range(world):
            env = {**os.environ, "PYTHONUNBUFFERED": "1", "WORLD": str(world), "RANK": str(rank)}
            procs.append(subprocess.Popen([sys.executable, str(WORKER), str(path)], env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
            threads.append(threading.Thread(target=_relay, args=(procs[-1],), daemon=True))
            threads[-1].start()
        while all(p.poll() in (None, 0) for p in procs) and any(p.poll() is None for p in procs):
            time.sleep(0.3)
        deadline = time.monotonic() + cfg["collective_timeout_s"] + GRACE_S
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.3)
    finally:
        _end(procs)
    for t in threads:
        t.join(timeout=5)
    codes = [p.returncode for p in procs]
    failed = [r for r, c in enumerate(codes) if c != 0]
    print(f"[run] exit codes by rank: {codes}" + (f"; FAILED ranks: {failed}" if failed else ""), flush=True)
    return 1 if failed else 0


def resolve_backend(requested: str) -> str:
    """local stays local; docker/auto go through commlab.testbed (auto falls back to local if absent)."""
    if requested == "local":
        return "local"
    try:
        from commlab.testbed.backend import choose_backend
    except ImportError as e:
        if requested == "docker":
            raise RuntimeError(f"docker backend unavailable ({e})") from None
        print(f"[run] auto: container backend not installed ({e}); using local processes", flush=True)
        return "local"
    return choose_backend(requested)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    try:
        if a.world < 1:
            raise ConfigError(f"--world must be >= 1, got {a.world}")
        cfg = build_config(a)
        backend = resolve_backend(a.backend)
    except (ConfigError, RuntimeError) as e:
        print(f"commlab.ddp.run: {e}", file=sys.stderr)
        return 2
    print(f"[run] {cfg['run_id']}: {a.method}, world {a.world}, {a.epochs} epochs, backend {backend}, "
          f"DDS domain {cfg['dds']['domain_id']}, results {Path(cfg['results_dir']) / cfg['run_id']}", flush=True)
    if backend == "docker":
        from commlab.testbed.docker_run import run_ddp
        run_ddp([cfg] * a.world, a.profile, Path(cfg["results_dir"]))
        return 0
    return run_local(cfg, a.world)


if __name__ == "__main__":
    sys.exit(main())
