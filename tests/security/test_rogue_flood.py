"""A keyless process that has the run's discovery tag (read off a participant announcement, where it
travels in clear) floods the domain's announcement topic with made-up names and fresh
incarnations: the nodes' memory stays bounded, and real nodes still find each other meanwhile."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commlab.dds import DdsNode, DdsSettings
from commlab.dds.auth import make_keyrings
from commlab.dds.qos import ANNOUNCE_BACKLOG

pytestmark = pytest.mark.slow
FLOOD = 100_000  # announcements the rogue writes
RSS_CAP_MIB = 16  # what the flood may add to a node's resident memory

ROGUE = r"""
import sys
from cyclonedds.domain import Domain, DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.core import Policy, Qos
from cyclonedds.topic import Topic
from cyclonedds.util import duration
from commlab.dds import DdsSettings
from commlab.dds.announce import ANNOUNCE_TOPIC, Announce
from commlab.dds.qos import announcement
domain, n, tag = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
settings = DdsSettings(domain_id=domain, discovery_tag=tag)
d = Domain(domain, settings.to_xml())
participant = DomainParticipant(domain)
# KeepAll: every announcement reaches the node (a full reader backlog makes the write wait),
# where a node's own KeepLast(1) writer would replace what the reader has not yet taken
keep_all = Qos(*(p for p in announcement(30) if p != Policy.History.KeepLast(1)), Policy.History.KeepAll)
writer = DataWriter(participant, Topic(participant, ANNOUNCE_TOPIC, Announce, qos=announcement(30)), qos=keep_all)
print("flooding", flush=True)
for i in range(n):  # half made-up names, half a real name under ever new incarnations
    writer.write(Announce(f"node-{i}" if i % 2 else "client-0", "junk", i, '{"subscribes": []}'))
writer.wait_for_acks(duration(seconds=120))  # all of them in the node's reader
print("done", flush=True)
"""

CLIENT = r"""
import sys
from commlab.dds import DdsNode, DdsSettings
from commlab.dds.auth import read_keyring
from pathlib import Path
with DdsNode("client-0", DdsSettings(domain_id=int(sys.argv[1]), keyring=read_keyring(Path(sys.argv[2])))) as node:
    node.barrier({"controller"}, 120)
    print("found the controller", flush=True)
"""


def rss_mib(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_a_flood_of_names_and_incarnations_leaves_memory_bounded_and_peers_found(tmp_path, domain):
    from commlab.dds.auth import write_keyring
    rings = make_keyrings("run", ["controller", "client-0"], trusted={"controller"})
    key = tmp_path / "client-0.key"
    write_keyring(key, rings["client-0"])
    with DdsNode("controller", DdsSettings(domain_id=domain, keyring=rings["controller"])) as node:
        node.announcer.publish()
        time.sleep(0.5)  # let the node settle before taking its baseline
        before = rss_mib(os.getpid())
        rogue = subprocess.Popen([sys.executable, "-c", ROGUE, str(domain), str(FLOOD), rings["client-0"].discovery_tag],
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert rogue.stdout.readline().strip() == "flooding"
            client = subprocess.run([sys.executable, "-c", CLIENT, str(domain), str(key)], capture_output=True,
                                    text=True, timeout=150)  # joins while the flood goes on
            assert client.returncode == 0 and "found the controller" in client.stdout, client.stderr[-2000:]
            assert rogue.wait(300) == 0
        finally:
            rogue.kill()
        grown = rss_mib(os.getpid()) - before
        stats = node.stats.snapshot()
    # each one refused; those still in the reader's backlog when the rogue ended may not be counted yet
    assert stats["auth_unauthenticated"] + stats["auth_wrong_key"] >= FLOOD - ANNOUNCE_BACKLOG
    assert grown < RSS_CAP_MIB, f"{grown:.1f} MiB"


def test_a_nodes_own_announcement_never_waits_for_its_own_reader(domain):
    """What a flood did to a node: its announcement reader full (ANNOUNCE_BACKLOG unread samples)
    and its thread behind, the node's own next announcement, delivered to that reader too, blocked
    for write_timeout_s (the client above then failed to leave). Here nothing drains the reader,
    and the node announces itself more times than the reader holds."""
    with DdsNode("client-0", DdsSettings(domain_id=domain, write_timeout_s=1.0)) as node:
        node.announcer._loop.stop()  # the reader thread: nothing takes what arrives from now on
        for _ in range(ANNOUNCE_BACKLOG + 10):
            node.announcer.publish()  # DDSException (timeout) once its own reader would be full
