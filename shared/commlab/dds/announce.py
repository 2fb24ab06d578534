"""Who is out there: every node announces its name, participant and roles on a durable topic.

Each node's writer keeps its last announcement (TransientLocal, depth 1), so late joiners and peers
that re-match after a restart (a new participant under the same name) see it; an update replaces
the previous one. The topic has no key: a process that invents names by the hundred thousand adds
samples to be rejected, not instances that every reader would keep. A peer is lost when the writer
whose announcement was accepted is no longer matched (it left, or its participant's lease expired).

A peer that comes back (paused, starved or cut off for longer than its lease, then rediscovered)
is accepted again: DDS delivers its durable announcement once more, and the copy identical to the
one accepted before, carried by a writer of the participant it names, is the same announcement,
not a replay. Its `matched` info is forgotten while it is gone (what it had matched may have been
unmatched meanwhile), its return is counted (Peer.returns, for protocols that re-send what it may
have missed), and this node announces itself anew, so the peer learns of it whatever it missed.
That announcement also says how often this node saw each peer come back (info "returned"), so a
peer that never noticed it was lost learns that what it wrote meanwhile may not have arrived
(PeerDirectory.gaps).
"""
# No `from __future__ import annotations`: the IDL binding resolves these hints at runtime.
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from cyclonedds.core import DDSException
from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import uint64
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

from .envelope import AuthError
from .opener import Opener
from .seal import Sealer
from .cdr import SampleInfo, serdata_bytes
from .qos import announcement
from .reading import ReaderLoop, matched_handles, wait_for_acks
from .stats import CommStats
from .throttle import ThrottledWarning

log = logging.getLogger(__name__)

ANNOUNCE_TOPIC = "commlab_announce"
LEAVE_ACK_S = 1.0  # a closing node waits at most this long for peers to hear it leave


@dataclass
class Announce(IdlStruct, typename="commlab.dds.Announce"):
    name: str
    participant: str
    incarnation: uint64
    # JSON: {"subscribes": [topic], "groups": {group: rank}, "matched": {topic: [writer participant]},
    #        "returned": {peer name: times it came back}, "done": [group this node finished],
    #        "leaving": true once it closes}
    info: str


@dataclass
class Peer:
    name: str
    participant: str
    incarnation: int
    info: dict[str, Any]
    alive: bool = True
    writer: int = 0  # publication handle of the writer whose announcement was accepted
    announced: str = ""  # the accepted announcement's info as sent (sealed): a redelivery is identical
    returns: int = 0  # times it came back after it was lost
    lost_at: float = 0.0  # time.monotonic() when it was last lost

    @property
    def left(self) -> bool:
        """It said it was closing: once lost, it is not coming back."""
        return self.info.get("leaving") is True


@dataclass
class PeerDirectory:
    """Live view of announced peers, updated by a reader thread; waiters block on `changed`."""
    own_name: str
    peers: dict[str, Peer] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)
    generation: int = 0  # bumped by every sample, so a publisher can tell that nothing changed
    opener: Opener | None = None  # set: only authenticated announcements count
    stats: CommStats = field(default_factory=CommStats)
    # The participant of a matched writer (by publication handle), None if it is not matched.
    writer_participant: Callable[[int], str | None] = lambda handle: None
    returned: bool = False  # a peer came back since the announcer last looked (it then announces anew)
    warn: Callable[..., None] = field(default_factory=lambda: ThrottledWarning(log))  # rejections: any rate

    def on_sample(self, sample: int, info: SampleInfo) -> None:
        if not info.valid_data:  # the instance's state changed: writers are followed by their matches
            return
        a = Announce.deserialize(serdata_bytes(sample))
        with self.changed:
            if a.name != self.own_name:
                self._take(a, info)
            self.generation += 1
            self.changed.notify_all()

    def on_matched(self, writers: set[int]) -> None:
        """The announcement writers matched now: a peer whose accepted writer is not among them
        left or lost its lease (a rogue writer of the same name leaving ends nothing)."""
        with self.changed:
            for peer in self.peers.values():
                if peer.alive and peer.writer not in writers:
                    peer.alive, peer.lost_at = False, time.monotonic()
                    peer.info = {**peer.info, "matched": {}}  # may be stale by the time it returns
                    log.warning("peer %r lost: %s", peer.name, "it left" if peer.left else "it left or its lease expired")
            self.generation += 1
            self.changed.notify_all()

    def _take(self, a: Announce, info: SampleInfo) -> None:
        before = self.peers.get(a.name)
        if before is not None and (before.participant, before.incarnation, before.announced) == \
                (a.participant, a.incarnation, a.info) and self.writer_participant(info.publication_handle) == a.participant:
            peer_info = before.info if before.alive else self.accept(a, redelivered=True)
        else:
            peer_info = self.accept(a)
        if peer_info is None:
            return
        back = before is not None and not before.alive and before.incarnation == a.incarnation
        returns = (before.returns if before is not None and before.incarnation == a.incarnation else 0) + back
        self.peers[a.name] = Peer(a.name, a.participant, a.incarnation, peer_info, writer=info.publication_handle,
                                  announced=a.info, returns=returns)
        if back:
            self.returned = True
            log.warning("peer %r is back (return %d)", a.name, returns)

    def accept(self, a: Announce, redelivered: bool = False) -> dict[str, Any] | None:
        """The announced info, or None (logged, counted) if it fails authentication or is no JSON
        object: an announcement nobody can vouch for never enters the directory (the barrier).
        `redelivered`: the copy of one accepted before, so its sequence number is not new."""
        text = a.info
        if self.opener is not None and self.opener.ring.key_with(a.name) is None:
            return None  # a node this one shares no key with (another client): not its peer
        try:
            if self.opener is not None and redelivered:
                text = json.loads(a.info)["meta"]  # authenticated when it was first accepted
            elif self.opener is not None:
                text, _ = self.opener.open_whole(ANNOUNCE_TOPIC, a.name, a.incarnation, a.info, b"")
            info = json.loads(text)
            if not isinstance(info, dict):
                raise ValueError("not a JSON object")
            return info
        except AuthError as e:
            self.stats.add(**{f"auth_{e.reason}": 1})
            self.warn(e.reason, "announcement of %r rejected: %s", a.name, e)
        except (ValueError, RecursionError) as e:
            self.stats.add(malformed_chunks=1)
            self.warn("malformed", "announcement of %r dropped: %s", a.name, e)
        return None

    def gaps(self, name: str) -> int:
        """How often the link with peer `name` (this incarnation of it) was cut for longer than a
        lease: the times this node saw it come back plus the times it says it saw this node come
        back. What either side wrote to the other before a cut may not have arrived."""
        peer = self.peers.get(name)
        if peer is None:
            return 0
        seen = peer.info.get("returned", {})
        theirs = seen.get(self.own_name, 0) if isinstance(seen, dict) else 0
        return peer.returns + (theirs if isinstance(theirs, int) and not isinstance(theirs, bool) and theirs > 0 else 0)

    def departed(self, name: str, return_s: float) -> str | None:
        """Why peer `name` is gone for good, or None while it is alive or may still come back: it
        said it was closing, or it is lost (its lease expired) for longer than return_s. A restart
        under the same name is a new incarnation that replaces it, alive."""
        with self.changed:
            peer = self.peers.get(name)
            if peer is None or peer.alive:
                return None
            if peer.left:
                return "left (it said it was closing)"
            lost_s = time.monotonic() - peer.lost_at
        return f"is gone (its lease expired) and was not back within {return_s:.0f}s" if lost_s > return_s else None

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


