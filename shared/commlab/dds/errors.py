"""The exceptions of the DDS transport; every one names what went wrong and with whom."""
from __future__ import annotations


class DdsError(RuntimeError):
    """Base class of every transport failure."""


class DdsWriteTimeout(DdsError):
    """A reliable write could not complete within write_timeout_s; the sample was NOT delivered.

    `unannounced`: the participants of matched readers that no authenticated node announced. DDS
    matches any reader of a topic whose participant has the run's discovery tag (any at all in a
    run without keys), and a reliable writer waits for every matched reader's acknowledgement, so a
    process without a key that has learnt the tag (it travels in clear, docs/security.md),
    subscribes and never acknowledges holds the writer; the message names it first, as the likely
    holder."""

    def __init__(self, topic: str, peers: list[str], detail: str, unannounced: list[str] = ()):
        self.topic, self.peers, self.unannounced = topic, peers, list(unannounced)
        held = (f"; held by a reader that no node announced (participant(s) {', '.join(self.unannounced)}: a process "
                "on the domain without a key, in a keyed run one that has the run's discovery tag; only DDS "
                "Security could refuse it)") if self.unannounced else ""
        super().__init__(f"write on topic {topic!r} timed out ({detail}){held}; "
                         f"peer(s): {', '.join(peers) or 'none matched'}")


class BarrierTimeout(DdsError):
    """Not every expected peer matched and announced itself in time."""

    def __init__(self, missing: list[str], timeout_s: float, what: str = "peers"):
        self.missing = missing
        super().__init__(f"barrier timed out after {timeout_s:.1f}s; missing {what}: {', '.join(missing)}")


class PeerLost(DdsError):
    """A rank of a collective is gone (lease expired, left) or sent nothing within the timeout."""

    def __init__(self, ranks: list[int], group: str, key: str, reason: str):
        self.ranks = ranks
        names = ", ".join(f"rank {r}" for r in ranks)
        super().__init__(f"{names} lost in group {group!r} during {key!r}: {reason}")


class PeerGone(DdsError):
    """A node this one cannot go on without left, or did not come back within its return window."""


class MessageError(DdsError, ValueError):
    """A received chunk or message is malformed; it is dropped, logged and counted, never delivered."""
