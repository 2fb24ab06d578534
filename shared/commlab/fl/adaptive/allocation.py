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

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .bits import BITS, payload_bytes, variance_factor

MAX_EXACT = 8 ** 5  # bit vectors evaluated exactly; more clients: local search from the best uniform vector


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
