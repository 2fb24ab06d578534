"""Encrypted payloads (commlab.dds.seal, opener; format in envelope.py): what each key opens, what
tampering and old frames get."""
import json

import pytest

from commlab.dds.auth import make_keyrings
from commlab.dds import aegis
from commlab.dds.envelope import AuthError, payload_cipher, recipient_keys, signed_bytes
from commlab.dds.opener import Opener
from commlab.dds.seal import Sealer

NODES = ["controller", "client-0", "client-1"]
PLAIN = b"model weights " * 64


@pytest.fixture
def rings():
    return make_keyrings("run-a", NODES, trusted={"controller"})


def open_whole(ring, sender: Sealer, envelope: str, sent: bytes, topic="ModelBlob") -> bytes:
    return Opener(ring).open_whole(topic, sender.ring.node, sender.incarnation, envelope, sent)[1]


def test_the_broadcast_is_one_ciphertext_every_client_decrypts(rings):
    ctl = Sealer(rings["controller"], 1)
    envelope, sent = ctl.seal("ModelBlob", "{}", PLAIN)
    assert PLAIN[:16] not in sent and len(sent) == len(PLAIN)
    assert set(json.loads(envelope)["keys"]) == {"client-0", "client-1"}  # the message key, wrapped for each
    assert open_whole(rings["client-0"], ctl, envelope, sent) == PLAIN
    assert open_whole(rings["client-1"], ctl, envelope, sent) == PLAIN
    again = ctl.seal("ModelBlob", "{}", PLAIN)[1]
    assert again != sent  # a new key for every message


def test_an_update_is_readable_by_the_controller_alone(rings):
    client = Sealer(rings["client-0"], 1)
    envelope, sent = client.seal("ClientUpdate", "{}", PLAIN)
    assert "keys" not in json.loads(envelope)  # one recipient: a key derived from the pair key
    assert PLAIN[:16] not in sent
    assert open_whole(rings["controller"], client, envelope, sent, "ClientUpdate") == PLAIN
    with pytest.raises(AuthError, match="unauthenticated"):  # client-1 has no tag, and no key to derive
        open_whole(rings["client-1"], client, envelope, sent, "ClientUpdate")


def test_tampered_ciphertext_is_rejected_with_one_line(rings):
    for sender, receiver in (("controller", "client-0"), ("client-0", "controller")):
        sealer = Sealer(rings[sender], 1)
        envelope, sent = sealer.seal("ModelBlob", "{}", PLAIN)
        tampered = bytearray(sent)
        tampered[100] ^= 0x01
        with pytest.raises(AuthError, match="altered") as e:
            open_whole(rings[receiver], sealer, envelope, bytes(tampered))
        assert "\n" not in str(e.value)


