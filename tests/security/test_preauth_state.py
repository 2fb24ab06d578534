"""Nothing a node holds, waits for or remembers comes from what has not authenticated: junk chunks
under a claimed (sender, incarnation, message id) suppress nothing and count as no progress; a
flood of fresh incarnations under a stolen key keeps one replay window per sender; a client's key
cannot speak as the controller, not even towards that client; a peer that comes back with its
durable announcement is accepted again, from its own participant only."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from commlab.dds.announce import Announce, PeerDirectory
from commlab.dds.auth import Keyring, make_keyrings
from commlab.dds.envelope import AuthError
from commlab.dds.opener import Opener
from commlab.dds.seal import Sealer
from commlab.dds.chunk import Chunk, decode_head, encode, split
from commlab.dds.reassembly import Reassembler
from commlab.dds.stats import CommStats, Progress

NODES = ["controller", "client-0", "client-1"]
REAL_WRITER, ROGUE_WRITER = 11, 99


@pytest.fixture
def rings() -> dict[str, Keyring]:
    return make_keyrings("run", NODES, trusted={"controller"})


def sealed(sealer: Sealer, topic: str, payload: bytes, chunk: int = 100) -> list[Chunk]:
    """The chunks a ChunkWriter sends for one message (endpoints.ChunkWriter.write)."""
    sealing = sealer.begin(topic, '{"round": 1}', len(payload))
    chunks = list(split(sealer.ring.node, sealer.incarnation, sealer.seq, sealing.envelope, payload, chunk))
    for c in chunks:
        c.payload = bytes(sealing.update(bytes(c.payload)))
        if c.index == c.count - 1:
            c.meta = sealing.last_meta(first=c.index == 0)
    return chunks


def feed(r: Reassembler, c: Chunk, writer: int):
    data = encode(c)
    payload = bytes(c.payload)
    return r.add(decode_head(data, len(data)), payload, writer)


def junk_like(c: Chunk, index: int | None = None) -> Chunk:
    """What a keyless process on the domain can send: the ids of a real chunk, no valid envelope."""
    i = c.index if index is None else index
    size = min(100, c.total_bytes - 100 * i)  # chunks of 100 bytes, as `sealed` cuts them
    return Chunk(c.sender, c.incarnation, c.msg_id, i, c.count, c.total_bytes, "{}" if i == 0 else "", b"\0" * size)


def test_junk_chunks_under_a_real_id_neither_suppress_the_message_nor_count_as_progress(rings):
    stats = CommStats()
    progress_at = stats.chunks_accepted
    r = Reassembler("ModelBlob", stats, timeout_s=60, opener=Opener(rings["client-0"]))
    real = sealed(Sealer(rings["controller"], 7), "ModelBlob", bytes(range(250)))
    for c in real:  # before the real message: every id it will use, first chunks and later ones
        assert feed(r, junk_like(c), ROGUE_WRITER) is None
    assert stats.chunks_accepted == progress_at  # a deadline counting from progress did not move
    assert stats.auth_unauthenticated == len(real) and r.held_bytes() == 0
    done = None
    for c in real:
        feed(r, junk_like(c, index=1), ROGUE_WRITER)  # and interleaved with it
        done = feed(r, c, REAL_WRITER)
    assert done is not None and done.payload == bytes(range(250)) and done.meta == '{"round": 1}'
    assert stats.chunks_accepted == progress_at + len(real)


def test_progress_moves_only_with_chunks_of_authenticated_messages(rings):
    now = [0.0]
    stats = CommStats()
    progress = Progress(stats, clock=lambda: now[0])
    r = Reassembler("TrainCmd", stats, timeout_s=60, opener=Opener(rings["client-0"]))
    real = sealed(Sealer(rings["controller"], 7), "TrainCmd", b"")
    now[0] = 30.0
    feed(r, junk_like(real[0]), ROGUE_WRITER)
    assert progress.idle_s() == 30.0
    assert feed(r, real[0], REAL_WRITER) is not None
    assert progress.idle_s() == 0.0


def test_fresh_incarnations_under_a_stolen_key_replace_one_window_per_sender(rings):
    replaced = []
    opener = Opener(rings["controller"], lambda: replaced.append(1))
    for incarnation in range(1, 2001):
        thief = Sealer(rings["client-1"], incarnation)  # the stolen key, a new "process" each time
        opener.open("ClientUpdate", "client-1", incarnation, 0, thief.seal("ClientUpdate", "{}", b"")[0])
    assert len(opener._windows) == 1 and len(replaced) == 1999
    with pytest.raises(AuthError, match="replayed"):  # the older incarnations stay refused
        opener.open("ClientUpdate", "client-1", 5, 0, Sealer(rings["client-1"], 5).seal("ClientUpdate", "{}", b"")[0])


def test_a_client_key_cannot_make_that_client_obey_a_forged_controller_message(rings):
    stolen = rings["client-1"]
    # Everything client-1's key file holds, used to speak as the controller towards client-1.
    forged = Sealer(Keyring(stolen.run_id, "controller", ("client-1",), stolen.discovery_tag,
                            pair_keys={"client-1": stolen.pair_keys["controller"]}), 9)
    envelope, _ = forged.seal("Stop", '{"last_round": 2}', b"")
    with pytest.raises(AuthError) as e:
        Opener(stolen).open_whole("Stop", "controller", 9, envelope, b"")
    assert e.value.reason in ("unauthenticated", "wrong_key")
    # Tampering with a real signed message fails too, in the envelope and in the payload.
    real = Sealer(rings["controller"], 9)
    doc = json.loads(real.seal("Stop", '{"last_round": 5}', b"")[0])
    doc["meta"] = '{"last_round": 2}'
    with pytest.raises(AuthError, match="wrong_key"):
        Opener(stolen).open_whole("Stop", "controller", 9, json.dumps(doc), b"")
    blob, _ = real.seal("ModelBlob", "{}", b"weights")
    opened = Opener(stolen).open("ModelBlob", "controller", 9, 7, blob)
    opened.update(bytearray(b"WEIGHTS"))
    with pytest.raises(AuthError, match="altered"):
        opened.finish()
    assert Opener(stolen).open_whole("Stop", "controller", 9, real.seal("Stop", "{}", b"")[0], b"") == ("{}", b"")


def test_key_files_carry_the_signing_key_to_the_controller_only(tmp_path, rings):
    from commlab.dds.auth import read_keyring, write_keyring
    for name, ring in rings.items():
        write_keyring(tmp_path / name, ring)
        back = read_keyring(tmp_path / name)
        assert back == ring
        assert (back.signing_key is not None) == (name == "controller")
        assert set(back.verify_keys) == (set() if name == "controller" else {"controller"})
    assert rings["controller"].signed_for == ("client-0", "client-1")
    assert Sealer(rings["controller"], 1).keys == {}  # clients take its messages only signed: no tags
    equals = make_keyrings("run", ["worker-0", "worker-1"], trusted={"worker-0", "worker-1"})
    assert all(r.signing_key is None for r in equals.values())  # nobody to sign for


def directory_with(ring: Keyring, participant_of: dict[int, str]) -> PeerDirectory:
    return PeerDirectory(ring.node, opener=Opener(ring), writer_participant=participant_of.get)


def announce(directory: PeerDirectory, a: Announce, writer: int) -> None:
    with directory.changed:
        directory._take(a, SimpleNamespace(publication_handle=writer))


def test_a_peer_that_comes_back_with_its_durable_announcement_is_accepted_again(rings):
    seen = directory_with(rings["client-0"], {1: "P-ctl", 2: "P-ctl", 3: "P-rogue"})
    sealer = Sealer(rings["controller"], 5)
    first = Announce("controller", "P-ctl", 5, sealer.seal("commlab_announce", json.dumps({"groups": {}}), b"")[0])
    announce(seen, first, writer=1)
    assert seen.alive()["controller"].returns == 0
    seen.on_matched(set())  # its lease expired: the writer is gone
    assert "controller" not in seen.alive()
    announce(seen, first, writer=3)  # the same bytes, replayed by another participant: not it
    assert "controller" not in seen.alive()
    announce(seen, first, writer=2)  # DDS delivers the durable announcement again after rediscovery
    peer = seen.alive()["controller"]
    assert peer.returns == 1 and peer.writer == 2 and seen.returned
    # A real replay (a fresh sample with an old sequence number) is still refused.
    again = Announce("controller", "P-ctl", 5, sealer.seal("commlab_announce", json.dumps({"x": 1}), b"")[0])
    announce(seen, again, writer=2)
    assert seen.alive()["controller"].info == {"x": 1}
    announce(seen, first, writer=2)  # the old announcement, now superseded: replayed
    assert seen.alive()["controller"].info == {"x": 1}
