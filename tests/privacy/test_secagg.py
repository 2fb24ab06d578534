"""SecAgg+: the controller's sum is bit-exactly the sum of the surviving clients' quantized
updates, clients may drop up to the threshold, and one client's masked input is uniform."""
import os
import random
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from commlab.privacy import shamir
from commlab.privacy.field import FieldQuantizer, field_steps
from commlab.privacy.secagg import SecAggClient, SecAggParams, decode_masked, encode_masked
from commlab.privacy.secagg_server import SecAggServer, run_in_process as run

LENGTH = 1000


def sampled_round(n: int = 10, degree: int = 8, threshold: int = 5, steps: int = 8, length: int = LENGTH,
                  seed: int = 0) -> tuple[SecAggParams, list[SecAggClient]]:
    """n of 100 clients sampled, each with a seeded source of randomness."""
    names = sorted(f"client-{i}" for i in np.random.default_rng(seed).choice(100, n, replace=False))
    params = SecAggParams(tuple(names), degree, threshold, graph_seed=seed,
                          quantizer=FieldQuantizer(bound=1.0, steps=steps, clients=n), length=length)
    return params, [SecAggClient(c, params, random.Random(f"{seed}-{c}").randbytes) for c in names]


def quantized(params, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {c: params.quantizer.encode(rng.normal(0, 0.3, params.length), rng) for c in params.clients}


@pytest.mark.parametrize("n", [10, 30])  # 30: each client shares with 8 of 29, a sparse graph
def test_three_drop_before_their_masked_input_the_sum_is_the_others(n):
    params, clients = sampled_round(n)
    levels = quantized(params)
    gone = {c.name for c in clients[2:5]}
    (total, count), _ = run(params, clients, levels, gone_before_masked=gone)
    plain = sum(levels[c].astype(np.int64) for c in params.clients if c not in gone)
    assert count == n - 3 and np.array_equal(total.astype(np.int64), plain)
    values = params.quantizer.decode_sum(total, count)
    assert np.allclose(values, sum(params.quantizer.decode_sum(levels[c], 1) for c in params.clients if c not in gone))


def test_three_drop_after_their_masked_input_their_updates_stay_in_the_sum():
    params, clients = sampled_round()
    levels = quantized(params)
    (total, count), _ = run(params, clients, levels, gone_before_unmask={c.name for c in clients[:3]})
    assert count == 10 and np.array_equal(total.astype(np.int64), sum(v.astype(np.int64) for v in levels.values()))


def test_too_many_drops_fail_with_the_missing_shares_named():
    params, clients = sampled_round(degree=4, threshold=3)
    with pytest.raises(ValueError, match="shares of 'client-\\d+'.s secret arrived, 3 are needed"):
        run(params, clients, quantized(params), gone_before_unmask={c.name for c in clients[:7]})


def chi_square(values: np.ndarray, bits: int, bins: int = 64) -> float:
    counts = np.bincount((values.astype(np.uint64) >> np.uint64(bits - 6)).astype(np.int64), minlength=bins)
    expected = values.size / bins
    return float(((counts - expected) ** 2 / expected).sum())


def test_one_clients_masked_input_is_uniform():
    # Every level of the client is the same; its masked input must still look uniform over the
    # field. Chi-square over 64 bins (63 degrees of freedom): below 130 at p = 1e-6; seeded.
    params, clients = sampled_round(length=64_000, degree=4, threshold=3)
    levels = {c: np.full(params.length, 5, np.uint32) for c in params.clients}
    _, masked = run(params, clients, levels)
    bits = params.quantizer.bits
    assert chi_square(masked[clients[0].name], bits) < 130
    assert chi_square(levels[clients[0].name], bits) > 130  # the statistic sees an unmasked input


def test_a_client_never_reveals_both_secrets_of_one_neighbour():
    params, clients = sampled_round()
    server = SecAggServer(params)
    keys = server.broadcast_keys({c.name: c.advertise() for c in clients})
    routed = server.route_shares({c.name: c.share_keys(keys) for c in clients})
    levels = quantized(params)
    client = clients[0]
    client.masked_input(routed[client.name], levels[client.name])
    neighbour = next(iter(routed[client.name]))
    with pytest.raises(ValueError, match="both a survivor and dropped"):
        client.unmask([client.name, neighbour], [neighbour])
    with pytest.raises(ValueError, match="fewer than the threshold"):
        client.unmask([client.name], [c for c in params.clients if c != client.name])


def test_tampered_shares_are_refused():
    params, clients = sampled_round()
    server = SecAggServer(params)
    keys = server.broadcast_keys({c.name: c.advertise() for c in clients})
    routed = server.route_shares({c.name: c.share_keys(keys) for c in clients})
    first = clients[0]
    sender, sealed = next(iter(routed[first.name].items()))
    routed[first.name][sender] = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(ValueError, match=f"shares from '{sender}' do not decrypt"):
        first.masked_input(routed[first.name], quantized(params)[first.name])


def test_masked_input_wire_round_trip_and_bad_frames():
    params, clients = sampled_round()
    bits = params.quantizer.bits
    values = np.random.default_rng(3).integers(0, 1 << bits, LENGTH, dtype=np.uint32)
    frame = encode_masked(values, bits)
    assert len(frame) == 9 + -(-LENGTH * bits // 8)
    assert np.array_equal(decode_masked(frame, bits, LENGTH), values)
    for bad, message in [(frame[:5], "shorter than its header"), (b"XXX" + frame[3:], "not a masked input"),
                         (frame[:-1], "body is"), (frame, "the round has 999")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            decode_masked(bad, bits, LENGTH - 1 if message.endswith("999") else LENGTH)


def test_codecs_map_to_field_steps_or_say_why_not():
    assert (field_steps("int8"), field_steps("qsgd4"), field_steps("qsgdz16"), field_steps("minmax4")) == (254, 8, 32, 15)
    for codec, reason in [("topk", "sparsity"), ("dgc", "sparsity"), ("powersgd", "low rank"), ("fp32", "not a quantizer")]:
        with pytest.raises(ValueError, match=f"^codec '{codec}' cannot be combined with secure aggregation: {reason}"):
            field_steps(codec)
    assert FieldQuantizer(1.0, 8, 10).bits == 7 and FieldQuantizer(1.0, 254, 100).bits == 15


def test_field_quantization_is_unbiased_and_bounded():
    q, rng = FieldQuantizer(bound=0.5, steps=8, clients=1), np.random.default_rng(4)
    x = np.linspace(-0.7, 0.7, 15)  # beyond the bound at both ends: clipped
    mean = np.mean([q.decode_sum(q.encode(x, rng), 1) for _ in range(4000)], axis=0)
    assert np.allclose(mean, np.clip(x, -0.5, 0.5), atol=0.01)


def test_shamir_needs_threshold_shares():
    secret, draw = bytes(range(32)), random.Random(5).randbytes
    shares = shamir.split(secret, 3, [1, 2, 3, 4, 5], draw)
    assert shamir.combine({x: shares[x] for x in (2, 4, 5)}, 3) == secret
    with pytest.raises(ValueError, match="2 shares, the secret needs 3"):
        shamir.combine({x: shares[x] for x in (1, 2)}, 3)


def test_params_refuse_a_threshold_of_half_the_neighbours():
    with pytest.raises(ValueError, match="threshold must be above half of the 6 neighbours"):
        sampled_round(degree=6, threshold=3)


CASES = int(os.environ.get("COMMLAB_FUZZ_CASES", "1000"))  # make fuzz: 10,000


@settings(max_examples=CASES, deadline=None)
@given(st.binary(max_size=40), st.integers(0, 60), st.integers(0, 60))
def test_masked_frames_from_untrusted_clients_decode_or_raise_value_error(junk, cut, at):
    bits, length = 7, 40
    frame = bytearray(encode_masked(np.arange(length, dtype=np.uint32), bits))
    frame[at % len(frame):at % len(frame) + len(junk)] = junk  # overwrite a stretch, maybe grow or shrink
    frame = bytes(frame[:len(frame) - cut % 5])
    try:
        values = decode_masked(frame, bits, length)
    except ValueError:
        return
    assert values.shape == (length,) and values.dtype == np.uint32 and int(values.max()) < 1 << bits


@settings(max_examples=CASES // 10, deadline=None)
@given(st.binary(max_size=200))
def test_sealed_shares_of_random_bytes_are_refused(sealed):
    params, clients = sampled_round()
    server = SecAggServer(params)
    keys = server.broadcast_keys({c.name: c.advertise() for c in clients})
    clients[0].share_keys(keys)
    neighbour = params.neighbours(clients[0].name)[0]
    with pytest.raises(ValueError, match="do not decrypt"):
        clients[0].masked_input({neighbour: sealed}, np.zeros(params.length, np.uint32))
