"""DdsNode: the one DomainParticipant of a process, configured before it exists, plus its
announcement, topics, endpoints and CommStats."""
from __future__ import annotations

import random
import signal
import sys
from typing import Any

from cyclonedds.domain import Domain, DomainParticipant
from cyclonedds.topic import Topic

from .announce import Announcer
from .endpoints import ChunkWriter, Publisher, Subscriber
from .errors import BarrierTimeout
from .memory import keep_freed_blocks
from .messages import message_type
from .settings import DdsSettings
from .stats import CommStats


class DdsNode:
    def __init__(self, name: str, settings: DdsSettings):
        self.name, self.settings = name, settings
        self.stats = CommStats()
        keep_freed_blocks()  # large chunks would otherwise page-fault on every allocation (memory.py)
        # Distinguishes this run of `name` from an earlier one (a restarted controller reuses its name).
        self.incarnation = random.getrandbits(63)
        # The domain is created with our XML before the participant, so no default config
        # (multicast on eth0) is ever used.
        self._domain = Domain(settings.domain_id, settings.to_xml())
        self.participant = DomainParticipant(settings.domain_id)
        self.participant_id = str(self.participant.guid)
        self._topics: dict[str, Topic] = {}
        self._closables: list[Any] = []
        self.writers: list[ChunkWriter] = []  # the barrier waits until each has matched its readers
        self.announcer = Announcer(self.participant, name, self.incarnation, settings.write_timeout_s)

    def topic(self, name: str, data_type: type, qos) -> Topic:
        if name not in self._topics:
            self._topics[name] = Topic(self.participant, name, data_type, qos=qos)
        return self._topics[name]

    def publisher(self, message: str | type) -> Publisher:
        return Publisher(self, message_type(message))

    def subscriber(self, message: str | type) -> Subscriber:
        sub = Subscriber(self, message_type(message))
        self._closables.append(sub)
        return sub

    def add_closable(self, thing: Any) -> None:
        self._closables.append(thing)

    def peer_names(self, participants: set[str]) -> list[str]:
        by_id = {p.participant: n for n, p in self.announcer.directory.peers.items()}
        return sorted(by_id.get(p, f"unannounced participant {p}") for p in participants if p != self.participant_id)

    def barrier(self, expected: set[str], timeout_s: float) -> None:
        """Announce this node, then wait until every expected peer is alive and announced and every
        publisher of this node has matched the readers they announced (on both sides); BarrierTimeout
        names what is missing. Create subscribers before the barrier: publishers only wait for
        readers that were announced."""
        self.announcer.publish()
        directory = self.announcer.directory

        def missing() -> list[str]:
            absent = sorted(set(expected) - set(directory.alive()) - {self.name})
            return absent or sorted({f"{n} (reader of {w.name})" for w in self.writers for n in w.missing_readers()})
        with self.stats.waiting():
            if not directory.wait_for(lambda: not missing(), timeout_s):
                raise BarrierTimeout(missing(), timeout_s)

    def close(self) -> None:
        for thing in reversed(self._closables):
            thing.close()
        self._closables.clear()
        self.announcer.close()
        # Deleting the participant deletes its readers and writers; peers see us leave at once.
        self.participant.__del__()
        self._domain.__del__()

    def __enter__(self) -> "DdsNode":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def exit_cleanly_on_sigterm() -> None:
    """SIGTERM with the default handler kills like SIGKILL and stalls peers for a whole lease;
    turning it into SystemExit runs `finally`/close() so peers see the node leave at once."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
