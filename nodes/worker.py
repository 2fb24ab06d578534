"""DDP worker: `WORLD=3 RANK=0 python nodes/worker.py experiments/worker.conf.json`.

Exit codes: 0 trained to the end, 2 bad config or environment, 1 training failed (a lost peer,
a malformed frame, a missing dataset...); the message names the problem.
"""
from __future__ import annotations

import sys

from commlab.config.schema import ConfigError, load_from_argv
from commlab.ddp.config import load_worker_config, world_and_rank
from commlab.runs.process_exit import exit_now


def main(argv: list[str]) -> int:
    loaded = load_from_argv("worker", "WORLD=N RANK=r worker.py CONFIG.json", argv,
                            lambda path: (load_worker_config(path), *world_and_rank()))
    if loaded is None:
        return 2
    cfg, world, rank = loaded
    from commlab.codecs import CodecError
    from commlab.codecs.scratch import retain_freed_memory
    from commlab.data import DatasetError
    from commlab.dds import DdsError, exit_cleanly_on_sigterm
    from commlab.ddp.train import run_worker
    from commlab.ddp.frame_allgather import FrameError
    exit_cleanly_on_sigterm()
    retain_freed_memory()  # frames and gradients: the same large sizes every step (scratch.py)
    try:
        run_worker(cfg, world, rank)
    except ConfigError as e:
        print(f"worker {rank}: config error: {e}", file=sys.stderr, flush=True)
        return 2
    except (CodecError, DatasetError, DdsError, FrameError) as e:
        print(f"worker {rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
