"""The joint bits/bandwidth allocation (commlab.fl.adaptive, docs/adaptive.md): exact against an
independent brute force, never over budget, monotone, fair between clients on the same link; and
the estimates that feed it reject bad reports."""
from __future__ import annotations

import itertools
import math
import sys
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commlab.codecs import get_codec
from commlab.fl.adaptive.allocation import allocate, allocate_rates, equal_split
from commlab.fl.adaptive.bits import (BITS, check_size_estimates, frame_size_estimates, levels, payload_bytes, takes_bits,
                                      variance_factor)
from commlab.fl.adaptive.estimates import LinkEstimates

D = 1_663_370  # mnist_cnn
compute = st.floats(0.0, 30.0, allow_nan=False)
cap = st.one_of(st.floats(2e4, 5e6), st.just(math.inf))
total = st.floats(5e4, 1e7)


def brute_force(t, caps, total_Bps, numel, bits=BITS, beta=1.0, eff=None, sizes=None):
    """Every bit vector, T* by a scalar bisection written independently of the module's; `sizes`:
    per client {bits: frame bytes} instead of the codec's."""
    best = math.inf
    eff = eff or [1.0] * len(t)
    sizes = sizes or [{b: payload_bytes(b, numel) for b in BITS}] * len(t)
    for q in itertools.product(bits, repeat=len(t)):
        p = [own[b] / e for b, e, own in zip(q, eff, sizes)]
        lo = max(tm + pm / total_Bps for tm, pm in zip(t, p))
        hi = max(t) + sum(p) / total_Bps + 1.0
        for _ in range(200):
            mid = (lo + hi) / 2
            if sum(pm / (mid - tm) for tm, pm in zip(t, p)) > total_Bps:
                lo = mid
            else:
                hi = mid
        T = max([hi] + [tm + pm / c for tm, pm, c in zip(t, p, caps)])
        R = 1 + beta * sum(variance_factor(b) / len(t) ** 2 for b in q)
        best = min(best, T * R)
    return best


def test_payload_is_the_codec_wire_size():
    for q in BITS:
        assert levels(q) == 2 ** q - 1
        frame = get_codec(f"qsgd{levels(q)}").encode(np.linspace(-1, 1, 5000, dtype=np.float32))
        assert len(frame) == payload_bytes(q, 5000)
    assert [payload_bytes(q, D) for q in BITS] == sorted(payload_bytes(q, D) for q in BITS)


def test_variance_factor_is_qsgd_bound():
    assert variance_factor(1, 512) == pytest.approx(math.sqrt(512))  # s = 1: sqrt(d)/s is smaller
    assert variance_factor(8, 512) == pytest.approx(512 / 255 ** 2)  # s = 255: d/s^2 is smaller


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(compute, cap, st.floats(0.3, 1.0)), min_size=1, max_size=3), total,
       st.sampled_from([1000, 100_000, D]))
def test_matches_brute_force(clients, total_Bps, numel):
    t, caps, eff = [c[0] for c in clients], [c[1] for c in clients], [c[2] for c in clients]
    alloc = allocate(t, caps, total_Bps, numel, efficiency=eff)
    assert alloc.exact
    assert alloc.objective == pytest.approx(brute_force(t, caps, total_Bps, numel, eff=eff), rel=1e-9)
    # The allocation delivers what it claims: every client done by T*, within budget and caps.
    for tm, q, b, c, e in zip(t, alloc.bits, alloc.rates_Bps, caps, eff):
        assert tm + payload_bytes(q, numel) / (e * b) <= alloc.round_time_s * (1 + 1e-9)
        assert b <= c


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(compute, cap, st.lists(st.integers(100, 2_000_000), min_size=8, max_size=8)),
                min_size=1, max_size=3), total, st.floats(0.0, 2.0))
def test_own_frame_sizes_match_brute_force(clients, total_Bps, beta):
    """Entropy-coded frames: each client's own sizes per bits (any order, not monotone) replace the codec's."""
    t, caps = [c[0] for c in clients], [c[1] for c in clients]
    sizes = [dict(zip(BITS, c[2])) for c in clients]
    alloc = allocate(t, caps, total_Bps, D, beta=beta, family="qsgdz", frame_bytes=sizes)
    assert alloc.objective == pytest.approx(brute_force(t, caps, total_Bps, D, beta=beta, sizes=sizes), rel=1e-9)
    for tm, q, b, own in zip(t, alloc.bits, alloc.rates_Bps, sizes):
        assert tm + own[q] / b <= alloc.round_time_s * (1 + 1e-9)


