"""Per-rank checkpoint at each epoch end: model, optimizer and exchange state (the DGC memory
holds each rank's own residuals, so every rank saves its own file).

checkpoint-rank<r>.pt is written atomically with the SHA-256 of its content in a header line
(commlab.output.checksummed); before it is replaced, the current one is verified and copied to
checkpoint-rank<r>.prev.pt, so a crash or failed write at any point leaves the last good checkpoint
in one of the two. Loading checks the hash BEFORE torch.load: a missing, empty, truncated or
altered file, or one that does not fit the model, is one ConfigError line naming the file.
On resume the ranks compare their (epoch, step) (`agree_on_resume_point`) and refuse to start
unless all are equal."""
from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from commlab.config.schema import ConfigError
from commlab.output.checksummed import check_checksummed, read_checksummed, write_checksummed

NO_RESUME = (-1, 0)     # the point of a rank starting afresh (no resume_from)
UNUSABLE = (-2, -1)     # the point of a rank whose checkpoint could not be loaded
_POINT = struct.Struct("<qq")


def as_tensors(state: Any) -> Any:
    """numpy arrays inside nested dicts and lists -> tensors: checkpoints load with
    torch.load(weights_only=True), which takes tensors but no numpy arrays."""
    return _map(state, np.ndarray, lambda a: torch.from_numpy(a.copy()))


def as_arrays(state: Any) -> Any:
    """The inverse of as_tensors, for the numpy-side state of compressors and memories."""
    return _map(state, torch.Tensor, lambda t: t.numpy().copy())


def _map(obj: Any, kind: type, convert: Callable[[Any], Any]) -> Any:
    if isinstance(obj, dict):
        return {k: _map(v, kind, convert) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_map(v, kind, convert) for v in obj]
    return convert(obj) if isinstance(obj, kind) else obj


def previous_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}.prev{path.suffix}")


def save_checkpoint(path: Path, epoch: int, step: int, model: torch.nn.Module, exchange_state: dict) -> None:
    """Keep the current checkpoint (if it verifies) as the previous one, write the new one
    atomically and read it back; a failure at any step raises and leaves a good checkpoint."""
    state = {"epoch": epoch, "step": step, "model": model.state_dict(), "exchange": exchange_state}
    try:
        current = read_checksummed(path)
    except ConfigError:  # none yet (first epoch), or damaged: keep the previous one as it is
        current = None
    if current is not None:
        write_checksummed(previous_path(path), current)
    write_checksummed(path, lambda f: torch.save(state, f))
    check_checksummed(path)


def load_checkpoint(path: Path) -> dict:
    """The checkpoint's state; ConfigError "<path>: <problem>" (hash checked before unpickling)."""
    payload = read_checksummed(path)
    try:
        state = torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure is a bad file
        raise ConfigError(f"{path}: not a readable checkpoint ({_one_line(e)})") from None
    missing = {"epoch", "step", "model", "exchange"} - set(state if isinstance(state, dict) else ())
    if missing:
        raise ConfigError(f"{path}: not a worker checkpoint (lacks {', '.join(sorted(missing))})")
    return state


def restore_checkpoint(path: Path, model: torch.nn.Module, exchange) -> tuple[int, int]:
    """Load `path` into the model and the exchange; (epoch, step) it was written after. The error
    for a damaged file names the previous checkpoint too, when there is one to fall back to by hand."""
    try:
        state = load_checkpoint(path)
    except ConfigError as e:
        prev = previous_path(path)
        if not prev.exists():
            raise
        raise ConfigError(f"{e}; the previous checkpoint is kept in {prev.name} (rename it to {path.name} "
                          "to resume from it)") from None
    try:
        model.load_state_dict(state["model"])
        exchange.load_state_dict(state["exchange"])
    except Exception as e:  # noqa: BLE001 - wrong model, method or shapes
        raise ConfigError(f"{path}: does not fit this run ({_one_line(e)})") from None
    return int(state["epoch"]), int(state["step"])


def check_resume_points(points: list[tuple[int, int]]) -> None:
    """Every rank must resume from the same (epoch, step); ConfigError naming each rank's otherwise."""
    if len(set(points)) == 1 and points[0] != UNUSABLE:
        return

    def describe(p: tuple[int, int]) -> str:
        return {NO_RESUME: "no checkpoint", UNUSABLE: "unusable checkpoint"}.get(p, f"epoch {p[0]} step {p[1]}")
    raise ConfigError("ranks disagree on where to resume: "
                      + ", ".join(f"rank {r} {describe(p)}" for r, p in enumerate(points)))


def agree_on_resume_point(group, point: tuple[int, int], problem: ConfigError | None = None) -> None:
    """One allgather of every rank's (epoch, step) right after the barrier, so that all ranks refuse
    together; this rank's own `problem` (its checkpoint failed to load) is raised first."""
    points = [_POINT.unpack(p) for p in group.allgather("resume-point", _POINT.pack(*point))]
    if problem is not None:
        raise problem
    check_resume_points(points)


def _one_line(e: BaseException, limit: int = 300) -> str:
    text = f"{type(e).__name__}: {' '.join(str(e).split())}"
    return text if len(text) <= limit else text[:limit - 3] + "..."
