"""DdsNode: the one DomainParticipant of a process (host.EndpointHost: configured before it
exists, its announcement, topics and CommStats) with typed publishers, subscribers and the barrier."""
from __future__ import annotations

import signal
import sys

from .endpoints import Publisher, Subscriber
from .errors import BarrierTimeout
from .host import EndpointHost
from .messages import message_type


class DdsNode(EndpointHost):
    def publisher(self, message: type) -> Publisher:
        return Publisher(self, message_type(message))

    def subscriber(self, message: type) -> Subscriber:
        sub = Subscriber(self, message_type(message))
        self._closables.append(sub)
        return sub

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

    def __enter__(self) -> "DdsNode":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def exit_cleanly_on_sigterm() -> None:
    """SIGTERM with the default handler kills like SIGKILL and stalls peers for a whole lease;
    turning it into SystemExit runs `finally`/close() so peers see the node leave at once."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
