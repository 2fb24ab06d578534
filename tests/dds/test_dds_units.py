"""Single-process tests of the DDS transport pieces: config XML, chunking, reassembly, messages, stats."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commlab.dds import CommStats, DdsSettings, MessageError, wire_bytes
from commlab.dds.chunk import Chunk, decode_head, encode, split
from commlab.dds.messages import from_wire, message_type, to_wire
from commlab.dds.reassembly import MAX_MESSAGE_BYTES, Assembled, Reassembler
from commlab.dds.settings import LOOPBACK_CHUNK, MTU_CHUNK, socket_buffer_bytes

from sample_messages import Blob, Reply, Request


def test_local_xml_pins_loopback_and_never_multicasts():
    xml = DdsSettings(domain_id=7, lease_s=2.0).to_xml()
    assert '<NetworkInterface name="lo"/>' in xml
    assert '<Peer address="127.0.0.1"/>' in xml
    assert "<AllowMulticast>false</AllowMulticast>" in xml
    assert "<LeaseDuration>2.0s</LeaseDuration>" in xml
    assert "<MaxAutoParticipantIndex>64</MaxAutoParticipantIndex>" in xml


def test_socket_buffers_never_exceed_rmem_max():
    with open("/proc/sys/net/core/rmem_max") as f:
        limit = int(f.read())
    assert socket_buffer_bytes("rmem_max") <= limit
    assert f'SocketReceiveBufferSize min="{socket_buffer_bytes("rmem_max")}B"' in DdsSettings(domain_id=1).to_xml()


def test_netns_xml_uses_own_interface_and_mtu_fragments():
    s = DdsSettings(domain_id=3, interface="veth1", peers=("198.18.0.1", "198.18.0.2"), loopback_tuned=False,
                    datagram_frames=1)
    xml = s.to_xml()
    assert '<NetworkInterface name="veth1"/>' in xml and '<Peer address="198.18.0.2"/>' in xml
    assert "<FragmentSize>1344B</FragmentSize>" in xml and "<MaxMessageSize>1456B</MaxMessageSize>" in xml
    # The default: datagrams of 6 whole frames of 1480 IP payload bytes, and a fixed send window.
    xml = DdsSettings(domain_id=3, interface="veth1", loopback_tuned=False).to_xml()
    assert "<MaxMessageSize>8856B</MaxMessageSize>" in xml and "<FragmentSize>8744B</FragmentSize>" in xml
    assert "<WhcHigh>32768B</WhcHigh>" in xml and "<WhcAdaptive>false</WhcAdaptive>" in xml
    with pytest.raises(ValueError, match="datagram_frames"):
        DdsSettings(domain_id=3, loopback_tuned=False, datagram_frames=45)
    assert "<AllowMulticast>spdp</AllowMulticast>" in DdsSettings(domain_id=3, interface="eth0", peers=()).to_xml()


def test_lossy_links_get_fast_repair_timing_and_clean_ones_cyclones_defaults():
    from commlab.dds.settings import LOSSY_REPAIR_XML
    lossy = DdsSettings.from_config({"domain_id": 3, "interface": "eth0", "loopback_tuned": False,
                                     "lossy_link": True}).to_xml()
    assert LOSSY_REPAIR_XML in lossy and "<NackDelay>5ms</NackDelay>" in lossy
    assert lossy.index(LOSSY_REPAIR_XML) < lossy.index("</Internal>")
    assert "NackDelay" not in DdsSettings(domain_id=3, interface="eth0", loopback_tuned=False).to_xml()


def test_default_chunk_size_follows_the_link_mode_and_an_explicit_one_wins():
    # Shaped links need <= 256 KB chunks (drop storms); loopback uses large ones for speed.
    assert DdsSettings(domain_id=1).chunk_bytes == LOOPBACK_CHUNK > 256 * 1024
    assert DdsSettings(domain_id=1, loopback_tuned=False).chunk_bytes == MTU_CHUNK <= 256 * 1024
    assert DdsSettings(domain_id=1, chunk_bytes=1000).chunk_bytes == 1000
    assert DdsSettings.from_config({"domain_id": 1, "loopback_tuned": False}).chunk_bytes == MTU_CHUNK


def test_the_ring_runs_one_direction_of_whole_segments_on_loopback_and_two_of_chunks_on_a_link():
    from commlab.dds.settings import LOOPBACK_RING_BLOCK
    loopback, link = DdsSettings(domain_id=1), DdsSettings(domain_id=1, loopback_tuned=False, chunk_bytes=256 * 1024)
    assert (loopback.ring_directions, loopback.ring_block_bytes) == (1, LOOPBACK_RING_BLOCK)
    assert LOOPBACK_RING_BLOCK >= 6_653_480 // 3  # the MNIST CNN's segment at WORLD=3: one message
    assert (link.ring_directions, link.ring_block_bytes) == (2, 256 * 1024)
    chosen = DdsSettings.from_config({"domain_id": 1, "ring_directions": 2, "ring_block_bytes": 4096})
    assert (chosen.ring_directions, chosen.ring_block_bytes) == (2, 4096)
    with pytest.raises(ValueError, match="dds.ring_directions must be 1 or 2, got 3"):
        DdsSettings(domain_id=1, ring_directions=3)
    with pytest.raises(ValueError, match="dds.ring_block_bytes must be at least 4"):
        DdsSettings(domain_id=1, ring_block_bytes=2)
    from commlab.config.schema import ConfigError, DdsSection
    with pytest.raises(ConfigError, match="dds.ring_directions: must be 1 or 2, got 0"):
        DdsSection(domain_id=1, ring_directions=0).check("dds.")


@pytest.mark.slow
def test_shared_memory_is_on_by_default_and_a_node_announces_its_probe_on_unshaped_loopback_only(domain):
    from commlab.config.builders import dds_settings
    from commlab.config.schema import ConfigError, DdsSection, from_dict
    from commlab.dds import DdsNode
    from commlab.dds.shm import shares_memory
    assert DdsSettings(domain_id=1).shared_memory is True
    assert dds_settings(from_dict(DdsSection, {"domain_id": 1, "shared_memory": False}, "dds.")).shared_memory is False
    with pytest.raises(ValueError, match="dds.shared_memory must be true or false"):
        DdsSettings(domain_id=1, shared_memory="yes")
    with pytest.raises(ConfigError, match="shared_memory: expected bool"):
        from_dict(DdsSection, {"domain_id": 1, "shared_memory": "yes"}, "dds.")
    for settings, announced in ((DdsSettings(domain_id=domain), True),
                                (DdsSettings(domain_id=domain, shared_memory=False), False),
                                (DdsSettings(domain_id=domain, loopback_tuned=False), False)):
        with DdsNode("worker-0", settings) as node:
            info = node.announcer.info.get("shm")
            assert (info is not None) == announced and (not announced or shares_memory(info))
        assert info is None or not shares_memory(info)  # its probe went with the node


def test_a_shaped_links_chunk_takes_it_about_two_ms_from_64_up_to_256_kib():
    from commlab.dds.settings import link_chunk_bytes
    rates = {1e6: 64, 100e6: 64, 300e6: 128, 1e9: 256, 10e9: 256}
    assert {rate: link_chunk_bytes(rate) // 1024 for rate in rates} == rates
    with pytest.raises(ValueError, match="link rate must be positive"):
        link_chunk_bytes(0)


def test_a_shaped_links_send_window_takes_it_about_four_ms_from_32_kib_up_to_16_mib():
    from commlab.dds.settings import link_send_window_bytes
    rates = {1e6: 32, 10e6: 32, 100e6: 64, 300e6: 256, 1e9: 512, 10e9: 8192, 100e9: 16384}
    assert {rate: link_send_window_bytes(rate) // 1024 for rate in rates} == rates
    with pytest.raises(ValueError, match="link rate must be positive"):
        link_send_window_bytes(-1)


def test_a_shaped_links_datagram_takes_it_about_half_a_ms_from_6_up_to_44_frames():
    from commlab.dds.settings import link_datagram_frames
    rates = {1e6: 6, 100e6: 6, 300e6: 12, 1e9: 41, 10e9: 44}
    assert {rate: link_datagram_frames(rate) for rate in rates} == rates
    assert link_datagram_frames(1e9, mtu=1450) == 43
    largest = DdsSettings(domain_id=1, loopback_tuned=False, datagram_frames=link_datagram_frames(10e9))
    assert largest.message_bytes <= 65535 - 20 - 8  # one UDP datagram
    with pytest.raises(ValueError, match="link rate must be positive"):
        link_datagram_frames(0)


def test_a_shaped_links_ring_block_takes_it_about_eight_ms_from_its_chunk_up_to_1_mib():
    from commlab.dds.settings import link_ring_block_bytes
    rates = {1e6: 64, 10e6: 64, 100e6: 128, 300e6: 512, 1e9: 1024, 10e9: 1024}
    assert {rate: link_ring_block_bytes(rate) // 1024 for rate in rates} == rates
    link = DdsSettings(domain_id=1, loopback_tuned=False, chunk_bytes=256 * 1024, ring_block_bytes=1 << 20)
    assert link.ring_chunk_bytes == 256 * 1024  # a block of several chunks: large chunks cause drop storms
    assert DdsSettings(domain_id=1).ring_chunk_bytes == DdsSettings(domain_id=1).ring_block_bytes  # one chunk


def test_config_errors_name_the_problem():
    with pytest.raises(ValueError, match="chunk_byte"):
        DdsSettings.from_config({"domain_id": 1, "chunk_byte": 5})
    with pytest.raises(ValueError, match="domain_id"):
        DdsSettings(domain_id=300)
    assert DdsSettings.from_config({"domain_id": 4, "peers": ["127.0.0.1"]}).peers == ("127.0.0.1",)


def test_split_covers_payload_and_empty_payload_gives_one_chunk():
    data = bytes(range(256)) * 1000
    chunks = list(split("a", 1, 9, "{}", data, 10000))
    assert [c.index for c in chunks] == list(range(26)) and {c.count for c in chunks} == {26}
    assert b"".join(bytes(c.payload) for c in chunks) == data and chunks[0].meta == "{}" and chunks[1].meta == ""
    empty = list(split("a", 1, 10, "m", b"", 10000))
    assert len(empty) == 1 and empty[0].count == 1 and len(empty[0].payload) == 0


def feed(r: Reassembler, c: Chunk) -> Assembled | None:
    """Give a chunk to the reassembler as the reader does: head parsed from the encoded sample,
    payload copied into the message buffer through its address."""
    data = encode(c)
    head = decode_head(data, len(data))
    payload = bytes(c.payload)
    return r.add(head, payload)


def test_reassembly_out_of_order_with_duplicates_and_interleaved_senders():
    stats = CommStats()
    r = Reassembler("t", stats, timeout_s=10)
    a = list(split("a", 1, 1, "A", bytes(range(250)) * 10, 1000))
    b = list(split("b", 1, 1, "B", b"b" * 1500, 1000))  # same msg_id, other sender
    out = [feed(r, c) for c in (a[2], b[1], a[0], a[0], b[0], a[1])]
    done = [m for m in out if m is not None]
    assert [(m.sender, m.meta, m.payload) for m in done] == [("b", "B", b"b" * 1500), ("a", "A", bytes(range(250)) * 10)]
    assert all(type(m.payload) is bytes for m in done)
    assert stats.duplicate_chunks == 1
    assert feed(r, a[1]) is None and stats.duplicate_chunks == 2  # a late copy of a delivered message


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5000), st.integers(1, 700), st.randoms(use_true_random=False), st.integers(0, 3))
def test_reassembly_of_any_order_with_duplicates_gives_the_payload(payload, chunk_bytes, rnd, duplicates):
    stats = CommStats()
    r = Reassembler("t", stats, timeout_s=10)
    chunks = list(split("s", 3, 4, "meta", payload, chunk_bytes))
    order = chunks + [rnd.choice(chunks) for _ in range(duplicates)]
    rnd.shuffle(order)
    done = [m for m in (feed(r, c) for c in order) if m is not None]
    assert len(done) == 1 and done[0].payload == payload and done[0].meta == "meta"
    assert stats.malformed_chunks == 0 and stats.duplicate_chunks == duplicates


def test_malformed_chunks_drop_the_message_and_are_counted():
    stats = CommStats()
    r = Reassembler("t", stats, timeout_s=10)
    good = list(split("a", 1, 5, "", b"x" * 3000, 1000))
    bad = Chunk("a", 1, 5, 1, 7, 3000, "", b"y" * 1000)  # count disagrees
    assert feed(r, good[0]) is None and feed(r, bad) is None
    assert stats.malformed_chunks == 1
    assert feed(r, good[1]) is None and feed(r, good[2]) is None  # the dropped message never completes
    assert feed(r, Chunk("c", 1, 1, 3, 2, 10, "", b"")) is None and stats.malformed_chunks == 2  # index >= count
    assert feed(r, Chunk("d", 1, 1, 0, 1, 5, "", b"toolong")) is None and stats.malformed_chunks == 3


@pytest.mark.parametrize("chunks", [
    [Chunk("e", 1, 1, 0, 3, 2500, "", b"x" * 1000), Chunk("e", 1, 1, 1, 3, 2500, "", b"x" * 900)],  # strides differ
    [Chunk("e", 1, 1, 2, 3, 2500, "", b"x" * 1500)],  # a last chunk larger than the others can be
    [Chunk("e", 1, 1, 2, 3, 2500, "", b"x" * 499)],  # leaves an offset that is not a whole stride
    [Chunk("e", 1, 1, 0, 3, 5000, "", b"x" * 1000)],  # three chunks of 1000 cannot hold 5000 bytes
    [Chunk("e", 1, 1, 0, 2, MAX_MESSAGE_BYTES + 1, "", b"x")],  # would allocate an absurd buffer
])
def test_chunks_that_cannot_be_placed_are_malformed(chunks):
    stats = CommStats()
    r = Reassembler("t", stats, timeout_s=10)
    assert all(feed(r, c) is None for c in chunks)
    assert stats.malformed_chunks == 1


def test_incomplete_messages_expire_and_are_counted():
    stats = CommStats()
    r = Reassembler("t", stats, timeout_s=5)
    feed(r, next(split("a", 1, 1, "", b"x" * 3000, 1000)))
    assert r.expire(now=0.0) == []
    assert r.expire(now=1e12) == [("a", 1, 1)] and stats.expired_messages == 1


def test_messages_roundtrip_and_reject_bad_meta():
    req = Request(seq=3, tag="r1", scale=0.05, params={"chunk": 256, "k": [1, 2]})
    assert from_wire(Request, *to_wire(req)) == req
    reply = Reply(seq=1, text="node-2", count=600, payload=b"\x00\x01")
    assert from_wire(Reply, *to_wire(reply)) == reply
    meta, _ = to_wire(Blob(seq=1, index=2))
    with pytest.raises(MessageError, match="index"):
        from_wire(Blob, meta.replace("index", "position"), b"")
    with pytest.raises(MessageError, match="not JSON"):
        from_wire(Blob, "{", b"")
    with pytest.raises(MessageError, match="no payload"):
        from_wire(Request, to_wire(req)[0], b"zz")


def test_a_message_type_is_a_dataclass_class():
    assert message_type(Blob) is Blob
    for bad in ("Blob", Blob(seq=1, index=1), dict):
        with pytest.raises(TypeError, match="dataclass"):
            message_type(bad)


def test_wire_bytes_formula_and_stats_deltas():
    assert wire_bytes(1000, 1344) == 1000 + 100
    assert wire_bytes(2689, 1344) == 2692 + 3 * 112  # padded to 4, three fragments
    assert wire_bytes(2689, 1344, mtu=1500) == 2692 + 3 * 112  # every datagram fits one frame
    # 8744-byte fragments fill 6 frames of 1480 bytes; the 1000-byte rest fits one.
    assert wire_bytes(8744 + 1000, 8744, mtu=1500) == 9744 + 2 * 112 + 5 * 20
    assert wire_bytes(3000, 8744, mtu=1500) == 3000 + 100 + 2 * 20  # 3076 bytes of IP payload: 3 frames
    s = CommStats()
    before = s.snapshot()
    s.add(bytes_sent=10, wait_s=0.5)
    with s.waiting():
        pass
    d = s.since(before)
    assert d["bytes_sent"] == 10 and d["wait_s"] >= 0.5 and d["bytes_received"] == 0


def test_matched_handles_asks_again_when_a_match_arrives_mid_call():
    from commlab.dds.reading import matched_handles
    answers = iter([IndexError("invalid index"), [7, 9]])

    def flaky():  # the binding's race: the count grew between its two C calls
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    assert matched_handles(flaky) == [7, 9]

    def broken():
        raise IndexError("invalid index")

    with pytest.raises(IndexError):
        matched_handles(broken, attempts=3)


FAULTS_OF_LARGE_ALLOCATIONS = """
import resource, sys
from commlab.dds.memory import keep_freed_blocks
if sys.argv[1] == "keep":
    assert keep_freed_blocks()
