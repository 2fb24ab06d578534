"""Atomic per-round checkpoints: weights, round, strategy state, the early stop's progress and config
in one .npz file.

Written atomically with the SHA-256 of the archive in a header line (commlab.output.checksummed), so a
crash at any moment leaves either the previous checkpoint or the new one, never half a file; older
checkpoints are deleted only once the new one reads back intact. Loading checks the hash before
parsing: an empty, truncated, altered or header-less file is one ConfigError naming the file.
No pickle: arrays plus a JSON string.
"""
from __future__ import annotations

import io
import json
import math
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from commlab.config.schema import ConfigError
from commlab.output.checksummed import check_checksummed, read_checksummed, write_checksummed

_NAME = re.compile(r"^round-(\d{6})\.npz$")
_STRATEGY = "strategy."


@dataclass
class Checkpoint:
    round: int
    weights: np.ndarray
    strategy_state: dict[str, np.ndarray]
    config: dict[str, Any]
    # What the early stop (config `stop`) counts, so a resumed run keeps counting: the summed round
    # times and the last test accuracy. Empty in checkpoints written before it was kept.
    progress: dict[str, float] = field(default_factory=dict)


PROGRESS_KEYS = ("round_time_sum_s", "last_accuracy")


def save_checkpoint(directory: Path, ckpt: Checkpoint, keep: int = 1) -> Path:
    """Write round-<r>.npz atomically, check that it reads back intact, then delete all but the
    newest `keep` checkpoints (a failed write raises before anything is deleted)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"round-{ckpt.round:06d}.npz"
    meta = json.dumps({"round": ckpt.round, "config": ckpt.config, "progress": ckpt.progress}, default=str).encode()
    arrays = {"weights": ckpt.weights, "meta": np.frombuffer(meta, dtype=np.uint8)}
    arrays.update({_STRATEGY + k: v for k, v in ckpt.strategy_state.items()})
    write_checksummed(path, lambda f: np.savez(f, **arrays))
    check_checksummed(path)
    for old in list_checkpoints(directory)[:-keep]:
        old.unlink()
    return path


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoints in `directory`, oldest first (temporary files are ignored)."""
    return sorted(p for p in directory.iterdir() if _NAME.match(p.name))


def load_checkpoint(path: Path, weights_size: int | None = None) -> Checkpoint:
    """Load a checkpoint file, or the newest one in a directory (never an older one in its place:
    if the newest is damaged, the error names it and the previous one to resume from instead).
    `weights_size`: the model's parameter count, checked. Raises ConfigError naming the file."""
    previous = None
    if path.is_dir():
        found = list_checkpoints(path)
        if not found:
            raise ConfigError(f"{path}: no round-NNNNNN.npz checkpoint in this directory")
        path, previous = found[-1], (found[-2] if len(found) > 1 else None)
    try:
        ckpt = _parse(read_checksummed(path), path)
    except ConfigError as e:
        if previous is None:
            raise
        raise ConfigError(f"{e}; the previous checkpoint {previous.name} is kept: set init_path to it "
                          "to resume from there") from None
    if weights_size is not None and ckpt.weights.size != weights_size:
        raise ConfigError(f"{path}: holds {ckpt.weights.size} weights, the model has {weights_size}")
    return ckpt


def _parse(payload: bytes, path: Path) -> Checkpoint:
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as z:
            meta = json.loads(z["meta"].tobytes())
            return Checkpoint(round=int(meta["round"]), weights=z["weights"].astype(np.float32, copy=True),
                              strategy_state={k[len(_STRATEGY):]: z[k].copy() for k in z.files if k.startswith(_STRATEGY)},
                              config=meta["config"], progress=_progress(meta.get("progress", {})))
    except (OSError, KeyError, ValueError, TypeError, zipfile.BadZipFile) as e:
        raise ConfigError(f"{path}: not a readable checkpoint ({' '.join(str(e).split())})") from None


def _progress(raw: Any) -> dict[str, float]:
    if not isinstance(raw, dict) or set(raw) - set(PROGRESS_KEYS):
        raise ValueError(f"progress must be a mapping of {', '.join(PROGRESS_KEYS)}, got {raw!r}")
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"progress {key} must be a finite number >= 0, got {value!r}")
    return {k: float(v) for k, v in raw.items()}
