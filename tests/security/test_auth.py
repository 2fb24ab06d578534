"""Message protection (commlab.dds.auth, envelope, seal, opener): per-pair keys, envelopes, replays,
key files, encrypted payloads."""
import json
import os

import pytest

from commlab.dds.auth import KeyFileError, make_keyrings, read_keyring, write_keyring
from commlab.dds.cdr import address_of
from commlab.dds.envelope import MAC_RECIPIENTS_MAX, WINDOW, AuthError
from commlab.dds.opener import ALONGSIDE, Opener
from commlab.dds.seal import Sealer

NODES = ["controller", "client-0", "client-1"]


@pytest.fixture
def rings():
    return make_keyrings("run-a", NODES, trusted={"controller"})


def deliver(sealer: Sealer, opener: Opener, payload=b"weights", topic="ModelBlob", meta='{"round": 1}',
            incarnation=None):
    envelope, sent = sealer.seal(topic, meta, payload)
    opened = opener.open(topic, sealer.ring.node, sealer.incarnation if incarnation is None else incarnation,
                         len(payload), envelope)
    opened.update(bytearray(sent))
    opened.finish()
    return opened.meta


def test_controller_and_clients_read_each_other(rings):
    ctl, c0 = Sealer(rings["controller"], 1), Sealer(rings["client-0"], 1)
    assert deliver(ctl, Opener(rings["client-0"])) == '{"round": 1}'
    assert deliver(ctl, Opener(rings["client-1"])) == '{"round": 1}'
    assert deliver(c0, Opener(rings["controller"]), topic="ClientUpdate") == '{"round": 1}'


def test_a_client_cannot_sign_as_another_client_or_the_controller(rings):
    thief = rings["client-1"]  # a stolen client key
    for claimed in ("client-0", "controller"):
        forged = Sealer(type(thief)(thief.run_id, claimed, thief.peers, thief.discovery_tag, pair_keys=thief.pair_keys), 1)
        with pytest.raises(AuthError) as e:
            deliver(forged, Opener(rings["controller"] if claimed == "client-0" else rings["client-0"]))
        assert e.value.reason in ("wrong_key", "unauthenticated")
    # and it has no key shared with another client at all
    assert rings["client-1"].key_with("client-0") is None


def test_no_key_another_run_and_altered_payloads_are_refused(rings):
    other = make_keyrings("run-a", NODES, trusted={"controller"})  # same names, other run key
    with pytest.raises(AuthError, match="wrong_key"):
        deliver(Sealer(other["controller"], 1), Opener(rings["client-0"]))
    other_run = make_keyrings("run-b", NODES, trusted={"controller"})
    with pytest.raises(AuthError, match="wrong_run"):
        deliver(Sealer(other_run["controller"], 1), Opener(rings["client-0"]))
    with pytest.raises(AuthError, match="unauthenticated"):
        Opener(rings["client-0"]).open("ModelBlob", "controller", 1, 3, '{"round": 1}')  # a plain, unsealed meta
    sealer, opener = Sealer(rings["controller"], 1), Opener(rings["client-0"])
    opened = opener.open("ModelBlob", "controller", 1, 7, sealer.seal("ModelBlob", "{}", b"weights")[0])
    opened.update(bytearray(b"WEIGHTS"))
    with pytest.raises(AuthError, match="altered"):
        opened.finish()


@pytest.mark.parametrize("clients,encrypt,mac", [(2, False, "aegis-mac"), (MAC_RECIPIENTS_MAX + 1, False, "blake3"),
                                                (2, True, "aead"), (MAC_RECIPIENTS_MAX + 1, True, "aead")])