for _ in range(3):  # warm up
    b = bytearray(8 << 20); del b
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    b = bytearray(8 << 20); del b
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str, env: dict[str, str]) -> int:
    out = subprocess.run([sys.executable, "-c", FAULTS_OF_LARGE_ALLOCATIONS, mode], env={**os.environ, **env},
                         capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.slow
def test_freed_large_blocks_are_reused_without_page_faults():
    # Forced to mmap every block (glibc's tunable), 50 blocks of 8 MiB fault on every page: the
    # measurement sees it. keep_freed_blocks() overrides that and the same loop barely faults.
    forced = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072"}
    assert _faults("default", forced) > 50 * 2048 // 2
    assert _faults("keep", forced) < 2048


def test_an_authenticated_ring_blocks_head_is_parsed_from_the_prefix_a_reader_copies():
    # A one-chunk message carries envelope and trailer in its meta: parsed from the prefix, the
    # block is copied once (a prefix too short for the head costs a copy of the whole sample).
    from commlab.dds.auth import make_keyrings
    from commlab.dds.chunk import Chunk, decode_head, encode_head
    from commlab.dds.endpoints import HEAD_PREFIX
    from commlab.dds.seal import Sealer
    nodes = [f"worker-{r}" for r in range(8)]  # a DDP run's: every worker signs, payloads in clear on loopback
    keyrings = make_keyrings("20261126-092115-bench-peers-dds-dense-ring", nodes, trusted=set(nodes))
    sealer = Sealer(keyrings["worker-0"], 1, encrypt=False)
    block = 1 << 20
    meta = json.dumps({"key": "123456/grads", "step": 13, "block": 21, "numel": 11_689_512})
    envelope, _ = sealer.seal("coll_ddp_ring1", meta, bytes(block))
    head = encode_head(Chunk("worker-0", 1, 7, 0, 1, block, envelope, b""), block)
    assert decode_head(head[:HEAD_PREFIX], len(head) + block).meta == envelope
