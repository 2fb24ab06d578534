"""The run's discovery tag (commlab.dds.auth, settings): every keyring of a run holds it, a keyed
node's participant carries it, and DDS discovery ignores participants without it, so a process on
the domain with no key file neither holds a keyed node's write nor sees anything of the run."""
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from commlab.config.schema import ConfigError, DdsSection
from commlab.config.builders import dds_settings
from commlab.dds import DdsNode, DdsSettings
from commlab.dds.auth import KeyFileError, discovery_tag, make_keyrings, read_keyring, write_keyring
from commlab.dds.endpoints import ChunkWriter

NODES = ["controller", "client-0", "client-1"]
PAYLOAD = 8 * 2**20  # above a writer's unacknowledged-bytes watermark (at most 3 MiB): a matched silent reader holds it
WRITE_TIMEOUT_S = 30.0  # a hang guard: the write fails after this long if a stopped reader holds it
MATCH_S = 120.0  # a hang guard: discovery takes milliseconds


def test_every_keyring_of_a_run_holds_the_runs_tag_and_no_other_run_has_it(tmp_path):
    rings = make_keyrings("run-a", NODES, trusted={"controller"})
    tags = {ring.discovery_tag for ring in rings.values()}
    assert tags == {discovery_tag(rings["controller"].run_key)}  # clients hold it without the run key
    assert rings["controller"].for_node("client-0").discovery_tag in tags
    assert make_keyrings("run-a", NODES, trusted={"controller"})["client-0"].discovery_tag not in tags
    tag = tags.pop()
    assert tag not in repr(rings["client-0"]) and tag not in repr(DdsSettings(domain_id=1, keyring=rings["client-0"]))
    path = tmp_path / "client-0.key"
    write_keyring(path, rings["client-0"])
    assert read_keyring(path).discovery_tag == tag


@pytest.mark.parametrize("tag, problem", [(None, "has no discovery_tag"), ("ab" * 16, "64 lowercase hex digits"),
                                          ("<Tag/>" * 11, "64 lowercase hex digits")])
def test_a_key_file_without_a_good_tag_is_refused_in_one_line(tmp_path, tag, problem):
    path = tmp_path / "client-0.key"
    write_keyring(path, make_keyrings("run-a", NODES, trusted={"controller"})["client-0"])
    doc = json.loads(path.read_text())
    doc.pop("discovery_tag")
    if tag is not None:
        doc["discovery_tag"] = tag
    bad = tmp_path / "bad.key"
    bad.write_text(json.dumps(doc))
    os.chmod(bad, 0o600)
    with pytest.raises(KeyFileError, match=problem) as e:
        read_keyring(bad)
    assert "\n" not in str(e.value) and (tag is None or tag not in str(e.value))


def test_a_keyed_nodes_xml_carries_the_tag_and_a_keyless_ones_none(tmp_path):
    rings = make_keyrings("run-a", NODES, trusted={"controller"})
    tag = rings["controller"].discovery_tag
    path = tmp_path / "client-0.key"
    write_keyring(path, rings["client-0"])
    keyed = dds_settings(DdsSection(domain_id=3, key_file=str(path)))  # what every node program builds
    assert f"<Tag>{tag}</Tag></Discovery>" in keyed.to_xml()
    assert "<Tag>" not in DdsSettings(domain_id=3).to_xml()
    assert f"<Tag>{tag}</Tag>" in DdsSettings(domain_id=3, discovery_tag=tag).to_xml()  # a tag without keys
    with pytest.raises(ValueError, match="other than the keyring's"):
        DdsSettings(domain_id=3, keyring=rings["client-0"], discovery_tag="0" * 64)
    with pytest.raises(ValueError, match="64 lowercase hex digits"):
        dataclasses.replace(DdsSettings(domain_id=3), discovery_tag="</Discovery>")
    with pytest.raises(ValueError, match="unknown key"):  # from the key file only, never a config
        DdsSettings.from_config({"domain_id": 3, "discovery_tag": tag})
    doc = json.loads(path.read_text())
    del doc["discovery_tag"]
    old = tmp_path / "old.key"
    old.write_text(json.dumps(doc))
    os.chmod(old, 0o600)
    with pytest.raises(ConfigError, match="dds.key_file: .*has no discovery_tag"):
        dds_settings(DdsSection(domain_id=3, key_file=str(old)))


