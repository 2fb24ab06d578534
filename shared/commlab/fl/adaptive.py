"""Joint per-client quantization bits and uplink bandwidth (docs/adaptive.md), from measured inputs.

Each round the controller knows, per client m, its compute time t_m (measured seconds per sample
x samples per round), the rate c_m of its own link and the efficiency e_m (payload goodput / link
rate), both measured from its uploads (bytes/s). It picks
bits q_m in 1..8 (qsgd with s = 2^q - 1 levels) and a rate b_m (bytes/s) with sum b_m <= B,
b_m <= c_m, to minimise

    J(q, b) = T(q, b) * R(q),   T = max_m (t_m + P(q_m) / b_m),   R = 1 + beta * sum_m w_m^2 phi(q_m)

P(q) is the qsgd frame size (client m needs P / e_m of link capacity): exact for the fixed-width
`qsgd<s>` frames, and for the entropy-coded `qsgdz<s>`, whose size depends on the update, each
client's own estimate from its last update (`frame_size_estimates`); phi(q) = min(d/s^2, sqrt(d)/s) QSGD's variance bound (d the
bucket size) and w_m the FedAvg weight. For fixed q the best round time T*(q) is the root of
sum_m P_m / (T - t_m) = B (closed-form b_m = P_m / (T - t_m)), raised to max_m(t_m + P_m/c_m)
by the link caps; `allocate` evaluates T*(q) R(q) for every bit vector (exact) and returns the best.

    alloc = allocate([2.0, 1.0, 4.0], [0.25e6, 1.25e6, 2.5e6], total_Bps=2e6, numel=1_663_370)
    alloc.bits, alloc.rates_Bps, alloc.round_time_s, alloc.objective
"""
from __future__ import annotations

import functools
import itertools
import math
import os
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from commlab.codecs import Codec, CodecError, get_codec, wire
from commlab.codecs.base import codec_class

BITS = tuple(range(1, 9))
MAX_EXACT = 8 ** 5  # bit vectors evaluated exactly; more clients: local search from the best uniform vector


def levels(bits: int) -> int:
    """qsgd levels s for q bits: s = 2^q - 1, the largest level that fits q bits."""
    return 2 ** bits - 1


def takes_bits(codec: str) -> bool:
    """Whether the allocation can set the bits of codec `codec`: it takes qsgd's `levels`."""
    try:
        return codec_class(codec)[0].takes("levels")
    except CodecError:
        return False


@functools.lru_cache(maxsize=256)
def payload_bytes(bits: int, numel: int, bucket: int = 512, family: str = "qsgd") -> int:
    """Wire frame bytes of one update of `numel` values at `bits` with the codec `family` ("qsgd",
    "qsgdz": its codec's family) at levels(bits) (codec wire_size): exact for qsgd, zstd's worst
    case for qsgdz."""
    return get_codec(family, levels=levels(bits), bucket=bucket).wire_size(numel)


def frame_size_estimates(update: np.ndarray, family: str, bits: int, frame_len: int, bucket: int = 512,
                         sample_every: int = 16) -> dict[int, int]:
    """Frame bytes of `update` at every bits, for entropy-coded frames whose size depends on the
    data: every `sample_every`-th bucket encoded at each bits (about 40 ms for an MNIST CNN
    update), scaled to the whole vector, then calibrated so that `bits` gives `frame_len`, the
    frame actually sent."""
    whole = update.size // bucket
    sample = (update[: whole * bucket].reshape(whole, bucket)[::sample_every].ravel()
              if whole >= 2 * sample_every else update)
    scale = update.size / max(sample.size, 1)
    raw = {}
    for q in BITS:
        codec = get_codec(family, levels=levels(q), bucket=bucket, seed=0)
        head = wire.overhead(codec.params_struct.size)
        raw[q] = head + (len(codec.encode(sample)) - head) * scale
    calibration = frame_len / raw[bits]
    return {q: max(1, round(v * calibration)) for q, v in raw.items()} | {bits: frame_len}


