"""AEGIS-128X4 as the payload cipher and MAC (commlab.dds.aegis; format in envelope.py): chunk by
chunk it gives what libaegis gives in one call, and a sealed message refuses a changed byte in any
chunk, a wrong key, a cut payload or tag, and a cipher it does not know. The key derivation,
canonical envelope and Ed25519 signatures are those of the wire format."""
import hashlib
import json
import os

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pyaegis import Aegis128X4, AegisMac128X4

from commlab.dds import aegis
from commlab.dds.auth import make_keyrings
from commlab.dds.cdr import address_of
from commlab.dds.envelope import AuthError, Signer, recipient_keys, signature_holds, signed_bytes, trailer_tag
from commlab.dds.opener import Opener
from commlab.dds.seal import Sealer

NODES = ["controller", "client-0", "client-1"]
PAYLOAD = os.urandom(3 * 4096 + 77)
STEP = 4096 + 13  # chunks of no block multiple: the stream carries partial blocks across updates


def pieces(data: bytes) -> list[memoryview]:
    return [memoryview(data)[i:i + STEP] for i in range(0, len(data), STEP)]


def test_the_chunked_stream_and_mac_give_what_one_call_gives():
    key, associated = os.urandom(aegis.KEY_BYTES), b"signed envelope"
    whole, whole_tag = Aegis128X4(tag_size=aegis.TAG_BYTES).encrypt_detached(key, bytes(16), PAYLOAD, associated)
    stream, sent = aegis.AegisStream(key, associated), bytearray(len(PAYLOAD))
    for i, piece in enumerate(pieces(PAYLOAD)):
        stream.update_into(piece, memoryview(sent)[i * STEP:i * STEP + len(piece)])
    assert bytes(sent) == whole and stream.tag() == whole_tag
    opened = aegis.AegisStream(key, associated, decrypt=True)
    for piece in pieces(sent):  # in place
        opened.update_into(piece, piece)
    assert bytes(sent) == PAYLOAD and opened.verify(whole_tag)
    mac = aegis.AegisMac(key)
    for piece in pieces(PAYLOAD):
        mac.update(piece)
    reference = AegisMac128X4(key, bytes(16), tag_size=aegis.TAG_BYTES)
    reference.update(PAYLOAD)
    assert mac.tag() == reference.final()


def test_a_wrong_key_or_associated_data_fails_the_tag_and_bad_sizes_are_refused():
    key = os.urandom(aegis.KEY_BYTES)
    stream, sent = aegis.AegisStream(key, b"a"), bytearray(100)
    stream.update_into(PAYLOAD[:100], sent)
    tag = stream.tag()
    for other_key, associated in ((os.urandom(aegis.KEY_BYTES), b"a"), (key, b"b")):
        opened = aegis.AegisStream(other_key, associated, decrypt=True)
        opened.update_into(bytearray(sent), bytearray(100))
        assert not opened.verify(tag)
    short = aegis.AegisStream(key, b"a", decrypt=True)
    short.update_into(bytes(sent), bytearray(100))
    assert not short.verify(tag[:-1])
    with pytest.raises(ValueError, match="AEGIS-128X4 key is 16 bytes, not 32"):
        aegis.AegisStream(os.urandom(32), b"")
    with pytest.raises(ValueError, match="output of 99 bytes for a chunk of 100"):
        aegis.AegisStream(key, b"").update_into(PAYLOAD[:100], bytearray(99))


def seal_chunks(sealer: Sealer, to=()) -> tuple[str, list[bytes], str]:
    sealing = sealer.begin("ModelBlob", "{}", len(PAYLOAD), to=to)
    parts = pieces(PAYLOAD)
    wire = [bytearray(len(part)) for part in parts]  # as the writer seals each chunk into its sample
    sent = [bytes(wire[i]) for i in sealing.sealed(parts, lambda i: address_of(wire[i]))]
    return sealing.envelope, sent, sealing.last_meta(first=False)


def receive(ring, sender: Sealer, envelope: str, sent: list[bytes], trailer: str) -> bytes:
    opened = Opener(ring).open("ModelBlob", sender.ring.node, sender.incarnation, len(PAYLOAD), envelope)
    into, at = bytearray(len(PAYLOAD)), 0
    for piece in sent:
        opened.update(piece, into, at)
        at += len(piece)
    opened.finish(trailer)
    return bytes(into)


@pytest.mark.parametrize("encrypt,trusted", [(True, "all"), (True, "controller"), (False, "all")])
def test_one_changed_byte_in_any_chunk_is_refused(encrypt, trusted):
    rings = make_keyrings("run-a", NODES, trusted=set(NODES) if trusted == "all" else {"controller"})
    sealer = Sealer(rings["controller"], 1, encrypt)
    if trusted == "all":
        expected = ("aegis-128x4", "aead") if encrypt else ("none", "aegis-mac")
    else:  # a signing sender: the signature covers a BLAKE3 digest of the ciphertext
        expected = ("aegis-128x4", "blake3")
    assert (sealer.cipher, sealer.mac) == expected
    envelope, sent, trailer = seal_chunks(sealer)
    assert receive(rings["client-0"], sealer, envelope, sent, trailer) == PAYLOAD
    for chunk in range(len(sent)):
        altered = list(sent)
        altered[chunk] = altered[chunk][:9] + bytes([altered[chunk][9] ^ 0x80]) + altered[chunk][10:]
        with pytest.raises(AuthError, match="altered") as e:
            receive(rings["client-1"], sealer, envelope, altered, trailer)
        assert "\n" not in str(e.value)