def _replace(info: dict, key: str, value: Any) -> bool:
    info[key] = value
    return True


class Announcer:
    """Owns the announcement writer/reader of one node."""

    def __init__(self, participant, name: str, incarnation: int, write_timeout_s: float,
                 sealer: Sealer | None, opener: Opener | None, stats: CommStats):
        self.name, self.incarnation, self.sealer = name, incarnation, sealer
        self.participant_id = str(participant.guid)
        topic = Topic(participant, ANNOUNCE_TOPIC, Announce, qos=announcement(write_timeout_s))
        self._writer = DataWriter(participant, topic, qos=announcement(write_timeout_s))
        self._reader = DataReader(participant, topic, qos=announcement(write_timeout_s, reader=True))
        self.directory = PeerDirectory(name, opener=opener, stats=stats, writer_participant=self._writer_participant)
        self._matched_version: tuple[int, int] = (-1, -1)
        self._loop = ReaderLoop(participant, self._reader, "announce", self.directory.on_sample, self._on_tick,
                                wake_on_match=True)
        self.info: dict[str, Any] = {"subscribes": [], "groups": {}, "matched": {}, "returned": {}, "done": []}
        self._lock = threading.Lock()  # reader threads update `matched`
        # Not announced until the first barrier: an announcement promises that the node's readers
        # exist, so that peers' publishers wait for them to match before writing.
        self.announced = False

    def _writer_participant(self, handle: int) -> str | None:
        try:
            data = self._reader.get_matched_publication_data(handle - 2**64 if handle >= 2**63 else handle)
        except DDSException:  # no longer matched
            return None
        return None if data is None else str(data.participant_key)

    def _on_tick(self) -> None:
        """Follow the matched writers (peers lost); announce anew after a peer came back: it may
        have missed (or refused) what we said."""
        status = self._reader.get_subscription_matched_status()
        version = (status.total_count, status.current_count)
        if version != self._matched_version:
            self._matched_version = version
            # The binding lists handles as signed int64, SampleInfo (cdr.py) as unsigned.
            self.directory.on_matched({h % 2**64 for h in matched_handles(self._reader.get_matched_publications)})
        with self.directory.changed:
            returned, self.directory.returned = self.directory.returned, False
            counts = {p.name: p.returns for p in self.directory.peers.values() if p.returns}
        if returned:
            self._update(lambda info: _replace(info, "returned", counts))

    def returns(self, name: str) -> int:
        """How often peer `name` (this incarnation of it) came back after it was lost."""
        peer = self.directory.peers.get(name)
        return 0 if peer is None else peer.returns

    def publish(self) -> None:
        # Written under the lock too: reader threads publish at once (each its reader's matches),
        # and the writer keeps only its last sample, so one sealed first but written last would
        # leave peers for good with stale info, e.g. without a match their barrier waits for.
        with self._lock:
            self.announced = True
            info = json.dumps(self.info)
            if self.sealer is not None:
                info, _ = self.sealer.seal(ANNOUNCE_TOPIC, info, b"")
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

    def mark_done(self, group: str) -> None:
        """Tell the group's peers that this node is done with it (info "done")."""
        self._update(lambda info: _replace(info, "done", sorted({*info["done"], group})))

    def wait_for_acks(self, timeout_s: float) -> bool:
        """Until every matched peer acknowledged the last announcement (False after timeout_s)."""
        return wait_for_acks(self._writer, timeout_s)

    def leave(self, timeout_s: float = LEAVE_ACK_S) -> None:
        """Say that this node is closing, so that peers do not wait for it to come back."""
        if self.announced:
            self._update(lambda info: _replace(info, "leaving", True))
            self.wait_for_acks(timeout_s)

    def join_group(self, group: str, rank: int) -> None:
        with self._lock:
            self.info["groups"][group] = rank
        self.publish()

    def close(self) -> None:
        # Peers see the writer unmatched as soon as the participant is deleted (host.close).
        self._loop.stop()
