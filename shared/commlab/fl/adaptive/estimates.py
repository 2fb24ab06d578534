"""The controller's per-client link and compute estimates, smoothed over the reports of accepted updates."""
from __future__ import annotations

import math
from typing import Sequence


class LinkEstimates:
    """The controller's smoothed per-client estimates from ClientUpdate reports: compute seconds
    per sample, the link rate (cap) and the efficiency (payload goodput / link rate). A report with
    a negative, NaN/Inf or zero value is rejected (the reason is returned); a client without a
    valid estimate gets the probe setting."""

    def __init__(self, smoothing: float = 0.5):
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        self.smoothing = smoothing
        self.compute_s_per_sample: dict[str, float] = {}
        self.cap_Bps: dict[str, float] = {}
        self.efficiency: dict[str, float] = {}

    def _ewma(self, table: dict[str, float], key: str, value: float) -> None:
        old = table.get(key)
        table[key] = value if old is None else (1 - self.smoothing) * old + self.smoothing * value

    def report(self, client: str, compute_s_per_sample: float, goodput_Bps: float, rate_Bps: float,
               at_link_rate: bool) -> str | None:
        """Fold one report in; None when accepted, else why not. `goodput_Bps` is the payload
        goodput of the client's previous upload, `rate_Bps` the link rate it was shaped to (0: not
        shaped, the goodput is all there is), `at_link_rate` False when the allocation held it
        below its own link (then the goodput says nothing about the link, only the efficiency) or
        when it has not uploaded yet."""
        values = (("compute_s_per_sample", compute_s_per_sample), ("goodput_Bps", goodput_Bps), ("rate_Bps", rate_Bps))
        for name, v in values:
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                return f"{name} must be a finite number >= 0, got {v!r}"
        if compute_s_per_sample == 0:
            return "compute_s_per_sample must be > 0, got 0"
        if at_link_rate and goodput_Bps == 0:
            return "goodput_Bps must be > 0 after an upload, got 0"
        if client in self.cap_Bps:
            self._ewma(self.compute_s_per_sample, client, float(compute_s_per_sample))
        else:  # still probing: the newest only (the first round carries one-time costs, e.g. warm-up)
            self.compute_s_per_sample[client] = float(compute_s_per_sample)
        if goodput_Bps > 0 and rate_Bps > 0:
            self._ewma(self.efficiency, client, min(1.0, max(0.05, goodput_Bps / rate_Bps)))
        if at_link_rate:
            self._ewma(self.cap_Bps, client, float(rate_Bps if rate_Bps > 0 else goodput_Bps))
        return None

    def forget(self, client: str) -> None:
        """Back to the probe setting for this client (its reports were bad)."""
        for table in (self.compute_s_per_sample, self.cap_Bps, self.efficiency):
            table.pop(client, None)

    def ready(self, clients: Sequence[str]) -> bool:
        return all(c in self.compute_s_per_sample and c in self.cap_Bps for c in clients)