def check_size_estimates(sizes: object, numel: int, bucket: int, family: str) -> dict[int, int] | str:
    """A client's reported frame sizes ({"1": bytes, ..., "8": bytes} on the wire) as {bits: bytes},
    or why they are unusable: every bits present, integers within the codec's bound."""
    if not isinstance(sizes, dict) or sorted(sizes) != sorted(str(q) for q in BITS):
        return f"frame sizes must name every bits 1..8, got {str(sizes)[:80]}"
    out = {}
    for q in BITS:
        v, bound = sizes[str(q)], payload_bytes(q, numel, bucket, family)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 < v <= bound:
            return f"frame size at {q} bits must be an integer in 1..{bound} bytes, got {v!r}"
        out[q] = v
    return out


def variance_factor(bits: int, dim: int = 512) -> float:
    """QSGD's bound E||Q(v) - v||^2 <= min(d/s^2, sqrt(d)/s) ||v||^2, d = the bucket size."""
    s = levels(bits)
    return min(dim / s ** 2, math.sqrt(dim) / s)


@dataclass(frozen=True)
class Allocation:
    bits: tuple[int, ...]
    rates_Bps: tuple[float, ...]     # link rate of each client's upload, bytes/s (sum <= B)
    round_time_s: float              # T*(bits): the slowest client's compute + upload
    rounds_factor: float             # R(bits), relative to unquantized updates
    objective: float                 # round_time_s * rounds_factor
    exact: bool = True               # every bit vector was evaluated


def round_time(compute_s: np.ndarray, payload: np.ndarray, total_Bps: float, caps_Bps: np.ndarray) -> np.ndarray:
    """T*(q) for a batch of bit vectors: payload is (K, M) bytes, compute_s and caps (M,).
    The smallest T with sum_m P_m / (T - t_m) <= B and T >= max_m (t_m + P_m / c_m); bisection
    on the strictly decreasing sum, to relative precision 1e-12."""
    t = compute_s[None, :]
    lo = np.max(t + payload / caps_Bps[None, :], axis=1)  # the link caps alone
    # B-constraint root: >= max t_m + P_m/B (one client), <= max t_m + sum P/B (every one at the latest start).
    lo_b = np.max(t + payload / total_Bps, axis=1)
    hi = np.max(t, axis=1) + payload.sum(axis=1) / total_Bps
    a, b = lo_b, hi
    for _ in range(100):
        mid = 0.5 * (a + b)
        need = (payload / np.maximum(mid[:, None] - t, 1e-300)).sum(axis=1)
        over = need > total_Bps
        a, b = np.where(over, mid, a), np.where(over, b, mid)
        if np.all(b - a <= 1e-12 * b):
            break
    return np.maximum(lo, b)


def rounds_factor(bits: np.ndarray, weights: np.ndarray, beta: float, dim: int) -> np.ndarray:
    """R(q) = 1 + beta * sum_m w_m^2 phi(q_m) for a (K, M) batch of bit vectors."""
    phi = np.array([0.0] + [variance_factor(q, dim) for q in BITS])
    return 1.0 + beta * (phi[bits] * weights[None, :] ** 2).sum(axis=1)


