"""The stop conditions the runner checks while a cell runs (a sweep file's `stop` keys that are not
launcher flags): the run diverged (`test_loss_above`: its last round's test loss above the bound,
or not a number), which decides its result, so it ends ok; or the host ran short of memory
(`free_memory_below_mb`), which ends it failed, to be rerun with --retry-failed.

Why the runner and not the launcher: a diverged model's next round can only end at the clients'
idle timeout (every delta from it is non-finite, none is sent), and memory is the machine's, not
the run's.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from commlab.report.runs import RunError, read_tables


@dataclass(frozen=True)
class Ended:
    """Why a watched cell was ended, and whether that is its result (ok) or a failure."""
    reason: str
    ok: bool


def last_test_losses(run_dir: Path) -> list[float]:
    """The test loss of every round written so far (none before the first, or while unreadable)."""
    try:
        rounds = read_tables(run_dir, "rounds", growing=True)
    except (RunError, OSError, ValueError):
        return []
    return [] if rounds is None else [float(x) for x in rounds["test_loss"]]


def watcher(watch: dict[str, float], run_dir: Path, memory_mb: Callable[[], float]) -> Callable[[], Ended | None]:
    """A check for one running cell: why to end it now, or None."""
    def check() -> Ended | None:
        bound = watch.get("test_loss_above")
        if bound is not None:
            losses = last_test_losses(run_dir)
            if losses and not losses[-1] <= bound:  # NaN too
                return Ended(f"diverged, stopped after round {len(losses)}", ok=True)
        floor = watch.get("free_memory_below_mb")
        if floor is not None and memory_mb() < floor:
            return Ended(f"stopped: host memory below {floor:g} MB", ok=False)
        return None
    return check if watch else (lambda: None)