def heavy_tailed_update(n=300_000, seed=0):
    """A model update's shape: layers of different scales, heavy-tailed values."""
    rng = np.random.default_rng(seed)
    scales = np.repeat(rng.uniform(1e-4, 1e-2, 30), -(-n // 30))[:n]
    return (rng.standard_t(3, n) * scales).astype(np.float32)


def test_frame_size_estimates_are_close_to_the_frames():
    vec = heavy_tailed_update()
    sent = len(get_codec("qsgdz3", seed=5).encode(vec))
    est = frame_size_estimates(vec, "qsgdz", 2, sent)
    assert est[2] == sent
    for q in BITS:
        actual = len(get_codec("qsgdz", levels=levels(q), seed=9).encode(vec))
        # A sample of 37 buckets here; on an MNIST CNN update (3,249 buckets) within 1 %.
        assert abs(est[q] - actual) <= 0.1 * actual, (q, est[q], actual)
    # More bits, bigger frames.
    assert [est[q] for q in BITS] == sorted(est[q] for q in BITS)
    assert check_size_estimates({str(q): v for q, v in est.items()}, vec.size, 512, "qsgdz") == est


@pytest.mark.parametrize(("sizes", "message"), [
    ({"1": 5}, "must name every bits 1..8"),
    ([1, 2], "must name every bits 1..8"),
    ({**{str(q): 1000 for q in BITS}, "3": -1}, "at 3 bits must be an integer in 1.."),
    ({**{str(q): 1000 for q in BITS}, "4": 1.5}, "at 4 bits must be an integer"),
    ({**{str(q): 1000 for q in BITS}, "5": True}, "at 5 bits must be an integer"),
    ({**{str(q): 1000 for q in BITS}, "8": 10**9}, "at 8 bits must be an integer in 1..1884325 bytes, got 1000000000"),
])
def test_bad_frame_size_reports_are_rejected(sizes, message):
    assert message in check_size_estimates(sizes, D, 512, "qsgdz")


def test_codec_families():
    assert get_codec("qsgdz7").family == "qsgdz" and get_codec("qsgd7").family == "qsgd"
    assert takes_bits("qsgdz7") and takes_bits("qsgd") and not takes_bits("int8_sparse")
    assert not takes_bits("no such codec")
    # qsgdz's frame size is data-dependent: the codec's size is only a bound, that of its dense
    # layout (qsgd's payload under 8 bytes more of parameters).
    assert payload_bytes(2, D, family="qsgdz") == payload_bytes(2, D) + 8


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(compute, cap, st.floats(0.3, 1.0), st.floats(1e3, 5e6)), min_size=1, max_size=4), total)
def test_rates_only_is_the_smallest_feasible_round_time(clients, total_Bps):
    """A fixed frame per client (any codec): T* is the smallest T every client can meet within B
    and its cap (checked against a grid of T independent of the bisection), and the rates meet it."""
    t, caps, eff, frames = ([c[i] for c in clients] for i in range(4))
    alloc = allocate_rates(t, caps, total_Bps, frames, efficiency=eff)
    assert alloc.bits == () and alloc.rounds_factor == 1.0 and alloc.objective == alloc.round_time_s
    assert sum(alloc.rates_Bps) <= total_Bps

    def feasible(T):
        need = [f / e / (T - tm) if T > tm else math.inf for tm, f, e in zip(t, frames, eff)]
        return sum(need) <= total_Bps * (1 + 1e-9) and all(n <= c * (1 + 1e-9) for n, c in zip(need, caps))
    assert feasible(alloc.round_time_s * (1 + 1e-9)) and not feasible(alloc.round_time_s * (1 - 1e-6))
    for tm, f, e, b, c in zip(t, frames, eff, alloc.rates_Bps, caps):
        assert tm + f / (e * b) <= alloc.round_time_s * (1 + 1e-9) and b <= c


def test_rates_only_rejects_bad_frames():
    with pytest.raises(ValueError, match="frame sizes must be finite and > 0"):
        allocate_rates([1.0, 2.0], [1e6, 1e6], 1e6, [1000, 0])
    with pytest.raises(ValueError, match="one per client"):
        allocate_rates([1.0, 2.0], [1e6, 1e6], 1e6, [1000])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(compute, cap), min_size=1, max_size=4), total)
