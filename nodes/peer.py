"""Reference peer: `RANK=0 python nodes/peer.py CONFIG.json` (kind gloo: one DDP rank over gloo;
kind centralized: the one process on the union of the data). docs/peers.md.

Exit codes: 0 trained to the end, 2 bad config or environment, 1 training failed (a lost peer,
a missing dataset...); the message names the problem.
"""
from __future__ import annotations

import os
import sys

from commlab.config.schema import ConfigError, load_from_argv
from commlab.peers.config import PeerConfig, load_peer_config
from commlab.runs.process_exit import exit_now


def load(path: str) -> tuple[PeerConfig, int]:
    """The config and this process's RANK (0 when unset)."""
    cfg = load_peer_config(path)
    rank = int(os.environ.get("RANK", "0"))
    if not 0 <= rank < cfg.world:
        raise ConfigError(f"RANK={rank}: must be in 0..{cfg.world - 1}")
    return cfg, rank


def main(argv: list[str]) -> int:
    loaded = load_from_argv("peer", "[RANK=r] peer.py CONFIG.json", argv, load)
    if loaded is None:
        return 2
    cfg, rank = loaded
    from commlab.data import DatasetError
    try:
        if cfg.kind == "centralized":
            from commlab.peers.centralized import run_centralized
            run_centralized(cfg)
        else:
            from commlab.peers.gloo import run_gloo
            run_gloo(cfg, rank)
    except ConfigError as e:
        print(f"peer {rank}: config error: {e}", file=sys.stderr, flush=True)
        return 2
    except (DatasetError, RuntimeError, OSError) as e:  # gloo reports a lost peer as RuntimeError
        print(f"peer {rank}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr,
              flush=True)
        return 1
    return 0


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
