"""The hand-written Chunk codec against the cyclonedds binding, and the C calls the fast path
makes through ctypes (cdr.py): these fail if cyclonedds (pinned to 11.0.1) changes underneath us."""
from __future__ import annotations

import ctypes
import dataclasses
import resource
import sys
import time
from importlib.metadata import version

import pytest
from cyclonedds.pub import DataWriter
from cyclonedds.qos import Policy, Qos
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from commlab.dds import DdsNode, DdsSettings, MessageError
from commlab.dds.cdr import (SampleInfo, SampleToFill, Taker, address_of, copy_into, serdata_size, serdata_to_ser, serdata_unref,
                             serdata_view, sertype_of, unfilled_bytes, writable_view, write_iov)
from commlab.dds.errors import DdsError
from commlab.dds.chunk import Chunk, PrefixTooShort, decode, decode_head, encode, encode_head, padding

from sample_messages import Blob

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


@pytest.mark.parametrize("n,sender,meta", CASES)
def test_decode_head_from_any_prefix_agrees_or_asks_for_more(n, sender, meta):
    data = _binding_bytes(_chunk(n, sender, meta))
    full = decode_head(data, len(data))
    assert data[full.payload_offset:full.payload_offset + full.payload_len] == _chunk(n, sender, meta).payload
    for cut in (4, 9, 24, 47, 64, full.payload_offset, len(data) - 1):
        if cut >= len(data):
            continue
        try:
            assert decode_head(data[:cut], len(data)) == full
        except PrefixTooShort:
            assert cut < full.payload_offset


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


@pytest.mark.slow
def test_writers_use_xcdr1_as_the_codec_assumes(domain):
    with DdsNode("solo", DdsSettings(domain_id=domain)) as node:
        assert node.publisher(Blob)._writer.writer._use_version_2 is False


def test_a_writable_view_fills_its_buffer_and_keeps_it_alive():
    """A receiver's worker may still decrypt into a view after its message was dropped: the view,
    not only the message, must hold the buffer."""
    buf = unfilled_bytes(10)
    view = writable_view(buf, 3, 4)
    view[:] = b"abcd"
    assert buf[3:7] == b"abcd"
    held = sys.getrefcount(buf)
    del view
    assert sys.getrefcount(buf) == held - 1


def test_sample_info_layout_is_cyclone_11():
    # dds_sample_info_t: three enums, bool, int64 timestamp, two handles, five uint32; 64 bytes
    assert ctypes.sizeof(SampleInfo) == 64
    assert SampleInfo.source_timestamp.offset == 16 and SampleInfo.publication_handle.offset == 32


@pytest.fixture
def local_pair(domain):
    """A stock writer and reader of Chunk in one participant (delivered locally, same serdata ops)."""
    with DdsNode("solo", DdsSettings(domain_id=domain)) as node:  # its XML keeps discovery on lo
        qos = Qos(Policy.Reliability.Reliable(max_blocking_time=duration(seconds=1)), Policy.History.KeepAll)
        topic = Topic(node.participant, "fastpath_probe", Chunk, qos=qos)
        yield DataWriter(node.participant, topic, qos=qos), DataReader(node.participant, topic, qos=qos)


def _take_all(reader: DataReader, n: int, in_place: bool = False) -> list[tuple[bytes, SampleInfo]]:
    """n samples, each copied out (or, in_place, read where it lies: the payload's path)."""
    taker, got, deadline = Taker(reader._ref, 16), [], time.monotonic() + 5
    while len(got) < n and time.monotonic() < deadline:
        k = taker.take()
        for i in range(k):
            d = taker.samples[i]
            size = serdata_size(d)
            if in_place:
                with serdata_view(d, 0, size) as view:
                    assert view.readonly
                    data = bytes(view)
            else:
                buf = bytearray(size)
                serdata_to_ser(d, 0, size, address_of(buf))
                data = bytes(buf)
            got.append((data, SampleInfo.from_buffer_copy(taker.infos[i])))
            serdata_unref(d)
        time.sleep(0.01 if not k else 0)
    return got


