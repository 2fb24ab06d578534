"""EndpointHost: what a node's endpoints attach to. The one DomainParticipant of a process,
configured before it exists, with its settings, topics, announcement, CommStats and writers.

DdsNode (node.py) builds on it with publishers, subscribers and the barrier; the endpoints
(endpoints.py) need only this, so neither of the two modules imports the other's user.
"""
from __future__ import annotations

import logging
import random
import time
from typing import Any, Protocol

from cyclonedds.domain import Domain, DomainParticipant
from cyclonedds.topic import Topic

from .announce import Announcer
from .opener import Opener
from .seal import Sealer
from .memory import keep_freed_blocks
from .settings import DdsSettings
from .shm import SHM_DIR, Probe, SlotReader, shares_memory
from .stats import CommStats

log = logging.getLogger(__name__)


class Writer(Protocol):
    """What the barrier asks of each writer (endpoints.ChunkWriter registers itself in `writers`)."""
    name: str

    def missing_readers(self) -> list[str]: ...


class EndpointHost:
    def __init__(self, name: str, settings: DdsSettings):
        self.name, self.settings = name, settings
        self.stats = CommStats(interface=settings.interface)
        keep_freed_blocks()  # large chunks would otherwise page-fault on every allocation (memory.py)
        # Distinguishes this run of `name` from an earlier one (a restarted process may reuse its
        # name); ordered by start time (microseconds, 12 random low bits), so receivers can refuse
        # an older incarnation that speaks again (a replay, commlab.dds.opener).
        self.incarnation = (time.time_ns() // 1000) << 12 | random.getrandbits(12)
        # The domain is created with our XML before the participant, so no default config
        # (multicast on eth0) is ever used.
        self._domain = Domain(settings.domain_id, settings.to_xml())
        self.participant = DomainParticipant(settings.domain_id)
        self.participant_id = str(self.participant.guid)
        self._topics: dict[str, Topic] = {}
        self._closables: list[Any] = []
        self.writers: list[Writer] = []  # the barrier waits until each has matched its readers
        ring = settings.keyring.for_node(name) if settings.keyring is not None else None
        self.sealer = Sealer(ring, self.incarnation, settings.encrypt) if ring is not None else None
        self.opener = None if ring is None else Opener(ring, lambda: self.stats.add(auth_windows_replaced=1))
        self.announcer = Announcer(self.participant, name, self.incarnation, settings.write_timeout_s,
                                   self.sealer, self.opener, self.stats)
        # Unshaped loopback only: on a shaped link the bytes must cross it (shm.py).
        self.probe = self._probe() if settings.shared_memory and settings.loopback_tuned else None
        if self.probe is not None:
            self.announcer.info["shm"] = self.probe.info()
        self.slot_reader = SlotReader()
        self._sharing: dict[tuple[str, int], bool] = {}  # (peer, incarnation) -> shares /dev/shm with us

    def topic(self, name: str, data_type: type, qos) -> Topic:
        if name not in self._topics:
            self._topics[name] = Topic(self.participant, name, data_type, qos=qos)
        return self._topics[name]

    def add_closable(self, thing: Any) -> None:
        self._closables.append(thing)

    def peer_names(self, participants: set[str]) -> tuple[list[str], list[str]]:
        """(the names of the announced peers among `participants`, the ids of the others): a
        participant that no authenticated node announced is a process on the domain without a key."""
        by_id = {p.participant: n for n, p in self.announcer.directory.peers.items()}
        others = participants - {self.participant_id}
        return sorted(by_id[p] for p in others if p in by_id), sorted(p for p in others if p not in by_id)

    def _probe(self) -> Probe | None:
        try:
            return Probe()
        except OSError as e:  # no /dev/shm, or not writable: ring blocks go over UDP
            log.warning("%s: no shared memory for ring blocks (%s: %s)", self.name, SHM_DIR, e.strerror)
            return None

    def shares_memory_with(self, name: str) -> tuple[bool, int]:
        """(whether this node and the live peer `name` share /dev/shm and may use it, that
        incarnation of the peer); checked once per incarnation."""
        peer = self.announcer.directory.alive().get(name)
        if peer is None or self.probe is None:
            return False, -1
        key = (name, peer.incarnation)
        if key not in self._sharing:
            self._sharing[key] = shares_memory(peer.info.get("shm"))
        return self._sharing[key], peer.incarnation

    def close(self) -> None:
        for thing in reversed(self._closables):
            thing.close()
        self._closables.clear()
        self.slot_reader.close()
        if self.probe is not None:
            self.probe.close()
        self.announcer.leave()
        self.announcer.close()
        if self.sealer is not None:
            self.sealer.close()
            self.opener.close()
        # Deleting the participant deletes its readers and writers; peers see us leave at once.
        self.participant.__del__()
        self._domain.__del__()