def allocate(compute_s: Sequence[float], caps_Bps: Sequence[float], total_Bps: float, numel: int, *,
             bucket: int = 512, beta: float = 1.0, weights: Sequence[float] | None = None,
             bits: Sequence[int] = BITS, overhead_bytes: int = 0,
             efficiency: Sequence[float] | None = None, family: str = "qsgd",
             frame_bytes: Sequence[dict[int, int] | None] | None = None) -> Allocation:
    """The (q, b) minimising T(q, b) * R(q); see the module docstring. `caps_Bps` may hold inf
    (no known limit). Rates and caps are link rates; `efficiency` (payload goodput / link rate,
    measured per client, default 1) turns them into payload bytes/s: client m needs P_m / e_m.
    `frame_bytes` (per client {bits: bytes} or None) replaces the codec's frame size for that
    client (qsgdz: its estimates). Ties go to the vector found first (more bits first), then bits
    are sorted so that among clients on the same link (cap and efficiency) with the same frame
    sizes a faster one never has fewer bits (such a swap never increases T, and R does not change)."""
    t = np.asarray(compute_s, float)
    caps = np.asarray(caps_Bps, float)
    m = t.size
    _check(t, caps, total_Bps, numel, m)
    w = np.full(m, 1.0 / m) if weights is None else np.asarray(weights, float) / np.sum(weights)
    eff = np.ones(m) if efficiency is None else np.asarray(efficiency, float)
    if eff.shape != t.shape or not ((eff > 0) & (eff <= 1)).all():
        raise ValueError(f"efficiency must be in (0, 1], one per client, got {eff.tolist()}")
    choices = np.array(sorted(set(bits), reverse=True), int)
    size = np.zeros((m, max(BITS) + 1))
    for q in choices:
        size[:, q] = payload_bytes(int(q), numel, bucket, family)
    for i, own in enumerate(frame_bytes or []):
        for q in choices if own else []:
            size[i, q] = own[int(q)]
    size += overhead_bytes
    clients = np.arange(m)[None, :]

    def evaluate(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        payload = size[clients, vectors] / eff[None, :]
        rt = round_time(t, payload, total_Bps, caps)
        rf = rounds_factor(vectors, w, beta, bucket)
        return rt * rf, rt, rf

    exact = len(choices) ** m <= MAX_EXACT
    if exact:
        best = None
        it = itertools.product(choices, repeat=m)
        while chunk := list(itertools.islice(it, 65536)):
            vectors = np.array(chunk, int).reshape(-1, m)
            obj, _, _ = evaluate(vectors)
            i = int(np.argmin(obj))
            if best is None or obj[i] < best[0]:
                best = (float(obj[i]), vectors[i])
        q = best[1]
    else:
        q = _local_search(choices, m, evaluate)
    q = _sorted_within_links(q, t, [(c, e, tuple(row)) for c, e, row in zip(caps.tolist(), eff.tolist(), size)])
    obj, rt, rf = (float(x[0]) for x in evaluate(q[None, :]))
    rates = _rates_for(t, size[np.arange(m), q] / eff, rt, caps, total_Bps)
    return Allocation(tuple(int(x) for x in q), rates, rt, rf, obj, exact)


def allocate_rates(compute_s: Sequence[float], caps_Bps: Sequence[float], total_Bps: float,
                   frame_bytes: Sequence[float], efficiency: Sequence[float] | None = None) -> Allocation:
    """Rates only, for frames whose size the allocation does not choose (any codec at fixed
    settings, e.g. int8_sparse): the b minimising T = max_m (t_m + P_m / b_m) with sum b_m <= B,
    b_m <= c_m; R = 1 (the updates are the same whatever the rates). `bits` is empty."""
    t = np.asarray(compute_s, float)
    caps = np.asarray(caps_Bps, float)
    frames = np.asarray(frame_bytes, float)
    _check(t, caps, total_Bps, 1, t.size)
    if frames.shape != t.shape or not (np.isfinite(frames) & (frames > 0)).all():
        raise ValueError(f"frame sizes must be finite and > 0 bytes, one per client, got {frames.tolist()}")
    eff = np.ones(t.size) if efficiency is None else np.asarray(efficiency, float)
    if eff.shape != t.shape or not ((eff > 0) & (eff <= 1)).all():
        raise ValueError(f"efficiency must be in (0, 1], one per client, got {eff.tolist()}")
    payload = frames / eff
    rt = float(round_time(t, payload[None, :], total_Bps, caps)[0])
    return Allocation((), _rates_for(t, payload, rt, caps, total_Bps), rt, 1.0, rt)


def _rates_for(t: np.ndarray, payload: np.ndarray, round_time_s: float, caps: np.ndarray,
               total_Bps: float) -> tuple[float, ...]:
    """b_m = P_m / (T* - t_m) (capped), then what is left of B spread over the clients."""
    rates = _spread(np.minimum(payload / np.maximum(round_time_s - t, 1e-300), caps), caps, total_Bps)
    return tuple(float(r) for r in rates)


def _check(t: np.ndarray, caps: np.ndarray, total_Bps: float, numel: int, m: int) -> None:
    if m == 0 or caps.shape != t.shape or t.ndim != 1:
        raise ValueError(f"need one compute time and one cap per client, got {t.shape} and {caps.shape}")
    if not (np.isfinite(t).all() and (t >= 0).all()):
        raise ValueError(f"compute times must be finite and >= 0, got {t.tolist()}")
    if np.isnan(caps).any() or not (caps > 0).all():
        raise ValueError(f"link caps must be > 0 (inf for unknown), got {caps.tolist()}")
    if not (math.isfinite(total_Bps) and total_Bps > 0):
        raise ValueError(f"total uplink must be finite and > 0 bytes/s, got {total_Bps}")
    if numel <= 0:
        raise ValueError(f"model size must be > 0, got {numel}")


def _local_search(choices: np.ndarray, m: int, evaluate) -> np.ndarray:
    """Many clients: start from the best uniform vector, move one client's bits while that helps."""
    uniform = np.repeat(choices[:, None], m, axis=1)
    q = uniform[int(np.argmin(evaluate(uniform)[0]))].copy()
    best = float(evaluate(q[None, :])[0][0])
    improved = True
    while improved:
        improved = False
        moves = np.repeat(q[None, :], m * len(choices), axis=0)
        for k, (i, c) in enumerate(itertools.product(range(m), choices)):
            moves[k, i] = c
        obj = evaluate(moves)[0]
        k = int(np.argmin(obj))
        if obj[k] < best * (1 - 1e-12):
            q, best, improved = moves[k].copy(), float(obj[k]), True
    return q


def _spread(rates: np.ndarray, caps: np.ndarray, total_Bps: float) -> np.ndarray:
    """Hand what T* leaves of B to the clients in proportion to their rates, up to their caps
    (water-filling): the slowest client's time stays T*, the others gain slack against
    measurement error, and the sum stays <= B."""
    rates = rates.copy()
    for _ in range(rates.size):
        left = total_Bps - rates.sum()
        free = rates < caps
        if left <= 1e-9 * total_Bps or not free.any():
            break
        grow = np.minimum(rates[free] * (1 + left / rates[free].sum()), caps[free])
        rates[free] = grow
    rates = np.minimum(rates, caps)
    # b_m = P_m / (T* - t_m) inherits T*'s bisection error, relatively large when T* - t_m is tiny.
    return rates * (min(1.0, total_Bps / rates.sum()) * (1 - 1e-12))


def _sorted_within_links(q: np.ndarray, t: np.ndarray, links: list[tuple]) -> np.ndarray:
    """Among clients on the same link (cap, efficiency, frame sizes): more bits to the faster ones."""
    q = q.copy()
    for link in set(links):
        idx = np.array([i for i, x in enumerate(links) if x == link])
        order = idx[np.argsort(t[idx], kind="stable")]      # fastest first
        q[order] = np.sort(q[idx])[::-1]                     # most bits first
    return q


def equal_split(caps_Bps: Sequence[float], total_Bps: float) -> list[float]:
    """The baseline's rates: B / M each, no more than the client's own link."""
    return [min(total_Bps / len(caps_Bps), c) for c in caps_Bps]


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


POLICIES = ("joint", "equal")
PROBE_ROUNDS = 2  # a goodput is reported with the next update: the allocation starts in round 3


@dataclass(frozen=True)
class AdaptiveSection:
    """Controller config `adaptive`: per-client qsgd bits and uplink rates each round.
    joint: the allocation above, from measured reports (clients without valid reports upload at
    probe_bits over their own link); equal: the baseline, fixed_bits and B / M each. fixed_bits
    None: the run's own codec (any of them) and only the rates chosen, by either policy, so fp32 or
    int8_sparse compare on the same split, and joint allocates their rates alone."""
    policy: str = "joint"
    total_uplink_mbit: float = 16.0   # B, the shared uplink the rates are cut from
    probe_bits: int = 4
    fixed_bits: int | None = 4        # policy equal's bits; None: rates only, the command's codec
    beta: float = 1.0                 # weight of the quantization variance in the round count
    smoothing: float = 0.5            # EWMA weight of the newest report
    # Fewest bits joint may choose: where beta was fitted (bench_adaptive fits it on equal:<bits> runs),
    # the model of R(q) is not known below the fitted range.
    min_bits: int = 1

    def check(self, where: str) -> None:
        from commlab.config.schema import ConfigError, positive
        if self.policy not in POLICIES:
            raise ConfigError(f"{where}policy: unknown policy {self.policy!r} (known: {', '.join(POLICIES)})")
        positive(where, total_uplink_mbit=self.total_uplink_mbit, smoothing=self.smoothing)
        if not (math.isfinite(self.beta) and self.beta >= 0):  # 0: quantization noise costs no rounds
            raise ConfigError(f"{where}beta: must be >= 0, got {self.beta}")
        if self.min_bits not in BITS:
            raise ConfigError(f"{where}min_bits: must be in 1..8, got {self.min_bits}")
        if self.smoothing > 1:
            raise ConfigError(f"{where}smoothing: must be in (0, 1], got {self.smoothing}")
        if self.probe_bits not in BITS:
            raise ConfigError(f"{where}probe_bits: must be in 1..8, got {self.probe_bits}")
        if self.fixed_bits is not None and self.fixed_bits not in BITS:
            raise ConfigError(f"{where}fixed_bits: must be in 1..8 or null (the run's codec), got {self.fixed_bits}")

    @property
    def sets_bits(self) -> bool:
        """Whether the controller chooses each client's qsgd bits (then the run's codec must be qsgd)."""
        return self.fixed_bits is not None

    @property
    def total_Bps(self) -> float:
        return self.total_uplink_mbit * 1e6 / 8


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


class ClientSide:
    """The client's side: the codec its bits name, its emulated compute slowdown, its uplink rate
    (tc on its own interface, inside its namespace or container), and what it measures for its
    reports (payload goodput of each upload, until every reader acknowledged it)."""

    def __init__(self, name: str, link_profile: str, interface: str, speed_factor: float = 1.0, log=print):
        from commlab.links.profiles import LinkError, link_for
        self.name, self.speed_factor, self.log = name, speed_factor, log
        try:
            self.link_bps = link_for(link_profile, name).rate_bps
        except (LinkError, KeyError):
            self.link_bps = math.inf
        # Only where the profile was applied to this node's own interface (not loopback), as root.
        self.can_shape = interface != "lo" and os.geteuid() == 0 and math.isfinite(self.link_bps)
        self.rate_bps = self.link_bps if self.can_shape else math.nan
        self.upload_rate_bps = self.rate_bps  # the rate of the last upload (the csv's rate_bps)
        self.prev_upload_Bps, self.prev_rate_Bps, self.prev_at_link_rate = 0.0, 0.0, False
        self.bits: int | None = None
        self.upload_s = self.goodput_Bps = math.nan
        self._warned = False

    def codec_params(self, cmd) -> dict:
        """The command's codec parameters, at this client's bits (the qsgd codec's levels) when
        the command names them."""
        q = cmd.client_bits.get(self.name) if cmd.client_bits else None
        self.bits = None
        if q is None:
            return dict(cmd.codec_params)
        if not isinstance(q, int) or isinstance(q, bool) or q not in BITS:
            self.log(f"round {cmd.round}: ignoring bits {q!r} (need 1..8); using {cmd.codec}")
            return dict(cmd.codec_params)
        self.bits = q
        return {**cmd.codec_params, "levels": levels(q)}

    def stretch(self, train_s: float) -> float:
        """Emulated slower compute: sleep (1/speed_factor - 1) x the measured training time."""
        if self.speed_factor >= 1:
            return 0.0
        start = time.perf_counter()
        time.sleep(train_s * (1 / self.speed_factor - 1))
        return time.perf_counter() - start

    def before_upload(self, cmd) -> None:
        """Set the uplink to the allocated rate (never above this client's own link), or back to
        the link rate when the command allocates none."""
        rate = cmd.client_rates_Bps.get(self.name) if cmd.client_rates_Bps else None
        target = self.link_bps
        if isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isfinite(rate) and rate > 0:
            target = min(rate * 8, self.link_bps)
        elif rate is not None:
            self.log(f"round {cmd.round}: ignoring rate {rate!r}; uploading at the link rate")
        if not self.can_shape:
            if rate is not None and not self._warned:
                self.log("uplink rate NOT applied: no shaped interface of its own (loopback or not root)")
                self._warned = True
            return
        self._shape(cmd, target)

    def _shape(self, cmd, target_bps: float) -> None:
        if target_bps != self.rate_bps:
            from commlab.links.profiles import LinkError, set_rate
            try:
                set_rate(target_bps)
                self.rate_bps = target_bps
            except LinkError as e:  # the round goes on at the rate that is set; the csv says which
                self.log(f"round {cmd.round}: uplink rate NOT changed to {target_bps / 1e6:.2f} Mbit/s: {e}")

    def after_upload(self, cmd, nbytes: int, started: float, publisher, timeout_s: float) -> None:
        """Measure the upload: commands that allocate (bits or a rate) wait until every reader
        acknowledged it, so rate-only baselines measure their uploads as the adaptive policy does."""
        if cmd.client_bits or cmd.client_rates_Bps:
            publisher.wait_for_acks(timeout_s)
        self.upload_s = time.perf_counter() - started
        self.goodput_Bps = nbytes / self.upload_s if self.upload_s > 0 else math.nan
        self.prev_upload_Bps = self.goodput_Bps if math.isfinite(self.goodput_Bps) else 0.0
        self.prev_at_link_rate = not self.can_shape or self.rate_bps >= self.link_bps
        self.prev_rate_Bps = self.rate_bps / 8 if self.can_shape else 0.0
        self.upload_rate_bps = self.rate_bps
        # The allocated rate is the upload's share of B. Kept afterwards, it would also carry the
        # acknowledgements of the next model broadcast: at 0.25 Mbit/s that broadcast took 1.9-3.7 s
        # instead of 0.55 s (measured), a cost no upload caused. Back to the own link until the next upload.
        if self.can_shape:
            self._shape(cmd, self.link_bps)

    def size_report(self, codec: Codec, update: np.ndarray, frame_len: int) -> dict[str, int]:
        """Frames sized by their content (qsgdz) at allocated bits: the update's frame bytes at
        every bits (keys as strings, as JSON carries them), so the controller can weigh bits it
        has not seen; {} else."""
        if self.bits is None or not codec.sized_by_content:
            return {}
        sizes = frame_size_estimates(update, codec.family, self.bits, frame_len, codec.bucket)
        return {str(q): v for q, v in sizes.items()}

    def report(self, compute_s: float) -> dict:
        """ClientUpdate fields (the goodput is the previous upload's: this one is not done yet)."""
        return {"compute_s": compute_s, "prev_upload_Bps": self.prev_upload_Bps,
                "prev_rate_Bps": self.prev_rate_Bps, "prev_at_link_rate": self.prev_at_link_rate}

    def row(self, stretch_s: float) -> dict:
        def num(v: float, nd: int) -> float | str:
            return round(v, nd) if math.isfinite(v) else ""
        return {"bits": "" if self.bits is None else self.bits, "rate_bps": num(self.upload_rate_bps, 0),
                "upload_s": num(self.upload_s, 4), "goodput_Bps": num(self.goodput_Bps, 1),
                "stretch_s": round(stretch_s, 4)}


def speed_factors(text: str | None, clients: int) -> list[float]:
    """"1,1,0.5,0.25" -> one speed per client, cycling; None -> all 1 (ValueError on a bad list)."""
    if not text:
        return [1.0] * clients
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        from commlab.config.schema import ConfigError
        raise ConfigError(f"--speed-factors: expected numbers separated by commas, got {text!r}") from None
    return [values[i % len(values)] for i in range(clients)]


def record_heterogeneity(run_dir, speeds: dict[int, float], link_profile: str) -> None:
    """Put how the clients' heterogeneity was emulated into the manifest (`heterogeneity`)."""
    import json
    from pathlib import Path

    from commlab.output.run_folder import write_json_atomic
    path = Path(run_dir) / "manifest.json"
    if not path.exists():
        return
    manifest = json.loads(path.read_text())
    manifest["heterogeneity"] = {
        "compute": {"method": "measured sleep: after local training each client sleeps (1/speed_factor - 1) x its "
                              "measured training time (clients-<i>.csv stretch_s)",
                    "speed_factors": {f"client-{i}": f for i, f in sorted(speeds.items())}},
        "links": {"profile": link_profile,
                  "method": "tc tbf on each node's own interface (manifest link_applied); adaptive and equal "
                            "runs change each client's rate before its upload (clients-<i>.csv rate_bps)"}}
    write_json_atomic(path, manifest)
