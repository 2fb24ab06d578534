"""Each running cell's own progress, shown under the sweep's bar: how many rounds (FL) or epochs
(DDP, the centralized peer) its run folder holds, of how many its flags ask for. Read from the
tables the nodes append to (only whole lines), so it needs nothing from the launcher; a line
changes only when a unit is done, so a log gets a new block per round, not per poll.

    fl-12d4855d88f5 codec=int8, seed 1: round 2/3
"""
from __future__ import annotations

from pathlib import Path

from .spec import Cell

# launcher -> (unit, the table with a row per unit, the flag with the number of units)
UNITS = {"fl": ("round", "rounds.csv", "rounds"), "ddp": ("epoch", "epochs-rank0.csv", "epochs"),
         "centralized": ("epoch", "epochs-rank0.csv", "epochs")}


def rows_written(table: Path) -> int:
    """Complete rows after the header (0 while the file is missing or has only its header)."""
    try:
        data = table.read_bytes()
    except OSError:
        return 0
    return max(0, data.count(b"\n") - 1)


def cell_line(cell: Cell, label: str, run_dir: Path) -> str:
    """`<run id> <label>, seed <s>: <unit> <done>/<total>` (`<unit>s <done>` when the cell's flags
    leave the total to the launcher's default)."""
    unit, table, flag = UNITS[cell.launcher]
    total = dict(cell.flags).get(flag)
    done = rows_written(run_dir / table)
    position = f"{unit} {done}/{total}" if total is not None else f"{unit}s {done}"
    return f"{cell.run_id} {label}, seed {cell.seed}: {position}"