def test_never_exceeds_budget(clients, total_Bps):
    alloc = allocate([c[0] for c in clients], [c[1] for c in clients], total_Bps, D)
    assert sum(alloc.rates_Bps) <= total_Bps
    assert all(b > 0 for b in alloc.rates_Bps) and all(q in BITS for q in alloc.bits)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(compute, cap), min_size=1, max_size=4), total, st.floats(1.0, 10.0))
def test_more_bandwidth_never_hurts(clients, total_Bps, factor):
    t, caps = [c[0] for c in clients], [c[1] for c in clients]
    small, large = allocate(t, caps, total_Bps, D), allocate(t, caps, total_Bps * factor, D)
    assert large.objective <= small.objective * (1 + 1e-9)
    assert large.round_time_s <= small.round_time_s * (1 + 1e-9) or large.rounds_factor < small.rounds_factor


@settings(max_examples=60, deadline=None)
@given(st.lists(compute, min_size=2, max_size=4), cap, total)
def test_faster_client_never_gets_fewer_bits_on_the_same_link(t, link, total_Bps):
    alloc = allocate(t, [link] * len(t), total_Bps, D)
    for i, j in itertools.permutations(range(len(t)), 2):
        if t[i] < t[j]:
            assert alloc.bits[i] >= alloc.bits[j], (t, alloc)


def test_slow_link_gets_fewer_bits_and_idle_is_balanced():
    # client 0: fast compute, 2 Mbit link; client 3: 4x slower compute, 20 Mbit link (hetero4).
    t = [4.0, 4.0, 8.0, 16.0]
    caps = [m * 1e6 / 8 for m in (2, 5, 10, 20)]
    alloc = allocate(t, caps, 16e6 / 8, D)
    assert sum(alloc.rates_Bps) <= 2e6
    finish = [tm + payload_bytes(q, D) / b for tm, q, b in zip(t, alloc.bits, alloc.rates_Bps)]
    assert max(finish) == pytest.approx(alloc.round_time_s)
    # Better than every uniform setting with the equal split of the baseline.
    for q in BITS:
        rates = equal_split(caps, 16e6 / 8)
        T = max(tm + payload_bytes(q, D) / b for tm, b in zip(t, rates))
        assert alloc.objective <= T * (1 + variance_factor(q) / 4) + 1e-9


def test_many_clients_fall_back_to_local_search():
    t = list(np.linspace(1, 10, 7))
    alloc = allocate(t, [1e6] * 7, 2e6, D)
    assert not alloc.exact and sum(alloc.rates_Bps) <= 2e6
    assert alloc.objective <= min(allocate(t, [1e6] * 7, 2e6, D, bits=[q]).objective for q in BITS) + 1e-9


@pytest.mark.parametrize("t,caps,total_Bps", [([1.0], [0.0], 1e6), ([-1.0], [1e6], 1e6), ([math.nan], [1e6], 1e6),
                                              ([1.0], [math.nan], 1e6), ([1.0], [1e6], 0.0), ([1.0], [1e6], math.inf),
                                              ([], [], 1e6), ([1.0, 2.0], [1e6], 1e6)])
def test_bad_inputs_raise(t, caps, total_Bps):
    with pytest.raises(ValueError):
        allocate(t, caps, total_Bps, D)