def test_a_client_holding_the_broadcast_key_cannot_alter_it_for_another(rings):
    """client-1 unwraps the message key, so it can make a ciphertext of other weights whose AEAD tag
    holds; the controller's signature covers the ciphertext's digest, which it cannot match."""
    ctl = Sealer(rings["controller"], 1)
    envelope, _ = ctl.seal("ModelBlob", "{}", PLAIN)
    doc = json.loads(envelope)
    signed = signed_bytes(doc["auth"], doc["meta"])
    salt = bytes.fromhex(doc["auth"]["salt"])
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    wrap, _ = recipient_keys(rings["client-1"].pair_keys["controller"], salt, "client-1", signed)
    key = AESGCM(wrap).decrypt(bytes(12), bytes.fromhex(doc["keys"]["client-1"]), None)
    assert len(key) == aegis.KEY_BYTES
    forger = payload_cipher(key, signed)
    forged = bytearray(len(PLAIN))
    forger.update_into(b"poisoned weight" * (len(PLAIN) // 15) + b"x" * (len(PLAIN) % 15), forged)
    doc["trailer"]["aead"] = forger.tag().hex()
    with pytest.raises(AuthError, match="altered"):
        open_whole(rings["client-0"], ctl, json.dumps(doc), bytes(forged))


def test_frames_of_the_previous_wire_version_are_refused_with_a_clear_line(rings):
    client = Sealer(rings["client-0"], 1)
    envelope, sent = client.seal("ClientUpdate", "{}", b"")
    doc = json.loads(envelope)
    doc["auth"]["v"] = 4  # version 4 derived keys and tags by HKDF and HMAC
    with pytest.raises(AuthError, match="wire version 4; this node reads version 5 only"):
        open_whole(rings["controller"], client, json.dumps(doc), sent, "ClientUpdate")
    del doc["auth"]["v"]  # version 1 had no version field, no salt and no cipher
    with pytest.raises(AuthError, match="wire version 1; this node reads version 5 only"):
        open_whole(rings["controller"], client, json.dumps(doc), sent, "ClientUpdate")


def test_mac_only_sends_the_payload_in_clear_and_still_authenticates_it(rings):
    client = Sealer(rings["client-0"], 1, encrypt=False)
    envelope, sent = client.seal("ClientUpdate", "{}", PLAIN)
    assert sent == PLAIN and json.loads(envelope)["auth"]["cipher"] == "none"
    assert open_whole(rings["controller"], client, envelope, sent, "ClientUpdate") == PLAIN
    with pytest.raises(AuthError, match="altered"):
        open_whole(rings["controller"], Sealer(rings["client-0"], 1, encrypt=False),
                   client.seal("ClientUpdate", "{}", PLAIN)[0], PLAIN[:-1] + b"X", "ClientUpdate")


def test_encryption_is_on_by_default_on_every_link_and_a_config_says_otherwise():
    from commlab.config.schema import ConfigError, DdsSection, from_dict
    from commlab.config.builders import dds_settings
    from commlab.dds.settings import DdsSettings
    assert DdsSettings(domain_id=1).encrypt is True
    assert DdsSettings(domain_id=1, loopback_tuned=False).encrypt is True
    assert DdsSettings(domain_id=1, encrypt=False).encrypt is False
    assert dds_settings(from_dict(DdsSection, {"domain_id": 1}, "dds.")).encrypt is True
    assert dds_settings(from_dict(DdsSection, {"domain_id": 1, "encrypt": False}, "dds.")).encrypt is False
    with pytest.raises(ValueError, match="dds.encrypt must be true or false"):
        DdsSettings(domain_id=1, encrypt="yes")
    with pytest.raises(ConfigError, match="encrypt: expected bool"):
        from_dict(DdsSection, {"domain_id": 1, "encrypt": "yes"}, "dds.")


@pytest.mark.parametrize("encrypt", [True, False])
def test_a_message_sealed_for_its_one_reader_opens_there_alone(encrypt):
    """A ring block goes to the next rank only: tagged (and keyed) for it alone, one MAC pass over
    the payload instead of one per peer; another peer cannot open it."""
    names = ["worker-0", "worker-1", "worker-2"]
    workers = make_keyrings("run-a", names, trusted=set(names))  # DDP ranks: equals, pair tags, no signatures
    sender = Sealer(workers["worker-0"], 1, encrypt=encrypt)
    everyone = json.loads(sender.seal("coll_ddp_ring1", "{}", PLAIN)[0])
    assert set(everyone["tags"]) == set(everyone["trailer"].get("tags", everyone["tags"])) == {"worker-1", "worker-2"}
    envelope, sent = sender.seal("coll_ddp_ring1", "{}", PLAIN, to=("worker-1",))
    doc = json.loads(envelope)
    assert set(doc["tags"]) == {"worker-1"} and "keys" not in doc
    assert set(doc["trailer"].get("tags", {"worker-1": ""})) == {"worker-1"}
    assert open_whole(workers["worker-1"], sender, envelope, sent, "coll_ddp_ring1") == PLAIN
    with pytest.raises(AuthError, match="unauthenticated"):
        open_whole(workers["worker-2"], sender, envelope, sent, "coll_ddp_ring1")
