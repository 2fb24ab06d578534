"""Warnings about what a sender without a key can produce at any rate (junk chunks, forged
announcements): per kind (e.g. the reason a chunk was refused), one line at most every `every_s`,
which says how many more were dropped since, so a flood of junk never becomes a flood of log lines.
The counters in CommStats count each one."""
from __future__ import annotations

import logging
import time
from typing import Callable


class ThrottledWarning:
    def __init__(self, log: logging.Logger, every_s: float = 10.0, clock: Callable[[], float] = time.monotonic):
        self.log, self.every_s, self.clock = log, every_s, clock
        self._quiet: dict[str, tuple[float, int]] = {}  # kind -> (quiet until, dropped since); kinds are few

    def __call__(self, kind: str, msg: str, *args: object) -> None:
        now = self.clock()
        until, dropped = self._quiet.get(kind, (float("-inf"), 0))
        if now < until:
            self._quiet[kind] = (until, dropped + 1)
            return
        if dropped:
            msg += f" ({dropped} more dropped in the last {self.every_s:.0f}s)"
        self._quiet[kind] = (now + self.every_s, 0)
        self.log.warning(msg, *args)
