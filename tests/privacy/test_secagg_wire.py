"""SecAgg+ in FL rounds, without processes: the payloads of the key, share and unmask steps round
trip and refuse malformed input with a line naming the problem; the `secagg` config section and
its launcher flags refuse what cannot be combined; a round over the wire formats sums exactly."""
from __future__ import annotations

import base64
import json
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from commlab.config.schema import ConfigError, from_dict
from commlab.fl import secagg_wire as wire
from commlab.fl.config import ControllerConfig
from commlab.fl.run import build_configs, parse_args
from commlab.privacy.update_grid import clipped
from commlab.privacy.secagg import SecAggClient, UnmaskReply
from commlab.privacy.secagg_server import SecAggServer

CLIENTS = ["client-0", "client-1", "client-2", "client-3"]


def params(length: int = 50):
    return wire.params_of(wire.round_params(2, 3, 0.5, 7, False), CLIENTS, "int8", length)


def test_a_round_through_the_wire_formats_sums_exactly():
    p = params()
    rng = np.random.default_rng(0)
    levels = {c: p.quantizer.encode(rng.normal(0, 0.1, p.length), rng) for c in CLIENTS}
    parties = {c: SecAggClient(c, p) for c in CLIENTS}
    server, names = SecAggServer(p), set(CLIENTS)
    keys = {c: wire.decode_own_keys(wire.encode_keys({c: s.advertise()}), c) for c, s in parties.items()}
    relayed = wire.decode_keys(wire.encode_keys(server.broadcast_keys(keys)), names)
    sent = {c: wire.decode_shares(wire.encode_shares(s.share_keys(relayed)), names) for c, s in parties.items()}
    routed = {c: wire.decode_shares(wire.encode_shares(r), names) for c, r in server.route_shares(sent).items()}
    survivors, dropped = server.receive_masked({c: parties[c].masked_input(routed[c], levels[c]) for c in CLIENTS[:3]})
    survivors, dropped = wire.decode_unmask_request(wire.encode_unmask_request(survivors, dropped), names)
    replies = {c: wire.decode_unmask_reply(wire.encode_unmask_reply(parties[c].unmask(survivors, dropped)), c, names)
               for c in survivors}
    total, count = server.aggregate(replies)
    expected = sum(levels[c].astype(np.uint64) for c in CLIENTS[:3]) % p.quantizer.modulus
    assert count == 3 and np.array_equal(total, expected.astype(np.uint32))


@pytest.mark.parametrize("payload, decode, message", [
    (b"\xff", lambda d: wire.decode_keys(d, set(CLIENTS)), "not JSON"),
    (json.dumps({"v": 2, "kind": "keys", "keys": {}}).encode(), lambda d: wire.decode_keys(d, set(CLIENTS)), "version 1"),
    (json.dumps({"v": 1, "kind": "shares", "shares": {}}).encode(), lambda d: wire.decode_keys(d, set(CLIENTS)), "keys payload"),
    (json.dumps({"v": 1, "kind": "keys", "keys": {"mallory": ["", ""]}}).encode(),
     lambda d: wire.decode_keys(d, set(CLIENTS)), "this round's clients"),
    (json.dumps({"v": 1, "kind": "keys", "keys": {"client-0": [base64.b64encode(b"x" * 31).decode(), ""]}}).encode(),
     lambda d: wire.decode_keys(d, set(CLIENTS)), "base64 of 32 bytes"),
    (json.dumps({"v": 1, "kind": "shares", "shares": {"client-1": "!!"}}).encode(),
     lambda d: wire.decode_shares(d, set(CLIENTS)), "shares of 'client-1'"),
    (json.dumps({"v": 1, "kind": "unmask", "survivors": ["client-0", 3], "dropped": []}).encode(),
     lambda d: wire.decode_unmask_request(d, set(CLIENTS)), "survivors and dropped"),
    (json.dumps({"v": 1, "kind": "reply", "self_mask": {"client-1": "-5"}, "mask_key": {}}).encode(),
     lambda d: wire.decode_unmask_reply(d, "client-0", set(CLIENTS)), "not an element of the field"),
    (json.dumps({"v": 1, "kind": "reply", "self_mask": {}, "mask_key": {"client-1": str(2 ** 521)}}).encode(),
     lambda d: wire.decode_unmask_reply(d, "client-0", set(CLIENTS)), "not an element of the field"),
])
def test_malformed_payloads_are_refused_naming_the_problem(payload, decode, message):
    with pytest.raises(ValueError, match=message):
        decode(payload)


def test_a_client_advertises_its_own_keys_only():
    theirs = wire.encode_keys({"client-1": SecAggClient("client-1", params()).advertise()})
    with pytest.raises(ValueError, match="this round's clients"):
        wire.decode_own_keys(theirs, "client-0")
    with pytest.raises(ValueError, match="do not include its own"):
        wire.decode_own_keys(wire.encode_keys({}), "client-0")


def test_two_clients_are_each_others_only_neighbour():
    p = wire.params_of(wire.round_params(1, 1, 1.0, 0, False), CLIENTS[:2], "int8", 5)
    assert p.neighbours("client-0") == ["client-1"] and p.neighbour_count == 1
    with pytest.raises(ValueError, match="degree must be even"):
        wire.params_of(wire.round_params(1, 1, 1.0, 0, False), CLIENTS, "int8", 5)