def test_a_chunked_message_is_authenticated_by_its_last_chunk(clients, encrypt, mac):
    # Equals (all hold the run key, as DDP ranks do): tags only, no signatures.
    nodes = ["controller"] + [f"client-{i}" for i in range(clients)]
    rings = make_keyrings("run-a", nodes, trusted=set(nodes))
    sealer, opener = Sealer(rings["controller"], 1, encrypt), Opener(rings["client-0"])
    assert sealer.mac == mac
    sealing = sealer.begin("ModelBlob", '{"round": 3}', 12)
    opened = opener.open("ModelBlob", "controller", 1, 12, sealing.envelope)  # before any payload
    sent = b""
    for part in (b"abcd", b"efgh", b"ijkl"):
        piece = bytearray(sealing.update(part))
        assert (bytes(piece) != part) == encrypt
        sent += piece
        opened.update(piece)
        assert piece == part  # decrypted in place
    trailer = sealing.last_meta(first=False)
    opened.finish(trailer)
    assert opened.meta == '{"round": 3}'
    forged = Opener(rings["client-0"]).open("ModelBlob", "controller", 1, 12, sealer.begin("ModelBlob", "{}", 12).envelope)
    forged.update(bytearray(sent))
    with pytest.raises(AuthError, match="wrong_key|altered"):  # a trailer of another message
        forged.finish(trailer)
    altered = Opener(rings["client-1"]).open("ModelBlob", "controller", 1, 12, sealing.envelope)
    altered.update(bytearray(sent[:-1] + bytes([sent[-1] ^ 1])))
    with pytest.raises(AuthError, match="altered"):
        altered.finish(trailer)


@pytest.mark.parametrize("clients,encrypt,trusted", [(2, True, "all"), (2, False, "all"), (1, True, "all"),
                                                    (MAC_RECIPIENTS_MAX + 1, False, "all"), (2, True, "controller")])
def test_a_trailer_placeholder_has_the_length_of_the_trailer(clients, encrypt, trusted):
    """A writer builds the last chunk's head around a placeholder before the payload is sealed into
    the sample, and overwrites the placeholder with the real trailer: they must be of one length,
    and the trailer merged into a one-chunk message's envelope reads as the envelope plus its trailer."""
    nodes = ["controller"] + [f"client-{i}" for i in range(clients)]
    rings = make_keyrings("run-a", nodes, trusted=set(nodes) if trusted == "all" else {"controller"})
    for first in (False, True):
        sealing = Sealer(rings["controller"], 1, encrypt).begin("ModelBlob", '{"round": 3}', 5)
        placeholder = sealing.trailer(placeholder=True)
        head = sealing.with_envelope(placeholder) if first else placeholder
        sealing.update(b"abcde")
        trailer = sealing.trailer()
        assert len(trailer) == len(placeholder) and trailer != placeholder
        at = head.rindex(placeholder)
        meta = head[:at] + trailer + head[at + len(trailer):]
        assert meta == sealing.last_meta(first)
        if first:
            assert json.loads(meta) == {**json.loads(sealing.envelope), "trailer": json.loads(trailer)}
        assert set(json.loads(trailer)) == set(json.loads(placeholder))


@pytest.mark.parametrize("trusted,encrypt", [("all", False), ("all", True), ("controller", False), ("controller", True)])
def test_pipelined_sealing_opens_into_place_and_still_catches_a_flipped_bit(trusted, encrypt):
    """sealed() (a writer's: each chunk sealed into its sample, in the worker while the one before
    is written, then the last chunk's trailer) and a receiver's one pass from the received chunk
    into the message's buffer (large chunks' digest hashed alongside) give back the payload, and
    refuse it with one bit flipped."""
    rings = make_keyrings("run-a", NODES, trusted=set(NODES) if trusted == "all" else {"controller"})
    sealer = Sealer(rings["controller"], 1, encrypt)
    payload = os.urandom(3 * ALONGSIDE + 1000)
    step = ALONGSIDE + 7
    sealing = sealer.begin("ModelBlob", "{}", len(payload))
    parts = [memoryview(payload)[i:i + step] for i in range(0, len(payload), step)]
    samples = [bytearray(len(part)) for part in parts]
    sent = b"".join(bytes(samples[i]) for i in sealing.sealed(parts, lambda i: address_of(samples[i])))
    trailer = sealing.last_meta(first=False)
    assert (sent == payload) == (not encrypt)
    for flip in (None, 0, len(payload) - 1):
        wire = bytearray(sent)
        if flip is not None:
            wire[flip] ^= 1
        opened = Opener(rings["client-0"]).open("ModelBlob", "controller", 1, len(payload), sealing.envelope)
        out = bytearray(len(payload))
        for i in range(0, len(payload), step):
            opened.update(bytes(wire[i:i + step]), out, i)
        if flip is None:
            opened.finish(trailer)
            assert out == payload
        else:
            with pytest.raises(AuthError, match="altered"):
                opened.finish(trailer)


