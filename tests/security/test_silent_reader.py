"""A keyless process that has the run's discovery tag (read off a participant announcement, where it
travels in clear) subscribes to a data topic and then never acknowledges (stopped, with a
participant lease of an hour, so DDS keeps its reader matched): it holds a reliable writer, the
write fails after write_timeout_s, never hangs, and its one-line error names that participant as
the reader no node announced, apart from the authenticated peers. Without the tag it cannot match
at all (test_discovery_tag.py)."""
import signal
import subprocess
import sys
import time

import pytest

from commlab.dds import DdsNode, DdsSettings, DdsWriteTimeout
from commlab.dds.auth import make_keyrings
from commlab.dds.endpoints import ChunkWriter

pytestmark = pytest.mark.slow
WRITE_TIMEOUT_S = 3.0
MATCH_S = 120.0  # a hang guard: discovery takes milliseconds
PAYLOAD = 32 * 2**20  # far above the writer's unacknowledged-bytes watermark, so the writer must wait

SILENT_READER = r"""
import dataclasses, sys, time
from cyclonedds.domain import Domain, DomainParticipant
from cyclonedds.sub import DataReader
from commlab.dds import DdsSettings
from commlab.dds.chunk import Chunk
from commlab.dds.qos import lossless
from cyclonedds.topic import Topic
domain, tag = int(sys.argv[1]), sys.argv[2]
settings = dataclasses.replace(DdsSettings(domain_id=domain, discovery_tag=tag), lease_s=3600.0)  # never lost to its peers
d = Domain(domain, settings.to_xml())
participant = DomainParticipant(domain)
reader = DataReader(participant, Topic(participant, "commlab_ModelBlob", Chunk, qos=lossless(30)), qos=lossless(30))
print(participant.guid, flush=True)
time.sleep(3600)
"""


def test_a_reader_that_never_acknowledges_fails_the_write_in_one_line_naming_it(domain):
    rings = make_keyrings("run", ["controller", "client-0"], trusted={"controller"})
    settings = DdsSettings(domain_id=domain, keyring=rings["controller"], write_timeout_s=WRITE_TIMEOUT_S)
    with DdsNode("controller", settings) as node:
        writer = ChunkWriter(node, "ModelBlob")
        silent = subprocess.Popen([sys.executable, "-c", SILENT_READER, str(domain), rings["client-0"].discovery_tag],
                                  stdout=subprocess.PIPE, text=True)
        try:
            participant = silent.stdout.readline().strip()
            assert participant, "the silent reader did not start"
            give_up = time.monotonic() + MATCH_S
            while participant not in writer.matched_participants():
                assert time.monotonic() < give_up, f"the silent reader {participant} never matched"
                time.sleep(0.05)
            silent.send_signal(signal.SIGSTOP)
            with pytest.raises(DdsWriteTimeout) as e:
                writer.write("{}", bytes(PAYLOAD))
        finally:
            silent.kill()
            silent.wait()
    message = str(e.value)
    assert e.value.unannounced == [participant] and e.value.peers == []
    assert "\n" not in message and f"held by a reader that no node announced (participant(s) {participant}" in message