# A plain DDS participant, tagged (argv[2]) or not ("-"), with a reader on the model broadcast topic
# (its participant lease an hour: stopped, DDS keeps it matched), the announcements and the
# participants it discovers; it says what it got when the test asks.
READER = r"""
import sys
from cyclonedds.builtin import BuiltinDataReader, BuiltinTopicDcpsParticipant
from cyclonedds.domain import Domain, DomainParticipant
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from commlab.dds import DdsSettings
from commlab.dds.announce import ANNOUNCE_TOPIC, Announce
from commlab.dds.chunk import Chunk
from commlab.dds.qos import announcement, lossless
domain, tag = int(sys.argv[1]), sys.argv[2]
settings = DdsSettings(domain_id=domain, lease_s=3600.0, discovery_tag=None if tag == "-" else tag)
d = Domain(domain, settings.to_xml())
participant = DomainParticipant(domain)
peers = BuiltinDataReader(participant, BuiltinTopicDcpsParticipant)
announcements = DataReader(participant, Topic(participant, ANNOUNCE_TOPIC, Announce, qos=announcement(30)),
                           qos=announcement(30))
chunks = DataReader(participant, Topic(participant, "commlab_ModelBlob", Chunk, qos=lossless(30)), qos=lossless(30))
print(participant.guid, flush=True)
sys.stdin.readline()
seen = {str(p.key) for p in peers.take(N=100)} - {str(participant.guid)}
print(len(seen), len(announcements.take(N=100)),
      sum(len(c.payload) for c in chunks.take(N=10_000) if isinstance(c, Chunk)), flush=True)
"""


def reader(domain: int, tag: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", READER, str(domain), tag], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def what_it_got(proc: subprocess.Popen) -> tuple[int, int, int]:
    """(participants discovered, announcements taken, chunk payload bytes taken)."""
    out, _ = proc.communicate("report\n", timeout=60)
    return tuple(int(n) for n in out.split())


@pytest.mark.slow
def test_a_process_without_the_tag_neither_holds_a_write_nor_sees_the_run(domain):
    """The keyless reader starts first, is stopped before the write, and the write still completes;
    a reader started after it with the run's tag (an attacker that read it off a participant
    announcement, docs/security.md) is matched and takes the whole message, so discovery had time
    to match the first one too, had it had the tag (tests/security/test_silent_reader.py)."""
    rings = make_keyrings("run", ["controller", "client-0"], trusted={"controller"})
    settings = DdsSettings(domain_id=domain, keyring=rings["controller"], write_timeout_s=WRITE_TIMEOUT_S)
    with DdsNode("controller", settings) as node:
        node.announcer.publish()  # durable: a matched reader of the announcements takes it
        writer = ChunkWriter(node, "ModelBlob")
        keyless = reader(domain, "-")
        tagged = None
        try:
            keyless_id = keyless.stdout.readline().strip()
            assert keyless_id, "the keyless reader did not start"
            tagged = reader(domain, rings["client-0"].discovery_tag)
            tagged_id = tagged.stdout.readline().strip()
            give_up = time.monotonic() + MATCH_S
            while tagged_id not in writer.matched_participants():
                assert time.monotonic() < give_up, f"the tagged reader {tagged_id} never matched"
                time.sleep(0.05)
            keyless.send_signal(signal.SIGSTOP)
            writer.write("{}", bytes(PAYLOAD))  # DdsWriteTimeout if the stopped reader had matched
            assert keyless_id not in writer.matched_participants()
            keyless.send_signal(signal.SIGCONT)
            got = {"keyless": what_it_got(keyless), "tagged": what_it_got(tagged)}
        finally:
            for proc in (keyless, tagged):
                if proc is not None:
                    proc.kill()
                    proc.wait()
    assert got["keyless"] == (0, 0, 0)  # not a participant, not the announcement, not a byte
    participants, announcements, payload = got["tagged"]
    assert participants >= 1 and announcements >= 1 and payload == PAYLOAD


@pytest.mark.slow
def test_the_tag_travels_in_clear_in_participant_announcements(domain):
    """The limit docs/security.md states: a process that receives raw discovery datagrams learns the
    tag. Nodes on loopback announce themselves to the unicast discovery port of every participant
    index up to the highest (Cyclone: 7400 + 250 * domain + 10 + 2 * index); a plain UDP socket
    bound to an index no participant uses gets the node's first announcement, tag and all."""
    ring = make_keyrings("run", ["controller", "client-0"], trusted={"controller"})["controller"]
    settings = DdsSettings(domain_id=domain, keyring=ring)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 7400 + 250 * domain + 10 + 2 * settings.max_participants))
        sock.settimeout(MATCH_S)  # a hang guard: a node announces itself as it starts
        with DdsNode("controller", settings):
            datagram = sock.recv(65536)
    assert datagram.startswith(b"RTPS") and ring.discovery_tag.encode() in datagram