@pytest.mark.slow
def test_write_iov_is_read_back_by_the_stock_reader(local_pair):
    writer, reader = local_pair
    c = _chunk(4099, "worker-3", '{"key": "7/g", "rank": 2}')
    head = encode_head(c, len(c.payload))
    payload = bytes(c.payload)
    pieces = [(address_of(head), len(head)), (address_of(payload) + 1000, 3099), (address_of(payload), 1000)]
    wrong_order = Chunk(c.sender, c.incarnation, c.msg_id, c.index, c.count, c.total_bytes, c.meta, list(payload[1000:] + payload[:1000]))
    pad = padding(len(head), len(payload))
    assert write_iov(writer._ref, sertype_of(writer._ref), pieces + [(address_of(pad), len(pad))]) == 0
    got = reader.take(N=5)
    assert got == [wrong_order]  # the pieces are sent in the order given; the binding reads octets as a list


@pytest.mark.slow
@pytest.mark.parametrize("n", [0, 1, 4099])
def test_a_sample_filled_in_place_with_its_head_rewritten_is_read_back_by_the_stock_reader(local_pair, n):
    """How a sealed chunk is sent: the sample built around a head with a placeholder meta, the
    payload written into it afterwards, then the placeholder overwritten with the real meta's
    bytes; the padding is the zeros the sample was allocated with."""
    writer, reader = local_pair
    c = _chunk(n, "worker-3", '{"trailer": "' + "f" * 32 + '"}')
    placeholder = encode_head(c, n, '{"trailer": "' + "0" * 32 + '"}')
    sample = SampleToFill(sertype_of(writer._ref), placeholder, n, len(padding(len(placeholder), n)))
    assert sample.payload_bytes == n and sample.size == len(encode(c))
    copy_into(sample.payload_address, bytes(c.payload))
    at = placeholder.index(b"0" * 32)
    with pytest.raises(DdsError, match="do not fit a head of"):
        sample.overwrite_head(len(placeholder) - 2, b"fff")
    sample.overwrite_head(at, b"f" * 32)
    assert sample.write(writer._ref) == 0
    assert reader.take(N=5) == [dataclasses.replace(c, payload=list(c.payload))]  # the binding reads octets as a list


@pytest.mark.slow
def test_stock_writes_are_taken_serialized_with_their_sample_info(local_pair):
    writer, reader = local_pair
    chunks = [_chunk(n, "w", "m") for n in (0, 3, 70000)]
    before = time.time_ns()
    for c in chunks:
        writer.write(c)
    got = _take_all(reader, 3)
    assert [decode(data) for data, _ in got] == chunks
    assert [len(data) for data, _ in got] == [len(_binding_bytes(c)) for c in chunks]
    assert all(info.valid_data for _, info in got)
    assert all(before - 10**9 <= info.source_timestamp <= time.time_ns() + 10**9 for _, info in got)
    assert len({info.publication_handle for _, info in got}) == 1 and got[0][1].publication_handle != 0


@pytest.mark.slow
def test_a_taken_sample_reads_the_same_in_place_as_copied_out(local_pair):
    writer, reader = local_pair
    chunks = [_chunk(n, "w", "m") for n in (0, 3, 70000)]
    taken = []
    for in_place in (False, True):
        for c in chunks:
            writer.write(c)
        taken.append(_take_all(reader, 3, in_place))
    copied, in_place = taken
    assert [data for data, _ in in_place] == [data for data, _ in copied] == [encode(c) for c in chunks]
    with serdata_view(0, 0, 0) as empty:  # an empty payload touches no sample
        assert len(empty) == 0


@pytest.mark.slow
def test_written_and_taken_samples_are_released(local_pair):
    # write_iov's and SampleToFill's samples go to dds_writecdr, which must consume their reference
    # (a discarded one is released); the taker's
    # references are released by serdata_unref, and serdata_view's own when its block ends. A leak
    # anywhere keeps 1 MiB per sample.
    writer, reader = local_pair
    sertype, payload = sertype_of(writer._ref), bytes(1 << 20)
    c = Chunk("w", 1, 1, 0, 1, len(payload), "", payload)
    head = encode_head(c, len(payload))

    def round_trip(k: int) -> None:
        for _ in range(k):
            assert write_iov(writer._ref, sertype, [(address_of(head), len(head)), (address_of(payload), len(payload))]) == 0
            assert len(_take_all(reader, 1, in_place=True)) == 1
            filled = SampleToFill(sertype, head, len(payload), 0)
            copy_into(filled.payload_address, payload)
            assert filled.write(writer._ref) == 0
            assert len(_take_all(reader, 1, in_place=True)) == 1
            SampleToFill(sertype, head, len(payload), 0).discard()  # a sample of a write that failed before it
    round_trip(20)  # warm up the allocator
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    round_trip(300)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 100 * 1024  # KiB; a leak would be 300+ MiB