def test_estimates_smooth_and_reject_bad_reports():
    est = LinkEstimates(smoothing=0.5)
    assert est.report("client-0", 0.01, 0.0, 0.0, at_link_rate=False) is None  # first round: no upload yet
    assert not est.ready(["client-0"])
    assert est.report("client-0", 0.03, 2.2e5, 2.5e5, at_link_rate=True) is None
    assert est.compute_s_per_sample["client-0"] == 0.03    # while probing: the newest, not smoothed
    assert est.report("client-0", 0.01, 2.2e5, 2.5e5, at_link_rate=True) is None
    assert est.compute_s_per_sample["client-0"] == pytest.approx(0.02)
    assert est.cap_Bps["client-0"] == 2.5e5 and est.efficiency["client-0"] == pytest.approx(0.88)
    # Held below its link by the allocation: compute and efficiency count, the cap stays.
    assert est.report("client-0", 0.02, 0.6e5, 1e5, at_link_rate=False) is None
    assert est.cap_Bps["client-0"] == 2.5e5 and est.efficiency["client-0"] == pytest.approx(0.74)
    # Not shaped (loopback): the goodput is the cap.
    assert est.report("client-2", 0.02, 3e8, 0.0, at_link_rate=True) is None
    assert est.cap_Bps["client-2"] == 3e8 and "client-2" not in est.efficiency
    assert est.ready(["client-0", "client-2"]) and not est.ready(["client-0", "client-1"])
    for bad in ((-1.0, 1e5, 0.0), (math.nan, 1e5, 0.0), (0.01, math.inf, 0.0), (0.01, -5.0, 0.0), (0.0, 1e5, 0.0),
                (0.01, 1e5, math.nan), (0.01, 1e5, -1.0)):
        assert est.report("client-1", *bad, at_link_rate=True) is not None
    assert "goodput_Bps must be > 0" in est.report("client-1", 0.01, 0.0, 0.0, at_link_rate=True)
    assert not est.ready(["client-1"])
    est.forget("client-0")
    assert not est.ready(["client-0"])


def test_efficiency_scales_the_payload():
    t, caps = [1.0, 2.0], [1e6, 1e6]
    full = allocate(t, caps, 1e6, D)
    half = allocate(t, caps, 1e6, D, efficiency=[0.5, 0.5])
    assert half.objective > full.objective
    for tm, q, b in zip(t, half.bits, half.rates_Bps):  # done by T* at half the goodput
        assert tm + payload_bytes(q, D) / (0.5 * b) <= half.round_time_s * (1 + 1e-9)
    with pytest.raises(ValueError):
        allocate(t, caps, 1e6, D, efficiency=[0.0, 1.0])


# --- config, controller planner, client side ---------------------------------------------------

from commlab.config.schema import ConfigError, from_dict  # noqa: E402
from commlab.fl.adaptive.planner import Planner  # noqa: E402
from commlab.fl.adaptive.shaping import ClientSide  # noqa: E402
from commlab.fl.config import ClientConfig, ControllerConfig  # noqa: E402
from commlab.fl.messages import ClientUpdate, TrainCmd  # noqa: E402
from commlab.fl.run import build_configs, parse_args  # noqa: E402

CLIENTS = [f"client-{i}" for i in range(4)]


def configs(tmp_path, *flags):
    return build_configs(parse_args(["--results-dir", str(tmp_path), "--run-id", "t", "--domain-id", "5",
                                     "--clients", "4", *flags]))


def test_launcher_writes_adaptive_and_speed_factors(tmp_path):
    controller, clients = configs(tmp_path, "--codec", "qsgd15", "--adaptive", "joint", "--total-uplink-mbit", "8",
                                  "--speed-factors", "1,1,0.5,0.25")
    assert controller["adaptive"]["policy"] == "joint" and controller["adaptive"]["total_uplink_mbit"] == 8
    assert [c["speed_factor"] for c in clients] == [1, 1, 0.5, 0.25]


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c.update(codec={"name": "int8", "params": {}}), "codec.name: adaptive bits need a qsgd codec"),
    (lambda c: c["adaptive"].update(policy="equal", fixed_bits=0), "adaptive.fixed_bits: must be in 1..8 or null"),
    (lambda c: c["adaptive"].update(policy="greedy"), "adaptive.policy: unknown policy 'greedy'"),
    (lambda c: c["adaptive"].update(probe_bits=9), "adaptive.probe_bits: must be in 1..8, got 9"),
    (lambda c: c["adaptive"].update(total_uplink_mbit=0), "adaptive.total_uplink_mbit: must be > 0"),
    (lambda c: c["adaptive"].update(smoothing=1.5), "adaptive.smoothing: must be in (0, 1]"),
    (lambda c: c["adaptive"].update(beta=-0.1), "adaptive.beta: must be >= 0, got -0.1"),
    (lambda c: c["adaptive"].update(min_bits=0), "adaptive.min_bits: must be in 1..8, got 0"),
])
def test_adaptive_config_errors_name_the_key(tmp_path, mutate, message):
    controller, _ = configs(tmp_path, "--codec", "qsgd15", "--adaptive", "joint")
    mutate(controller)
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        from_dict(ControllerConfig, controller)