def test_a_cut_payload_or_tag_is_refused():
    rings = make_keyrings("run-a", NODES, trusted=set(NODES))
    sealer = Sealer(rings["controller"], 1)
    envelope, sent, trailer = seal_chunks(sealer, to=("client-0",))
    opened = Opener(rings["client-0"]).open("ModelBlob", "controller", 1, len(PAYLOAD), envelope)
    for piece in sent[:-1]:  # the last chunk never came
        opened.update(bytearray(piece))
    with pytest.raises(AuthError, match="altered"):
        opened.finish(trailer)
    cut = json.dumps({"aead": json.loads(trailer)["aead"][:-2]})
    with pytest.raises(AuthError, match="altered"):
        receive(rings["client-0"], sealer, envelope, sent, cut)


def test_a_receiver_without_the_key_reads_nothing_and_a_wrong_key_is_named():
    rings = make_keyrings("run-a", NODES, trusted=set(NODES))
    sealer = Sealer(rings["controller"], 1)
    envelope, sent, trailer = seal_chunks(sealer, to=("client-0",))
    assert PAYLOAD[:32] not in b"".join(sent)
    impostor = make_keyrings("run-a", NODES, trusted=set(NODES))["client-0"]  # same run, other keys
    with pytest.raises(AuthError, match="wrong_key: tag does not verify with the key of 'controller'"):
        receive(impostor, sealer, envelope, sent, trailer)


@pytest.mark.parametrize("cipher,mac", [("aes-256-gcm", "gcm"), ("aegis-256", "aead"), ("none", "aead")])
def test_an_unknown_cipher_or_mac_is_refused_in_one_line(cipher, mac):
    rings = make_keyrings("run-a", NODES, trusted=set(NODES))
    sealer = Sealer(rings["controller"], 1)
    envelope, sent, trailer = seal_chunks(sealer)
    doc = json.loads(envelope)
    doc["auth"].update(cipher=cipher, mac=mac)
    with pytest.raises(AuthError, match=f"unauthenticated: 'controller' names no known cipher and payload MAC "
                                        f"\\('{cipher}', '{mac}'\\)") as e:
        receive(rings["client-0"], sealer, json.dumps(doc), sent, trailer)
    assert "\n" not in str(e.value)


def test_the_derived_keys_and_canonical_envelope_are_those_of_the_wire_format():
    """A recipient's key and envelope tag are the halves of BLAKE2b-256 keyed by the pair key over
    its name and the signed envelope, salted and personalised; the trailer tag is keyed BLAKE2b
    too, and signed_bytes() the sorted, compact JSON: what every other holder of wire version 5
    computes."""
    pair, salt, signed = os.urandom(32), os.urandom(16), os.urandom(300)
    reference = hashlib.blake2b(b"client-0\0" + signed, digest_size=32, key=pair, salt=salt,
                                person=b"commlab envelope").digest()
    assert recipient_keys(pair, salt, "client-0", signed) == (reference[:16], reference[16:].hex())
    assert recipient_keys(pair, salt, "client-1", signed) != recipient_keys(pair, salt, "client-0", signed)
    assert trailer_tag(pair, signed, "ab") == hashlib.blake2b(signed + b"\0trailer\0ab", digest_size=16, key=pair,
                                                             person=b"commlab trailer").hexdigest()
    auth = {"v": 5, "run": 'r"\\ü', "seq": 7, "bytes": 0, "salt": salt.hex()}
    assert signed_bytes(auth, "{}") == json.dumps(auth, sort_keys=True, separators=(",", ":")).encode() + b"\0{}"
    # An envelope's own fields take a shorter way to the same text; other values the encoder's.
    for value in ('r"\\ü', 7, True, 7.0, None):
        full = {"v": 5, "run": "run-a", "sender": "client-0", "incarnation": 2**62, "seq": 7, "topic": "T",
                "bytes": 10, "salt": salt.hex(), "cipher": "none", "mac": "aegis-mac"}
        for key in ("run", "seq"):
            changed = {**full, key: value}
            assert signed_bytes(changed, "é") == json.dumps(changed, sort_keys=True, separators=(",", ":")).encode() \
                + "\0é".encode()


def test_signatures_are_ed25519_and_a_bad_one_does_not_hold():
    """The keyrings' Ed25519 keys (made by cryptography) sign and verify alike through libsodium."""
    private, data = Ed25519PrivateKey.generate(), b"signed envelope"
    public = private.public_key().public_bytes_raw()
    signature = Signer(private.private_bytes_raw()).sign(data)
    assert signature == private.sign(data).hex()
    assert signature_holds(public, signature, data)
    assert not signature_holds(public, signature, data + b"!")
    assert not signature_holds(Ed25519PrivateKey.generate().public_key().public_bytes_raw(), signature, data)
    for bad in (signature[:-2], "zz" + signature[2:], None, 7):
        assert not signature_holds(public, bad, data)
