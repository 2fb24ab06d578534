"""A link's shape (rate, delay, jitter, loss) and LinkError, shared by the profiles and the rate traces."""
from __future__ import annotations

import re
from dataclasses import dataclass

_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
RATE = r"(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit)"  # a tc rate


class LinkError(ValueError):
    """Unknown profile, malformed profile entry, or tc refused a shaping command."""


@dataclass(frozen=True)
class LinkSpec:
    rate: str                    # tc rate, e.g. "10mbit"
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0

    @property
    def rate_bps(self) -> float:
        m = re.fullmatch(RATE, self.rate.strip().lower())
        if not m:
            raise LinkError(f"rate {self.rate!r}: expected a number with bit, kbit, mbit or gbit")
        return float(m.group(1)) * _UNITS[m.group(2)]

    @property
    def needs_netem(self) -> bool:
        return self.delay_ms > 0 or self.jitter_ms > 0 or self.loss_pct > 0