@pytest.mark.parametrize("speed", [0.0, 1.5, -1.0])
def test_speed_factor_range(tmp_path, speed):
    _, clients = configs(tmp_path)
    with pytest.raises(ConfigError, match=re.escape("speed_factor: must be in (0, 1]")):
        from_dict(ClientConfig, {**clients[0], "speed_factor": speed})


def update(rnd, client, compute_s=2.0, goodput=2.2e5, rate=2.5e5, at_link=True, n=100):
    return ClientUpdate(round=rnd, client_id=client, num_samples=n, payload=b"", compute_s=compute_s,
                        prev_upload_Bps=goodput, prev_rate_Bps=rate, prev_at_link_rate=at_link)


def test_planner_probes_then_allocates_and_falls_back_on_bad_reports():
    from commlab.fl.adaptive.section import AdaptiveSection
    logs = []
    planner = Planner(AdaptiveSection(total_uplink_mbit=8.0, probe_bits=3), CLIENTS, D, log=logs.append)
    bits, rates = planner.plan(1, 100)
    assert bits == {c: 3 for c in CLIENTS} and rates == {}          # probe: own links
    for c in CLIENTS:
        planner.offer(update(1, c, goodput=0.0, rate=0.0, at_link=False))
    planner.observe(1, CLIENTS)
    assert planner.plan(2, 100)[1] == {}                             # no upload measured yet
    links = dict(zip(CLIENTS, (2.5e5, 6.25e5, 1.25e6, 2.5e6)))
    for c in CLIENTS:
        planner.offer(update(2, c, compute_s=2.0 if c < "client-2" else 8.0, goodput=0.88 * links[c], rate=links[c]))
    planner.offer(update(3, "client-0"))                             # a later round's report waits for its round
    planner.observe(2, CLIENTS)
    bits, rates = planner.plan(3, 100)
    assert set(rates) == set(CLIENTS) and sum(rates.values()) <= 1e6
    assert all(rates[c] <= links[c] for c in CLIENTS)
    # A bad report (NaN goodput): that client goes back to the probe setting, the others keep theirs.
    planner.offer(update(3, "client-1", goodput=math.nan))
    planner.observe(3, ["client-1"])
    bits, rates = planner.plan(4, 100)
    assert bits["client-1"] == 3 and "client-1" not in rates and sum(rates.values()) <= 1e6 * 3 / 4
    assert any("bad report from client-1" in line for line in logs)


def test_planner_never_goes_below_min_bits():
    """beta 0 (quantization noise costs no rounds, as fitted on 2..8 bits) would pick the smallest
    frames: min_bits keeps the choice inside the fitted range, and only the rates are allocated."""
    from commlab.fl.adaptive.section import AdaptiveSection
    planner = Planner(AdaptiveSection(total_uplink_mbit=8.0, beta=0.0, min_bits=2), CLIENTS, D, log=lambda s: None)
    for rnd, c in ((1, "client-0"), (1, "client-1"), (1, "client-2"), (1, "client-3")):
        planner.offer(update(rnd, c, compute_s=8.0 if c == "client-3" else 2.0))
    planner.observe(1, CLIENTS)
    for c in CLIENTS:
        planner.offer(update(2, c, compute_s=8.0 if c == "client-3" else 2.0))
    planner.observe(2, CLIENTS)
    bits, rates = planner.plan(3, 100)
    # The round's slowest client gets the fewest bits allowed; others may take more where their
    # slack leaves the round time unchanged (ties go to more bits).
    assert min(bits.values()) == 2 and bits["client-3"] == 2 and sum(rates.values()) <= 1e6 * (1 + 1e-9)
    assert rates["client-3"] == max(rates.values())  # the slow computer uploads fastest
    free = Planner(AdaptiveSection(total_uplink_mbit=8.0, beta=0.0), CLIENTS, D, log=lambda s: None)
    free.estimates = planner.estimates
    assert free.plan(3, 100)[0]["client-3"] == 1   # without the floor: the smallest frame


