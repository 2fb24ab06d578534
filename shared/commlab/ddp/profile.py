"""Per-step profile: one steps-rank<r>.csv row a step, and a summary of the last N steps printed
while training so a user sees communication versus computation as it happens."""
from __future__ import annotations

from typing import Callable

from commlab.output.run_folder import CsvTable
from commlab.output.tables import COLUMNS

SUMMED = tuple(c for c in COLUMNS["steps"] if c not in ("step", "epoch", "rank"))  # averaged in the summary


class StepProfile:
    def __init__(self, table: CsvTable, every: int, printer: Callable[[str], None] | None = None):
        self.table, self.every, self.printer = table, every, printer
        self._sums = dict.fromkeys(SUMMED, 0.0)
        self._count = 0

    def record(self, row: dict) -> None:
        self.table.append(row)
        for k in SUMMED:
            self._sums[k] += row[k]
        self._count += 1
        if self._count == self.every:
            if self.printer is not None:
                self.printer(self.summary(row["step"], row["epoch"]))
            self._sums = dict.fromkeys(SUMMED, 0.0)
            self._count = 0

    def summary(self, step: int, epoch: int) -> str:
        m = {k: v / self._count for k, v in self._sums.items()}
        ms = lambda k: f"{1000 * m[k]:.1f}"  # noqa: E731
        return (f"step {step} epoch {epoch}: {ms('step_time_s')} ms/step (compute {ms('compute_time_s')}, "
                f"comm wait {ms('comm_time_s')}, compress {ms('compress_time_s')}, decompress "
                f"{ms('decompress_time_s')}) | sent {m['bytes_sent'] / 1e3:.1f} kB/step, received "
                f"{m['bytes_received'] / 1e3:.1f} kB/step | density {m['density']:.4f} | loss {m['train_loss']:.4f}")
