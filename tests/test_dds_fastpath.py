"""The hand-written Chunk codec against the cyclonedds binding, and the non-public binding calls the
fast path uses: these fail if cyclonedds (pinned to 11.0.1) changes underneath us."""
from __future__ import annotations

import inspect
from importlib.metadata import version

import cyclonedds.pub
import cyclonedds.sub
import pytest

from commlab.dds import DdsNode, DdsSettings, MessageError
from commlab.dds.chunk import Chunk, Encoder, decode, encode

CASES = [(n, sender, meta) for n in (0, 1, 2, 3, 5, 4099) for sender in ("", "a", "abc", "abcd", "worker-12")
         for meta in ("", "m", "mm", '{"key": "3/w", "rank": 1}', "é")]


def _chunk(n: int, sender: str, meta: str) -> Chunk:
    return Chunk(sender, 2**62 + 7, 8, 1, 2, n, meta, bytes(range(256)) * (n // 256) + b"x" * (n % 256))


def _binding_bytes(c: Chunk) -> bytes:
    stock = c.serialize()  # the stock binding, exactly as DataWriter.write calls it, then pads to 4
    return stock.ljust((len(stock) + 3) & ~3, b"\0")


def test_cyclonedds_is_the_pinned_version():
    assert version("cyclonedds") == "11.0.1"


@pytest.mark.parametrize("n,sender,meta", CASES)
def test_encode_is_byte_identical_to_the_binding(n, sender, meta):
    assert encode(_chunk(n, sender, meta)) == _binding_bytes(_chunk(n, sender, meta))


def test_reused_encoder_buffer_gives_the_same_bytes_as_encode():
    # The writer's reused buffer shrinks and grows between chunks; no stale byte may leak through.
    enc = Encoder()
    for n, sender, meta in CASES + list(reversed(CASES)):
        c = _chunk(n, sender, meta)
        assert bytes(enc(c)) == _binding_bytes(c)


@pytest.mark.parametrize("n,sender,meta", CASES)
def test_decode_reads_what_the_binding_writes(n, sender, meta):
    c = _chunk(n, sender, meta)
    d = decode(_binding_bytes(c))
    assert (d.sender, d.incarnation, d.msg_id, d.index, d.count, d.total_bytes, d.meta) == \
        (c.sender, c.incarnation, c.msg_id, c.index, c.count, c.total_bytes, c.meta)
    assert bytes(d.payload) == c.payload
    assert Chunk.deserialize(encode(c)).payload == list(c.payload)


def test_decode_rejects_malformed_samples_with_message_error():
    good = encode(_chunk(100, "node", "{}"))
    for bad in (b"", b"\x00\x09\x00\x00" + good[4:], good[:30], good[:-60], good[:4] + b"\xff\xff\xff\x7f" + good[8:]):
        with pytest.raises(MessageError):
            decode(bad)


def test_writers_use_xcdr1_as_the_codec_assumes():
    with DdsNode("solo", DdsSettings(domain_id=179)) as node:
        assert node.publisher("ModelBlob")._writer.writer._use_version_2 is False


def test_binding_calls_we_bypass_are_unchanged():
    # endpoints.py calls ddspy_write(writer._ref, bytes) as DataWriter.write does after padding to 4;
    # reading.py calls ddspy_take(reader._ref, mask, N) and gets (bytes, SampleInfo) pairs as DataReader.take does.
    write_src = inspect.getsource(cyclonedds.pub.DataWriter.write)
    assert "ddspy_write(self._ref, ser)" in write_src and "ser.ljust((len(ser) + 4 - 1) & ~(4 - 1), b'\\0')" in write_src
    take_src = inspect.getsource(cyclonedds.sub.DataReader.take)
    assert "ddspy_take(use_reader, use_mask, N)" in take_src and "for (data, info) in ret:" in take_src