def test_planner_allocates_from_reported_frame_sizes_and_rejects_bad_ones():
    """qsgdz: the controller weighs bits by each client's reported frame sizes; a bad report
    sends that client back to the probe setting."""
    from commlab.fl.adaptive.section import AdaptiveSection
    logs = []
    planner = Planner(AdaptiveSection(total_uplink_mbit=8.0, beta=0.0, probe_bits=2), CLIENTS, D, log=logs.append,
                      family="qsgdz")
    assert planner.plan(1, 100)[0] == {c: 2 for c in CLIENTS}
    assert "qsgdz3" in logs[-1]
    # Sizes that fall to 8 bits (not what qsgdz does, but a case the codec's bound cannot produce).
    sizes = {str(q): 400_000 - 40_000 * q for q in BITS}
    for rnd in (1, 2):
        for c in CLIENTS:
            msg = update(rnd, c, compute_s=8.0 if c == "client-3" else 2.0)
            msg.frame_bytes_by_bits = sizes
            planner.offer(msg)
        planner.observe(rnd, CLIENTS)
    bits, rates = planner.plan(3, 100)
    assert bits == {c: 8 for c in CLIENTS} and sum(rates.values()) <= 1e6 * (1 + 1e-9)
    msg = update(3, "client-2")
    msg.frame_bytes_by_bits = {**sizes, "8": "many"}
    planner.offer(msg)
    planner.observe(3, ["client-2"])
    bits, rates = planner.plan(4, 100)
    assert bits["client-2"] == 2 and "client-2" not in rates and "client-2" not in planner.size_estimates
    assert any("bad report from client-2 (frame size at 8 bits" in line for line in logs)


def test_planner_equal_policy():
    from commlab.fl.adaptive.section import AdaptiveSection
    planner = Planner(AdaptiveSection(policy="equal", total_uplink_mbit=8.0, fixed_bits=2), CLIENTS, D, log=lambda s: None)
    for rnd in (1, 2):  # the same probe rounds as joint: own links
        assert planner.plan(rnd, 100) == ({c: 2 for c in CLIENTS}, {})
    assert planner.plan(3, 100) == ({c: 2 for c in CLIENTS}, {c: 2.5e5 for c in CLIENTS})


def test_equal_rates_with_any_codec(tmp_path):
    """--fixed-bits codec: the equal split of B for a run's own codec (fp32, int8_sparse...), no bits."""
    controller, _ = configs(tmp_path, "--codec", "int8_sparse", "--adaptive", "equal", "--fixed-bits", "codec",
                            "--total-uplink-mbit", "8")
    cfg = from_dict(ControllerConfig, controller)
    assert cfg.adaptive.fixed_bits is None and not cfg.adaptive.sets_bits
    planner = Planner(cfg.adaptive, CLIENTS, D, log=lambda s: None)
    assert planner.plan(2, 100) == ({}, {})
    assert planner.plan(3, 100) == ({}, {c: 2.5e5 for c in CLIENTS})
    side = ClientSide("client-0", "hetero4", "lo", log=lambda s: None)
    assert side.codec_params(cmd(codec="int8_sparse", client_rates_Bps={"client-0": 2.5e5})) == {}
    with pytest.raises(SystemExit):
        configs(tmp_path, "--adaptive", "equal", "--fixed-bits", "four")


def test_joint_rates_with_any_codec(tmp_path):
    """--adaptive joint --fixed-bits codec: the run's own codec for everyone, only the rates
    allocated, from each client's compute and its last accepted frame's size."""
    controller, _ = configs(tmp_path, "--codec", "int8_sparse", "--adaptive", "joint", "--fixed-bits", "codec",
                            "--total-uplink-mbit", "8")
    cfg = from_dict(ControllerConfig, controller)
    assert cfg.adaptive.policy == "joint" and not cfg.adaptive.sets_bits
    planner = Planner(cfg.adaptive, CLIENTS, D, log=lambda s: None)
    assert planner.plan(1, 100) == ({}, {})
    links = dict(zip(CLIENTS, (2.5e5, 6.25e5, 1.25e6, 2.5e6)))
    for rnd in (1, 2):
        for c in CLIENTS:
            msg = update(rnd, c, compute_s=8.0 if c == "client-3" else 2.0, goodput=links[c], rate=links[c])
            msg.payload = bytes(300_000)
            planner.offer(msg)
        planner.observe(rnd, CLIENTS)
    assert planner.frame_bytes == {c: 300_000 for c in CLIENTS}
    bits, rates = planner.plan(3, 100)
    assert bits == {} and set(rates) == set(CLIENTS) and sum(rates.values()) <= 1e6
    assert rates["client-3"] == max(rates.values()) > 2.5e5  # the slow computer gets more than B / M
    assert planner.last.round_time_s < 8.0 + 300_000 / 2.5e5   # sooner than the equal split's slowest