def test_round_parameters_are_checked_before_use():
    good = wire.round_params(2, 3, 0.5, 7, False)
    assert wire.params_of(good, CLIENTS, "qsgd4", 10).quantizer.steps == 8
    with pytest.raises(ValueError, match="version"):
        wire.params_of({**good, "v": 9}, CLIENTS, "int8", 10)
    with pytest.raises(ValueError, match="threshold is missing or not a number"):
        wire.params_of({**good, "threshold": "2"}, CLIENTS, "int8", 10)
    with pytest.raises(ValueError, match="cannot be combined"):
        wire.params_of(good, CLIENTS, "topk", 10)
    for noise in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="noise must be a finite number >= 0"):
            wire.params_of({**good, "noise": noise}, CLIENTS, "int8", 10)
    # z on the sum of the round's clients, in levels of width 2 * clip / steps: z * steps / 2.
    noised = wire.round_params(2, 3, 0.5, 7, False, noise=0.5)
    assert wire.params_of(noised, CLIENTS, "qsgd4", 10).quantizer.noise_std == 2.0
    with pytest.raises(ValueError, match="a rotated grid carries no DP noise"):
        wire.params_of({**noised, "rotate": True}, CLIENTS, "int8", 10)
    with pytest.raises(ValueError, match="rotate is missing or not a flag"):
        wire.params_of({**good, "rotate": 1}, CLIENTS, "int8", 10)
    with pytest.raises(ValueError, match="clip must be a finite number > 0"):
        wire.params_of({**good, "clip": 0.0}, CLIENTS, "int8", 10)
    # Without noise the update is rotated: the clients send its padded length of levels.
    assert (wire.params_of(good, CLIENTS, "int8", 5000).length, wire.params_of(noised, CLIENTS, "int8", 5000).length) \
        == (8192, 5000)
    assert UnmaskReply("client-0", {}, {}) == wire.decode_unmask_reply(
        wire.encode_unmask_reply(UnmaskReply("client-0", {}, {})), "client-0", set(CLIENTS))


def test_clipping_bounds_the_norm_and_leaves_small_updates_alone():
    big, small = np.full(100, 1.0, np.float32), np.full(100, 0.01, np.float32)
    assert np.linalg.norm(clipped(big, 2.0)) == pytest.approx(2.0, rel=1e-6)
    assert clipped(small, 2.0) is small


def controller(*flags: str) -> ControllerConfig:
    return from_dict(ControllerConfig, build_configs(parse_args(["--secagg", "--clients", "4", *flags]))[0])


def test_the_launcher_flags_make_the_secagg_section():
    cfg = controller("--codec", "int8", "--secagg-threshold", "3", "--secagg-clip", "0.5", "--per-round", "4")
    assert (cfg.secagg.threshold, cfg.secagg.neighbours, cfg.secagg.clip) == (3, None, 0.5)
    assert cfg.secagg.for_round(4) == (3, 3) and cfg.secagg.for_round(3) == (2, 2)


@pytest.mark.parametrize("flags, message", [
    (("--codec", "topk"), "codec.name: codec 'topk' cannot be combined with secure aggregation: sparsity"),
    (("--codec", "powersgd"), "low rank"),
    (("--codec", "fp32"), "not a quantizer"),
    (("--codec", "int8", "--strategy", "median"), "secagg: needs strategy fedavg"),
    (("--codec", "int8", "--strategy", "fedbuff"), "secagg: needs strategy fedavg"),
    (("--codec", "int8", "--procs", "2"), "secagg: not with procs"),
    (("--codec", "int8", "--dp-noise", "1.0", "--dp-delta", "1e-3", "--dp-clip", "2", "--secagg-clip", "1"),
     "privacy.clip_norm: 2.0 differs from secagg.clip 1.0"),
    (("--codec", "int8", "--dp-noise", "0.5", "--dp-delta", "1e-3", "--dp-adaptive", "--dp-count-stddev", "1"),
     "privacy.adaptive_clipping: not with secagg"),
    (("--codec", "int8", "--per-round", "1"), "secagg: needs at least 2 clients per round"),
    (("--codec", "int8", "--secagg-threshold", "1"), "threshold must be above half of the 3 neighbours"),
    (("--codec", "int8", "--secagg-neighbours", "5"), "secagg.neighbours: 5 is more than the other 3"),
    (("--codec", "int8", "--secagg-clip", "0"), "secagg.clip: must be > 0"),
])
def test_what_cannot_be_combined_is_refused_in_one_line(flags, message):
    with pytest.raises(ConfigError, match=message) as e:
        controller(*flags)
    assert "\n" not in str(e.value)


CASES = int(os.environ.get("COMMLAB_FUZZ_CASES", "1000"))  # make fuzz: 10,000
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**600, 2**600) | st.text(max_size=12),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=9), inner, max_size=3),
                           max_leaves=8)
DECODERS = {"keys": lambda d: wire.decode_own_keys(d, "client-0"), "shares": lambda d: wire.decode_shares(d, set(CLIENTS)),
            "unmask": lambda d: wire.decode_unmask_request(d, set(CLIENTS)),
            "reply": lambda d: wire.decode_unmask_reply(d, "client-0", set(CLIENTS))}


@settings(max_examples=CASES, deadline=None)
@given(st.sampled_from(sorted(DECODERS)), st.dictionaries(st.sampled_from(["keys", "shares", "survivors", "dropped",
                                                                           "self_mask", "mask_key", "x"]), JSON_VALUES),
       st.sampled_from(CLIENTS + ["mallory"]), st.binary(max_size=12))
def test_untrusted_step_payloads_decode_or_raise_value_error(kind, body, name, junk):
    """Any JSON body (and any bytes) of a step payload: its value, or a ValueError, never another exception."""
    doc = {"v": 1, "kind": kind, **body}
    if isinstance(body.get(kind), dict):  # reach the per-client checks too
        doc[kind] = {name: v for v in body[kind].values()}
    for data in (json.dumps(doc).encode(), junk):
        try:
            DECODERS[kind](data)
        except ValueError:
            pass
