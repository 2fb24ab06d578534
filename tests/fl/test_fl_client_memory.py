"""A client's compression memory across rounds (commlab.fl.client_memory): the frames it sends
are those of one compressor encoding round after round, a round run again sends the same frame,
and a rebuilt compressor continues from the client's state."""
from __future__ import annotations

import numpy as np
import pytest

from commlab.codecs import CodecError, build_compression
from commlab.fl.client_memory import ClientMemory

LAYOUT = [("w", (300,)), ("b", (20,))]


def deltas(rounds: int) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.standard_normal(320).astype(np.float32) for _ in range(rounds)]


@pytest.mark.parametrize("codec", ["int8_sparse", "dgc"])
def test_rounds_through_the_memory_send_what_one_compressor_sends(codec):
    reference = build_compression(codec, {}, LAYOUT)
    expected = [reference.encode(d) for d in deltas(4)]
    memory, compression = ClientMemory(), build_compression(codec, {}, LAYOUT)
    sent = [memory.encode(0, rnd, d, compression) for rnd, d in enumerate(deltas(4), start=1)]
    assert sent == expected


def test_a_round_run_again_from_files_sends_the_same_frame_and_a_rebuilt_compressor_goes_on(tmp_path):
    reference = build_compression("int8_sparse", {}, LAYOUT)
    expected = [reference.encode(d) for d in deltas(3)]
    memory, compression = ClientMemory(tmp_path), build_compression("int8_sparse", {}, LAYOUT)
    d1, d2, d3 = deltas(3)
    assert memory.encode(0, 1, d1, compression) == expected[0]
    assert memory.encode(0, 2, d2, compression) == expected[1]
    assert memory.encode(0, 2, d2, compression) == expected[1]  # from the state before round 2, not after it
    rebuilt = build_compression("int8_sparse", {}, LAYOUT)  # e.g. after an encode the codec refused
    assert memory.encode(0, 3, d3, rebuilt) == expected[2]


def test_in_ram_a_round_run_again_is_refused_and_leaves_the_state_after_it():
    """In memory no state before a round is kept (the process resends the frame it sent): a
    second encode of a round is refused in one line, and the next round still goes on from the
    state after the first encode, in a rebuilt compressor too."""
    reference = build_compression("int8_sparse", {}, LAYOUT)
    expected = [reference.encode(d) for d in deltas(3)]
    memory, compression = ClientMemory(), build_compression("int8_sparse", {}, LAYOUT)
    d1, d2, d3 = deltas(3)
    assert memory.encode(0, 1, d1, compression) == expected[0]
    assert memory.encode(0, 2, d2, compression) == expected[1]
    with pytest.raises(ValueError, match="round 2 encoded again"):
        memory.encode(0, 2, d2, compression)
    rebuilt = build_compression("int8_sparse", {}, LAYOUT)
    assert memory.encode(0, 3, d3, rebuilt) == expected[2]


def test_in_ram_a_second_client_is_refused():
    memory = ClientMemory()
    memory.encode(0, 1, deltas(1)[0], build_compression("int8_sparse", {}, LAYOUT))
    with pytest.raises(ValueError, match="holds client 0, asked to encode client 1"):
        memory.encode(1, 1, deltas(1)[0], build_compression("int8_sparse", {}, LAYOUT))


def test_in_ram_a_refused_encode_starts_the_client_afresh():
    """The refused encode consumed error feedback's residual (compensated in place): the client's
    next round encodes as a fresh compressor does."""
    memory, compression = ClientMemory(), build_compression("int8_sparse", {}, LAYOUT)
    d1, d2 = deltas(2)
    memory.encode(0, 1, d1, compression)
    with pytest.raises(CodecError, match="shape"):
        memory.encode(0, 2, d2[:7], compression)  # the wrong size: refused
    assert memory.encode(0, 3, d2, build_compression("int8_sparse", {}, LAYOUT)) == \
        build_compression("int8_sparse", {}, LAYOUT).encode(d2)