def cmd(codec="qsgd15", **kw):
    return TrainCmd(round=3, epochs=1, lr=0.1, subset_size=10, codec=codec, **kw)


def test_client_side_codec_and_reports(monkeypatch):
    logs = []
    side = ClientSide("client-0", "hetero4", "lo", speed_factor=0.5, log=logs.append)
    assert side.link_bps == 2e6 and not side.can_shape            # loopback: never shaped
    assert side.codec_params(cmd()) == {} and side.bits is None
    assert side.codec_params(cmd(client_bits={"client-0": 2, "client-1": 8})) == {"levels": 3} and side.bits == 2
    assert side.codec_params(cmd(client_bits={"client-0": 9})) == {} and "ignoring bits 9" in logs[-1]
    assert side.codec_params(cmd(client_bits={"client-0": True})) == {} and side.bits is None
    side.before_upload(cmd(client_rates_Bps={"client-0": 1e5}))
    assert "NOT applied" in logs[-1]
    import commlab.fl.adaptive.shaping
    slept: list[float] = []
    with monkeypatch.context() as patched:  # the sleep it asks for, not a measured one (load-independent)
        patched.setattr(commlab.fl.adaptive.shaping.time, "sleep", slept.append)
        side.stretch(0.05)
    assert slept == [pytest.approx(0.05)]                           # speed 0.5: as long again

    class Pub:
        def wait_for_acks(self, timeout_s):
            return True
    import time
    side.after_upload(cmd(client_bits={"client-0": 2}), 1000, time.perf_counter() - 0.01, Pub(), 1.0)
    report = side.report(1.5)
    assert report["compute_s"] == 1.5 and 0 < report["prev_upload_Bps"] <= 1e5
    assert report["prev_rate_Bps"] == 0.0 and report["prev_at_link_rate"]
    row = side.row(0.1)
    assert row["rate_bps"] == "" and row["stretch_s"] == 0.1 and row["upload_s"] > 0
    # Entropy-coded frames: the client names its frame sizes at every bits; fixed-width: nothing.
    vec = heavy_tailed_update(50_000)
    params = side.codec_params(cmd(codec="qsgdz15", client_bits={"client-0": 3}, codec_params={"bucket": 256}))
    assert params == {"bucket": 256, "levels": 7}
    codec = get_codec("qsgdz15", **params)
    sent = len(codec.encode(vec))
    sizes = side.size_report(codec, vec, sent)
    assert sorted(sizes) == [str(q) for q in BITS] and sizes["3"] == sent
    assert side.size_report(get_codec("qsgd", **side.codec_params(cmd(client_bits={"client-0": 3}))), vec, 1000) == {}


def test_allocated_rate_holds_for_the_upload_only(monkeypatch):
    """The uplink is shaped to the allocated rate for the upload, then back to the client's own
    link, so the next broadcast's acknowledgements do not queue behind an upload's share of B."""
    import commlab.links.profiles
    applied = []
    monkeypatch.setattr(commlab.links.profiles, "set_rate", lambda bps, queue_floor: applied.append(bps))
    side = ClientSide("client-0", "hetero4", "lo", log=lambda s: None)
    side.can_shape, side.rate_bps = True, side.link_bps                  # as in its own namespace

    class Pub:
        def wait_for_acks(self, timeout_s):
            assert applied[-1] == 0.25e6                                  # still the allocated rate
            return True
    import time
    command = cmd(client_bits={"client-0": 2}, client_rates_Bps={"client-0": 0.25e6 / 8})
    side.before_upload(command)
    side.after_upload(command, 30_000, time.perf_counter() - 1.0, Pub(), 1.0)
    assert applied == [0.25e6, 2e6] and side.rate_bps == 2e6
    assert side.row(0.0)["rate_bps"] == 0.25e6                           # the csv: the upload's rate
    assert side.report(1.0)["prev_rate_Bps"] == 0.25e6 / 8 and not side.report(1.0)["prev_at_link_rate"]
    side.before_upload(command)
    assert applied == [0.25e6, 2e6, 0.25e6]


