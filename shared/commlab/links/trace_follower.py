"""The thread that plays a rate trace (commlab.links.trace) on the nodes' links while a run goes."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Sequence

from .profiles import set_rate
from .spec import LinkError
from .trace import Trace, append_rates


class TraceFollower:
    """A thread that sets each node's tbf rate as the trace says (tc through prefix(node)) and
    logs every change; one failed change is logged and the node keeps its rate."""

    def __init__(self, trace: Trace, prefix: Callable[[str], Sequence[str]], nodes: list[str], log_path: Path,
                 log: Callable[[str], None] = print):
        self.trace, self.prefix, self.nodes, self.log_path, self.log = trace, prefix, nodes, log_path, log
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="trace-follower", daemon=True)

    def __enter__(self) -> "TraceFollower":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _follow(self) -> None:
        start = time.monotonic()
        current = {n: self.trace.rate_at(n, 0.0) for n in self.nodes}
        for t in self.trace.change_times():
            if self._stop.wait(max(0.0, start + t - time.monotonic())):
                return
            changed = {}
            for node in self.nodes:
                rate = self.trace.rate_at(node, t)
                if rate == current[node]:
                    continue
                try:
                    set_rate(rate, "eth0", prefix=self.prefix(node))
                    current[node] = changed[node] = rate
                except LinkError as e:
                    self.log(f"[trace] {node}: rate NOT changed to {rate / 1e6:g} Mbit/s at {t:g} s: {e}")
            if changed:
                append_rates(self.log_path, t, changed)
