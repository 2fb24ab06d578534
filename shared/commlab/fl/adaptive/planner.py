"""The controller's side of the adaptive allocation: each round's bits and rates per client, from
the estimates the round's accepted updates report."""
from __future__ import annotations

from typing import Sequence

from commlab.codecs import get_codec

from .allocation import Allocation, allocate, allocate_rates
from .bits import BITS, check_size_estimates, levels
from .estimates import LinkEstimates
from .section import PROBE_ROUNDS, AdaptiveSection


class Planner:
    """The controller's side: per round, the bits and rates of every client (TrainCmd fields);
    the reports of the round's accepted updates folded into the estimates."""

    def __init__(self, section: AdaptiveSection, clients: Sequence[str], numel: int, bucket: int = 512,
                 log=print, family: str = "qsgd"):
        self.section, self.clients, self.numel, self.bucket, self.log = section, list(clients), numel, bucket, log
        self.family = family  # the run codec's family (Codec.family)
        # Frames sized by their content (qsgdz): the clients report their sizes at every bits.
        self.sizes_reported = get_codec(family).sized_by_content
        self.size_estimates: dict[str, dict[int, int]] = {}  # each client's frame bytes per bits
        self.estimates = LinkEstimates(section.smoothing)
        self._reports: dict[str, object] = {}
        self.frame_bytes: dict[str, int] = {}  # each client's last accepted frame (rates-only joint)
        self.last: Allocation | None = None

    def plan(self, rnd: int, subset_size: int) -> tuple[dict[str, int], dict[str, float]]:
        """(bits, rates in payload bytes/s) per client name; a client missing from rates uploads
        over its own link (probe)."""
        s = self.section
        if s.policy == "equal":  # the same probe rounds as joint (own links), so runs compare round by round
            rates = {} if rnd <= PROBE_ROUNDS else {c: s.total_Bps / len(self.clients) for c in self.clients}
            return ({} if s.fixed_bits is None else {c: s.fixed_bits for c in self.clients}), rates
        ready = [c for c in self.clients if self.estimates.ready([c]) and (s.sets_bits or c in self.frame_bytes)]
        bits = {c: s.probe_bits for c in self.clients} if s.sets_bits else {}
        if not ready:
            what = f"{self.family}{levels(s.probe_bits)}" if s.sets_bits else "the run's codec"
            self.log(f"adaptive round {rnd}: probe, {what} over each client's own link")
            return bits, {}
        est = self.estimates
        compute = [est.compute_s_per_sample[c] * subset_size for c in ready]
        caps, total = [est.cap_Bps[c] for c in ready], s.total_Bps * len(ready) / len(self.clients)
        efficiency = [est.efficiency.get(c, 1.0) for c in ready]
        try:
            if s.sets_bits:
                alloc = allocate(compute, caps, total, self.numel, bucket=self.bucket, beta=s.beta,
                                 bits=range(s.min_bits, max(BITS) + 1), efficiency=efficiency, family=self.family,
                                 frame_bytes=[self.size_estimates.get(c) for c in ready])
            else:
                alloc = allocate_rates(compute, caps, total, [self.frame_bytes[c] for c in ready], efficiency)
        except ValueError as e:  # estimates were checked one by one; never stop the run over them
            self.log(f"adaptive round {rnd}: no allocation ({e}); probe setting for everyone")
            return bits, {}
        self.last = alloc
        bits.update(zip(ready, alloc.bits))
        rates = dict(zip(ready, alloc.rates_Bps))
        self.log(f"adaptive round {rnd}: bits {[bits.get(c, 'codec') for c in self.clients]}, rates "
                 f"{[round(rates[c] * 8e-6, 2) if c in rates else 'link' for c in self.clients]} Mbit/s, "
                 f"T* {alloc.round_time_s:.1f}s x R {alloc.rounds_factor:.3f}")
        return bits, rates

    def offer(self, msg) -> None:
        """Keep the report of an update; it counts once the collector accepted the update."""
        self._reports[(msg.round, msg.client_id)] = msg

    def observe(self, rnd: int, participants: Sequence[str]) -> None:
        for c in participants:
            msg = self._reports.get((rnd, c))
            if msg is None or msg.num_samples <= 0:
                continue
            self.frame_bytes[c] = len(msg.payload)
            per_sample = msg.compute_s / msg.num_samples
            problem = self.estimates.report(c, per_sample, msg.prev_upload_Bps, msg.prev_rate_Bps,
                                            msg.prev_at_link_rate)
            if problem is None and self.sizes_reported and msg.frame_bytes_by_bits:
                sizes = check_size_estimates(msg.frame_bytes_by_bits, self.numel, self.bucket, self.family)
                problem = sizes if isinstance(sizes, str) else None
                if problem is None:
                    self.size_estimates[c] = sizes
            if problem is not None:
                self.estimates.forget(c)
                self.size_estimates.pop(c, None)
                self.log(f"adaptive round {rnd}: bad report from {c} ({problem}): back to the probe setting")
        self._reports = {k: v for k, v in self._reports.items() if k[0] > rnd}