@pytest.mark.slow
@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="network namespaces need root")
def test_rate_change_is_really_applied(claims):
    """netem.set_rate on a shaped link: TCP goodput over it within 10 % of the new rate."""
    import subprocess
    import time

    from commlab.links.profiles import apply_link, set_rate
    from commlab.links.spec import LinkSpec
    tag = claims.take("lab")
    a, b = f"cl{tag}-a", f"cl{tag}-b"
    ns = lambda n, *cmd: ["ip", "netns", "exec", n, *cmd]  # noqa: E731
    try:
        for n in (a, b):
            subprocess.run(["ip", "netns", "add", n], check=True)
        subprocess.run(["ip", "link", "add", "eth0", "netns", a, "type", "veth", "peer", "name", "eth0", "netns", b],
                       check=True)
        for n, addr in ((a, "198.18.77.1/24"), (b, "198.18.77.2/24")):
            subprocess.run(ns(n, "ip", "addr", "add", addr, "dev", "eth0"), check=True)
            subprocess.run(ns(n, "ip", "link", "set", "eth0", "up"), check=True)
        apply_link(LinkSpec("20mbit"), "eth0", ns(a))
        set_rate(4e6, "eth0", ns(a))
        nbytes = 1_500_000
        sink = subprocess.Popen(ns(b, sys.executable, "-c", (
            "import socket,time\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
            "s.bind(('198.18.77.2',5099));s.listen(1);c,_=s.accept();n=0\n"
            "while True:\n d=c.recv(65536)\n if not d: break\n n+=len(d)\nc.sendall(b'k');print(n)")),
            stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        src = ("import socket,time\ns=socket.create_connection(('198.18.77.2',5099));t=time.perf_counter()\n"
               f"s.sendall(bytes({nbytes}));s.shutdown(socket.SHUT_WR);s.recv(1);print(time.perf_counter()-t)")
        seconds = float(subprocess.run(ns(a, sys.executable, "-c", src), capture_output=True, text=True,
                                       check=True, timeout=60).stdout)
        assert int(sink.communicate(timeout=10)[0]) == nbytes
        rate = nbytes * 8 / seconds
        # Payload goodput: the TCP/IP/Ethernet headers take about 4 % of the wire.
        assert 0.9 * 4e6 <= rate / (1460 / 1514) <= 1.1 * 4e6, rate
    finally:
        for n in (a, b):
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


@pytest.mark.slow
@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="network namespaces need root")
def test_adaptive_run_in_namespaces(tmp_path, domain):
    """A short joint run on hetero4 (2 clients: 2 and 5 Mbit/s): rounds 1-2 probe at the links,
    then every client gets bits and a rate within its link and the budget, and its measured
    payload goodput follows the rate it was shaped to."""
    import csv

    from commlab.testbed.netns_run import run_fl_netns
    ctl, clients = build_configs(parse_args([
        "--codec", "qsgdz15", "--adaptive", "joint", "--total-uplink-mbit", "4", "--clients", "2", "--rounds", "4",
        "--samples-per-round", "64", "--train-subset", "2000", "--test-subset", "300", "--profile", "hetero4",
        "--speed-factors", "1,0.5", "--results-dir", str(tmp_path), "--run-id", "adaptive-ns", "--domain-id", str(domain)]))
    run_dir = run_fl_netns(ctl, clients, "hetero4", net=246)
    rows = {i: list(csv.DictReader(open(run_dir / f"clients-{i}.csv"))) for i in range(2)}
    links = (2e6, 5e6)
    for i, link in enumerate(links):
        assert [float(r["rate_bps"]) for r in rows[i][:2]] == [link, link]           # probe: own link
        assert [int(r["bits"]) for r in rows[i][:2]] == [4, 4]
        assert float(rows[i][1]["stretch_s"]) > 0 if i == 1 else float(rows[i][1]["stretch_s"]) == 0
    for rnd in (2, 3):
        rates = [float(rows[i][rnd]["rate_bps"]) for i in range(2)]
        assert sum(rates) <= 4e6 * 1.0001 and all(r <= link for r, link in zip(rates, links))
        for i in range(2):
            assert 1 <= int(rows[i][rnd]["bits"]) <= 8
            efficiency = float(rows[i][rnd]["goodput_Bps"]) * 8 / rates[i]
            assert 0.5 <= efficiency <= 1.05, (i, rnd, efficiency)
