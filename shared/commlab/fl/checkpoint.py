"""Atomic per-round checkpoints: weights, round, strategy state and config in one .npz file.

Written atomically (commlab.metrics.write_atomic), so a crash at any moment leaves either the
previous checkpoint or the new one, never half a file. No pickle: arrays plus a JSON string.
"""
from __future__ import annotations

import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from commlab.metrics import write_atomic

_NAME = re.compile(r"^round-(\d{6})\.npz$")
_STRATEGY = "strategy."


@dataclass
class Checkpoint:
    round: int
    weights: np.ndarray
    strategy_state: dict[str, np.ndarray]
    config: dict[str, Any]


def save_checkpoint(directory: Path, ckpt: Checkpoint, keep: int = 1) -> Path:
    """Write round-<r>.npz atomically, then delete all but the newest `keep` checkpoints."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"round-{ckpt.round:06d}.npz"
    meta = json.dumps({"round": ckpt.round, "config": ckpt.config}, default=str).encode()
    arrays = {"weights": ckpt.weights, "meta": np.frombuffer(meta, dtype=np.uint8)}
    arrays.update({_STRATEGY + k: v for k, v in ckpt.strategy_state.items()})
    write_atomic(path, lambda f: np.savez(f, **arrays))
    for old in list_checkpoints(directory)[:-keep]:
        old.unlink()
    return path


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoints in `directory`, oldest first (temporary files are ignored)."""
    return sorted(p for p in directory.iterdir() if _NAME.match(p.name))


def load_checkpoint(path: Path) -> Checkpoint:
    """Load a checkpoint file, or the newest one in a directory. Raises ValueError naming the file."""
    if path.is_dir():
        found = list_checkpoints(path)
        if not found:
            raise ValueError(f"{path}: no round-NNNNNN.npz checkpoint in this directory")
        path = found[-1]
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(z["meta"].tobytes())
            return Checkpoint(round=int(meta["round"]), weights=z["weights"].astype(np.float32, copy=True),
                              strategy_state={k[len(_STRATEGY):]: z[k].copy() for k in z.files if k.startswith(_STRATEGY)},
                              config=meta["config"])
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
        raise ValueError(f"{path}: not a readable checkpoint ({e})") from None