def test_the_envelope_must_match_its_chunk(rings):
    sealer, opener = Sealer(rings["controller"], 7), Opener(rings["client-0"])
    envelope, _ = sealer.seal("TrainCmd", "{}", b"")
    with pytest.raises(AuthError, match="does not match its chunk"):
        opener.open("Stop", "controller", 7, 0, envelope)  # moved to another topic
    doc = json.loads(envelope)
    doc["meta"] = '{"epochs": 0}'  # meta changed after signing
    with pytest.raises(AuthError, match="wrong_key"):
        opener.open("TrainCmd", "controller", 7, 0, json.dumps(doc))


def test_replays_and_old_incarnations_are_refused(rings):
    sealer, opener = Sealer(rings["client-0"], 100), Opener(rings["controller"])
    envelope, _ = sealer.seal("ClientUpdate", "{}", b"")
    opener.open("ClientUpdate", "client-0", 100, 0, envelope)
    with pytest.raises(AuthError, match="replayed"):
        opener.open("ClientUpdate", "client-0", 100, 0, envelope)
    restarted = Sealer(rings["client-0"], 200)
    deliver(restarted, opener, topic="ClientUpdate")
    with pytest.raises(AuthError, match="replayed"):  # the old process's traffic, recorded and sent again
        opener.open("ClientUpdate", "client-0", 100, 0, sealer.seal("ClientUpdate", "{}", b"")[0])


def test_out_of_order_within_the_window_is_fine_behind_it_is_not(rings):
    sealer, opener = Sealer(rings["controller"], 1), Opener(rings["client-0"])
    envelopes = [sealer.seal("TrainCmd", "{}", b"")[0] for _ in range(WINDOW + 3)]
    opener.open("TrainCmd", "controller", 1, 0, envelopes[2])
    opener.open("TrainCmd", "controller", 1, 0, envelopes[1])  # late, inside the window
    opener.open("TrainCmd", "controller", 1, 0, envelopes[-1])
    with pytest.raises(AuthError, match="out_of_window"):
        opener.open("TrainCmd", "controller", 1, 0, envelopes[0])


def test_key_files_are_private_and_checked(tmp_path, rings):
    path = tmp_path / "client-0.key"
    write_keyring(path, rings["client-0"])
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert read_keyring(path) == rings["client-0"]
    os.chmod(path, 0o644)
    with pytest.raises(KeyFileError, match="mode 644"):
        read_keyring(path)
    with pytest.raises(KeyFileError, match="not found"):
        read_keyring(tmp_path / "missing.key")
    bad = tmp_path / "bad.key"
    bad.write_text("{}")
    os.chmod(bad, 0o600)
    with pytest.raises(KeyFileError, match="not a commlab key file"):
        read_keyring(bad)
    with pytest.raises(FileExistsError):
        write_keyring(path, rings["client-0"])  # never overwritten


def test_identity_keys_go_only_to_the_node_speaking_for_them(tmp_path):
    """A host gets the keys of the identities it speaks for, no other; the run key derives them all."""
    rings = make_keyrings("run-a", ["controller", "clients-0", "clients-1"], trusted={"controller"},
                          identities={"clients-0": ["client-0", "client-2"], "clients-1": ["client-1"]})
    host = rings["clients-0"]
    assert set(host.identity_keys) == {"client-0", "client-2"} and host.key_of("client-1") is None
    assert host.key_of("client-2") == rings["controller"].key_of("client-2") != host.key_of("client-0")
    assert rings["clients-1"].key_of("client-1") == rings["controller"].key_of("client-1")
    path = tmp_path / "clients-0.key"
    write_keyring(path, host)
    assert read_keyring(path).identity_keys == host.identity_keys
    doc = json.loads(path.read_text())
    doc["identity_keys"]["client-0"] = "ab" * 8  # 8 bytes, not 32
    short = tmp_path / "short.key"
    short.write_text(json.dumps(doc))
    os.chmod(short, 0o600)
    with pytest.raises(KeyFileError, match="keys must be 32 bytes"):
        read_keyring(short)
