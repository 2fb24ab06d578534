"""Who is out there: every node announces its name, participant and roles on a durable topic.

An announcement is keyed by node name with TransientLocal durability, so late joiners and peers
that re-match after a restart (a new participant under the same name) see it; an update replaces
the previous one. A peer whose participant lease expires or which leaves turns NOT_ALIVE here.
"""
# No `from __future__ import annotations`: the IDL binding resolves these hints at runtime.
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from cyclonedds.core import InstanceState
from cyclonedds.idl import IdlStruct
from cyclonedds.idl.annotations import key
from cyclonedds.idl.types import uint64
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

from .auth import AuthError, Opener, Sealer
from .cdr import SampleInfo, serdata_bytes
from .qos import announcement
from .reading import ReaderLoop
from .stats import CommStats

log = logging.getLogger(__name__)

ANNOUNCE_TOPIC = "commlab_announce"
ANNOUNCE_READER_DEPTH = 32


@dataclass
class Announce(IdlStruct, typename="commlab.dds.Announce"):
    name: str
    key("name")
    participant: str
    incarnation: uint64
    info: str  # JSON: {"subscribes": [topic], "groups": {group: rank}, "matched": {topic: [writer participant]}}


@dataclass
class Peer:
    name: str
    participant: str
    incarnation: int
    info: dict[str, Any]
    alive: bool = True
    writer: int = 0  # publication handle of the writer whose announcement was accepted


@dataclass
class PeerDirectory:
    """Live view of announced peers, updated by a reader thread; waiters block on `changed`."""
    own_name: str
    peers: dict[str, Peer] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)
    # An invalid sample (the instance was disposed or lost its writer) carries no data, only the
    # handle of its instance: remember which name each instance handle announced.
    names: dict[int, str] = field(default_factory=dict)
    generation: int = 0  # bumped by every sample, so a publisher can tell that nothing changed
    opener: Opener | None = None  # set: only authenticated announcements count
    stats: CommStats = field(default_factory=CommStats)


    def on_sample(self, sample: int, info: SampleInfo) -> None:
        with self.changed:
            if info.valid_data:
                a = Announce.deserialize(serdata_bytes(sample))
                peer_info = self.accept(a) if a.name != self.own_name else None
                if peer_info is not None:
                    self.names[info.instance_handle] = a.name
                    self.peers[a.name] = Peer(a.name, a.participant, a.incarnation, peer_info,
                                              writer=info.publication_handle)
            elif info.instance_state != InstanceState.Alive:  # NOT_ALIVE_*: the writer left or its lease expired
                peer = self.peers.get(self.names.get(info.instance_handle, ""))
                # Only the announcing writer's own dispose counts (a rogue writer of the same name
                # leaving must not end the real node); with no writers left, everyone has gone.
                own = info.instance_state == InstanceState.NotAliveNoWriters or \
                    (peer is not None and info.publication_handle == peer.writer)
                if peer is not None and own:
                    peer.alive = False
            self.generation += 1
            self.changed.notify_all()

    def accept(self, a: Announce) -> dict[str, Any] | None:
        """The announced info, or None (logged, counted) if it fails authentication or is no JSON
        object: an announcement nobody can vouch for never enters the directory (the barrier)."""
        text = a.info
        if self.opener is not None and self.opener.ring.key_with(a.name) is None:
            return None  # a node this one shares no key with (another client): not its peer
        try:
            if self.opener is not None:
                text = self.opener.open_whole(ANNOUNCE_TOPIC, a.name, a.incarnation, a.info, b"")
            info = json.loads(text)
            if not isinstance(info, dict):
                raise ValueError("not a JSON object")
            return info
        except AuthError as e:
            self.stats.add(**{f"auth_{e.reason}": 1})
            log.warning("announcement of %r rejected: %s", a.name, e)
        except (ValueError, RecursionError) as e:
            self.stats.add(malformed_chunks=1)
            log.warning("announcement of %r dropped: %s", a.name, e)
        return None

    def wait_for(self, ready: Callable[[], bool], timeout_s: float, poll_s: float = 0.05) -> bool:
        """Wait until ready() (evaluated under the lock) holds; poll too, since matching is not notified."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            while not ready():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, poll_s))
        return True

    def alive(self) -> dict[str, Peer]:
        return {n: p for n, p in self.peers.items() if p.alive}


class Announcer:
    """Owns the announcement writer/reader of one node."""

    def __init__(self, participant, name: str, incarnation: int, write_timeout_s: float,
                 sealer: Sealer | None, opener: Opener | None, stats: CommStats):
        self.name, self.incarnation, self.sealer = name, incarnation, sealer
        self.participant_id = str(participant.guid)
        topic = Topic(participant, ANNOUNCE_TOPIC, Announce, qos=announcement(write_timeout_s))
        self.directory = PeerDirectory(name, opener=opener, stats=stats)
        self._writer = DataWriter(participant, topic, qos=announcement(write_timeout_s))
        self._reader = DataReader(participant, topic, qos=announcement(write_timeout_s, ANNOUNCE_READER_DEPTH))
        self._loop = ReaderLoop(participant, self._reader, "announce", self.directory.on_sample)
        self.info: dict[str, Any] = {"subscribes": [], "groups": {}, "matched": {}}
        self._lock = threading.Lock()  # reader threads update `matched`
        # Not announced until the first barrier: an announcement promises that the node's readers
        # exist, so that peers' publishers wait for them to match before writing.
        self.announced = False

    def publish(self) -> None:
        with self._lock:
            self.announced = True
            info = json.dumps(self.info)
            if self.sealer is not None:
                info = self.sealer.seal(ANNOUNCE_TOPIC, info, b"")
        self._writer.write(Announce(self.name, self.participant_id, self.incarnation, info))

    def _update(self, change: Callable[[dict], bool]) -> None:
        with self._lock:
            changed = change(self.info)
        if changed and self.announced:
            self.publish()

    def add_subscription(self, topic: str) -> None:
        def add(info: dict) -> bool:
            if topic in info["subscribes"]:
                return False
            info["subscribes"].append(topic)
            return True
        self._update(add)

    def set_matched_writers(self, topic: str, participants: set[str]) -> None:
        """Which participants' writers our reader of `topic` has matched. Matching is discovered
        separately on each side, and a volatile reader drops data from a writer it has not matched
        yet, so publishers wait until the reader side has announced the match too."""
        def put(info: dict) -> bool:
            new = sorted(participants)
            if info["matched"].get(topic) == new:
                return False
            info["matched"][topic] = new
            return True
        self._update(put)

    def join_group(self, group: str, rank: int) -> None:
        with self._lock:
            self.info["groups"][group] = rank
        self.publish()

    def close(self) -> None:
        self._loop.stop()
        try:
            self._writer.dispose(Announce(self.name, self.participant_id, self.incarnation, ""))
        except Exception:  # leaving anyway; peers fall back on the lease
            pass
