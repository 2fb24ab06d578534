"""A node's resident memory by phase, and the exchange's share of it against its target.

The target: everything a node does to receive, decode, aggregate, encode, send and store models
(the exchange) stays within EXCHANGE_TARGET_X times the model's fp32 size above the node's idle
resident memory. Training is the workload's, not the exchange's: its activations (tens of times
the model's size for a CNN at batch 64) are recorded as their own phase, `train`, and held to no
target. Every other phase counts, the controller's evaluation included (it trains nothing).

Exact phase figures are a choice (FL config `memory_phases`, `fl.run --memory-phases`), because
they cost time. With it, at every phase boundary the codecs' work arrays are dropped
(codecs.scratch.release_buffers) and the memory freed so far goes back to the kernel (malloc_trim):
the allocator keeps freed blocks below its mmap threshold (which grows to 32 MB as large blocks are
freed), and all of them where a process asked it to (codecs.scratch.retain_freed_memory), so
without it every phase would stay resident at the peak of all earlier ones, training's activations
included. A phase's peak is then what the process holds during it, and so is its resident memory.
The cost: every round's training faults its activations in again, and every exchange phase its
frames, on the cores the training shares; on loopback that made DDS FL rounds slower than
Flower's, whose nodes hand nothing back. Without it a phase's peak is an upper bound (it includes
what earlier phases freed and the allocator kept), and no figure against the exchange's target is
given.

Phases are spans of time in one process: DDS reader threads reassemble incoming messages
whenever they arrive, so what they hold counts in whatever phase is running then (mostly
`receive`, the time outside any named phase: waiting, reassembling, the DDS traffic).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
import json
from pathlib import Path
from typing import Any

EXCHANGE_TARGET_X = 3.0
WORKLOAD_PHASES = frozenset({"train"})
OUTSIDE = "receive"  # the time outside every named phase


def status_bytes(field: str) -> int:
    """A memory figure of this process from /proc/self/status (VmRSS, VmHWM), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024  # "VmHWM:   123456 kB"
    raise KeyError(f"/proc/self/status has no {field}")


def exchange_figures(idle: int, phase_peaks: dict[str, int], model_bytes: int) -> dict[str, Any]:
    """Each phase's peak above idle in models (fp32 sizes), and the largest of the exchange's
    phases (every phase but WORKLOAD_PHASES) against EXCHANGE_TARGET_X; empty without a model size."""
    if model_bytes <= 0:
        return {}
    above = {name: round((peak - idle) / model_bytes, 3) for name, peak in phase_peaks.items()}
    exchange = [x for name, x in above.items() if name not in WORKLOAD_PHASES]
    worst = max(exchange) if exchange else None
    return {"model_fp32_bytes": model_bytes, "phase_above_idle_x_model": above,
            "workload_phases": sorted(WORKLOAD_PHASES), "exchange_target_x_model": EXCHANGE_TARGET_X,
            "exchange_above_idle_x_model": worst,
            "exchange_within_target": None if worst is None else worst <= EXCHANGE_TARGET_X}


class MemoryWatch:
    """This process's resident memory: ``idle`` (VmRSS when it is made: the node is set up, its
    model and data loaded, nothing sent yet) and the high-water mark of each named phase.
    ``with watch.phase("encode"):``; a phase inside another interrupts it (the outer one goes on
    after). Each phase starts by resetting VmHWM (writing 5 to /proc/self/clear_refs, Linux >= 4.0),
    which also lowers ru_maxrss: the overall peak is kept here. Where the reset is refused, only
    idle and the overall peak are recorded. `model_bytes`: the model's fp32 size, the unit of
    the exchange's target (0: no figures against it). `exact`: hand freed memory back at every
    phase boundary (the module's docstring); otherwise phase peaks are upper bounds, and no
    figures against the target are given."""

    def __init__(self, model_bytes: int = 0, exact: bool = False) -> None:
        # imported here: the processes that only write a run folder (the peer launchers) load no codecs (numba)
        from commlab.codecs.scratch import release_freed_memory
        self.model_bytes, self.exact = model_bytes, exact
        release_freed_memory()  # what setting up the node freed is not part of its idle footprint
        self.idle, self.overall = status_bytes("VmRSS"), status_bytes("VmHWM")
        self.peaks: dict[str, int] = {}
        self.rises: dict[str, int] = {}  # a phase's peak above the RSS it started from
        self.open: list[str] = []  # the phases running, innermost last
        self.resettable = self._reset()
        self.start = self.idle

    def _reset(self) -> bool:
        try:
            Path("/proc/self/clear_refs").write_text("5")
            return True
        except OSError:
            return False

    def _close(self, name: str) -> None:
        hwm = status_bytes("VmHWM")
        self.overall = max(self.overall, hwm)
        if self.resettable:
            self.peaks[name] = max(self.peaks.get(name, 0), hwm)
            self.rises[name] = max(self.rises.get(name, 0), hwm - self.start)
        if self.exact:
            from commlab.codecs.scratch import release_buffers, release_freed_memory
            release_buffers()  # the codecs' work arrays: this thread encodes a model once a round
            release_freed_memory()
        if self.resettable:
            self._reset()
            self.start = status_bytes("VmRSS")

    def _current(self) -> str:
        return self.open[-1] if self.open else OUTSIDE

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self._close(self._current())
        self.open.append(name)
        try:
            yield
        finally:
            self._close(self.open.pop())

    def record(self) -> dict[str, Any]:
        """What transport-<node>.json keeps: idle, the overall peak, each phase's peak, its rise
        above the resident memory it started from (memory freed by an earlier phase and kept by
        the allocator stays resident: the rise is what the phase itself added), and the figures
        against the exchange's target (exchange_figures, only when the phases were `exact`)."""
        self._close(self._current())
        figures = exchange_figures(self.idle, self.peaks, self.model_bytes) if self.exact else {}
        return {"idle_rss_bytes": self.idle, "peak_rss_bytes": self.overall, "phase_peak_rss_bytes": self.peaks,
                "phase_rise_rss_bytes": self.rises, "memory_phases_exact": self.exact, **figures}


def run_memory(run_dir: Path) -> dict[str, float | None]:
    """A run's figures against the target, from its transport-<node>.json files: the controller's
    largest exchange phase, the clients' largest exchange phase and largest training phase, each
    in models above idle (None: no node of that kind recorded it)."""
    controller: list[float] = []
    clients: list[float] = []
    training: list[float] = []
    for path in sorted(Path(run_dir).glob("transport-*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a node that died while writing it
        if (x := doc.get("exchange_above_idle_x_model")) is not None:
            (controller if path.stem == "transport-controller" else clients).append(x)
        if (x := doc.get("phase_above_idle_x_model", {}).get("train")) is not None:
            training.append(x)
    return {"controller_exchange_x": max(controller, default=None), "client_exchange_x": max(clients, default=None),
            "client_train_x": max(training, default=None)}
