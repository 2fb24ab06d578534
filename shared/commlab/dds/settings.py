"""Per-participant Cyclone DDS configuration: the XML every process of ours must run with.

Cyclone with no configuration multicasts discovery on the first real interface, so the XML always
pins the interface and (locally) the unicast peer list. Large messages and fragments help only on
loopback or unshaped links; on a shaped MTU-1500 link they cause drop storms, so they are opt-in.

Shaped links: a DDS datagram spans `datagram_frames` IP fragments of the link's MTU (6 by default)
instead of one, so RTPS, UDP and IP headers cost 3.6 % of the payload instead of 9.4 %, and a
writer runs at most `send_window_bytes` ahead of its acknowledgements. The window is what keeps
large datagrams safe: with Cyclone's adaptive default (up to 500 kB) two writers of one node
overflowed the link's 400 ms tbf queue, and each lost frame cost its whole datagram again (a ring
allreduce of 6.65 MB sent 22x the payload with 40-frame datagrams). Measured on 10 Mbit/s
namespaces, WORLD=3 ring allreduce (benchmarks/bench_allreduce.py, interface bytes): 1 frame
1.477x the payload in 8.14 s, 6 frames 1.393x in 7.62 s (docs/transport.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping
from xml.sax.saxutils import escape

from .auth import DISCOVERY_TAG, Keyring

# Fragment and message sizes: one DATA_FRAG per UDP datagram in both modes, which keeps
# the wire-byte estimate in stats.py exact (see docs/transport.md).
LOOPBACK_FRAGMENT = 60000
LOOPBACK_MESSAGE = 65000
MTU = 1500  # of a shaped link; dds.link_mtu says when it is smaller (a swarm overlay: 1450, VXLAN)
# A datagram of k frames: an RTPS message of k * (MTU - 20 IP) - 8 UDP - 16 spare (a piggybacked
# heartbeat) bytes, carrying a fragment 112 bytes smaller; k = 1 on MTU 1500: 1456 and 1344.
DATAGRAM_FRAMES = 6
MAX_DATAGRAM_FRAMES = 44  # frames of 1480 bytes: a UDP datagram's 64 KiB
# A fast link's datagram (link_datagram_frames): the frames it carries in about LINK_DATAGRAM_S, at
# least DATAGRAM_FRAMES. Each datagram costs a send call and Cyclone's work on both ends, and at
# 1 Gbit/s that work, not the link, was what held a ring allreduce back on a 2-core machine; a
# writer's window (LINK_WINDOW_S) keeps such a link's tbf queue from ever overflowing, so a
# larger datagram risks nothing there. Lossy links keep DATAGRAM_FRAMES (testbed.compose_file).
# Measured at 1 Gbit/s, WORLD=2, DDP on the MNIST CNN (benchmarks/bench_crossover.py --rates 1gbit
# --ddp-cases dense,gloo-none): shorter DDS steps with 44-frame datagrams than with 6-frame ones,
# and fewer bytes, with gloo's steps the same.
LINK_DATAGRAM_S = 0.0005
SEND_WINDOW = 32 * 1024  # bytes a writer runs ahead of acknowledgements on a shaped link, at least
# A fast link's window (link_send_window_bytes): what it carries in about LINK_WINDOW_S. A writer
# stops at its window until the reader's acknowledgement of a heartbeat comes back through both
# nodes' receive threads, which takes a fraction of a millisecond on an idle machine and more on a
# busy one; 32 KiB is 0.26 ms of a 1 Gbit/s link, so a window that small held a ring allreduce's
# writers there below the rate. Measured at 1 Gbit/s, WORLD=3 (benchmarks/bench_allreduce.py
# --profile 1000mbit --multicast data, with and without --send-window 32768, three interleaved
# pairs): 512 KiB windows about 4 % faster per ring allreduce in every pair; the naive allreduce's
# multicast sends, one writer a node, no steadily faster.
# LINK_WINDOW_S stays far below the tbf queue's 400 ms (links.profiles.tbf_args) at every rate.
LINK_WINDOW_S = 0.004
MAX_SEND_WINDOW = 1 << 24
IP_HEADER, UDP_SPARE, FRAGMENT_HEADERS = 20, 8 + 16, 112
# Default chunk sizes. Shaped links: <= 256 KB chunks avoid drop storms, 64 KiB is safe. Loopback:
# 1 MiB chunks cut the per-chunk Python work on both ends (1.7 MB and 10 MB messages measured
# about 15% faster than with 64 KiB, see docs/transport.md).
LOOPBACK_CHUNK = 1024 * 1024
MTU_CHUNK = 64 * 1024
# A shaped link's chunk (link_chunk_bytes): what it carries in about LINK_CHUNK_S, so that the
# per-chunk work of both ends (and of the ring allreduce, whose blocks are chunks) stays small
# beside the chunk's time on the link: MTU_CHUNK up to 100 Mbit/s, FAST_LINK_CHUNK at 1 Gbit/s.
# Measured at 1 Gbit/s, WORLD=3 ring allreduce of 6.65 MB (benchmarks/bench_allreduce.py
# --chunk-bytes): 256 KiB and 1 MiB blocks were both faster than 64 KiB ones, 1 MiB not steadily
# faster than 256 KiB, which is the most that slow links stand (see above).
LINK_CHUNK_S = 0.002
FAST_LINK_CHUNK = 256 * 1024
# The ring allreduce (ring.py): its directions and its largest block, one message each. Each
# message costs the same Python work on both ends whatever its size. Loopback: one ring (one thread
# and half the messages per rank) and blocks of up to LOOPBACK_RING_BLOCK, each one chunk, so that
# a small model's segment (the MNIST CNN's at WORLD=3: 2.2 MB) travels as one message. Measured
# on loopback, WORLD=3, DDP on the MNIST CNN (benchmarks/bench_peers.py --only dds-dense-ring,
# interleaved, load 5-6): whole segments 0.2028 and 0.1449 s per step with 0.0723 and 0.0639 s of
# CPU, 1 MiB blocks (three of 740 KB a segment) 0.2233 and 0.1952 s with 0.0792 and 0.0660 s. Shaped
# links: two rings (one writer alone leaves a 10 Mbit link partly idle) and blocks of chunk_bytes,
# or, on a fast link (link_ring_block_bytes), of what it carries in about LINK_RING_BLOCK_S (a
# block waits for the whole of its input before it goes on: larger blocks lengthen the pipeline)
# in chunks of chunk_bytes, at most FAST_LINK_RING_BLOCK. Measured at 1 Gbit/s, WORLD=3, DDP on the
# MNIST CNN (benchmarks/bench_peers.py, two runs each): 1 MiB blocks took 13-15 % less CPU per step
# than 256 KiB ones, and no longer steps.
LOOPBACK_RING_BLOCK = 4 * 1024 * 1024
LINK_RING_BLOCK_S = 0.008
FAST_LINK_RING_BLOCK = 1024 * 1024
RING_DIRECTIONS = (1, 2)
WANTED_SOCKET_BUFFER = 4 * 1024 * 1024
MAX_DOMAIN_ID = 232  # Cyclone ports are 7400 + 250 * domain: above this they leave the 16-bit range
# dds.multicast: what may be multicast. off: nothing (unicast peers); discovery: SPDP only;
# data: discovery and data, so one send reaches every reader of a topic (Cyclone's reliable
# multicast, NACKs repaired by unicast). The XML value of AllowMulticast for each.
MULTICAST = {"off": "false", "discovery": "spdp", "data": "true"}
# dds.lossy_link: repair timing for links that drop packets (loss profiles, commlab.links.profiles). Cyclone's
# defaults wait 100 ms before answering a heartbeat with a NACK, send heartbeats every 100 ms, and
# NACK a repair that was lost again only after 3 s: on a 10 Mbit/s link with 5 % loss a writer's
# 32 KiB window is 26 ms of data, so each lost datagram stalled it for several windows, and a lost
# repair for 3 s. These values answer within a few ms and re-ask after 200 ms (docs/transport.md).
# Rediscovery after a lease expired (a node paused, starved or cut off for longer than its lease).
# Cyclone moves the address of a peer whose lease expired to its "aging" list and, unless
# SPDPInterval is set, sends its participant announcement (SPDP) there only every 30 s; a peer that
# has already dropped this node (the other side of the same lease) waits for exactly that ping. So a
# paused node that resumed found its peers again after anything up to 30 s, the clients' grace of
# an FL controller. Set explicitly, the interval applies to those pings too: Cyclone's own default
# for live peers (4/5 of the lease below 10 s, the lease minus 2 s above, at most 30 s) for both.
# Aging addresses are dropped DiscoveredLocatorPruneDelay after the expiry (Cyclone: 60 s); 10
# minutes lets two nodes cut off from each other for longer still find each other again.
SPDP_MAX_INTERVAL_S = 30.0
LOST_PEER_PING_S = 600.0
LOSSY_REPAIR_XML = ("<NackDelay>5ms</NackDelay><AutoReschedNackDelay>200ms</AutoReschedNackDelay>"
                    '<HeartbeatInterval min="5ms" minsched="10ms" max="500ms">20ms</HeartbeatInterval>')


def _sysctl(name: str) -> int | None:
    try:
        return int(Path("/proc/sys/net/core", name).read_text().split()[0])
    except (OSError, ValueError):
        return None


def _link_bytes(rate_bps: float, seconds: float, smallest: int, largest: int) -> int:
    """The smallest power of two from `smallest` up that a link of `rate_bps` bit/s takes
    `seconds` to carry, at most `largest`."""
    if not rate_bps > 0:
        raise ValueError(f"a link rate must be positive, got {rate_bps!r} bit/s")
    size = smallest
    while size < rate_bps / 8 * seconds and size < largest:
        size *= 2
    return size


def link_chunk_bytes(rate_bps: float) -> int:
    """dds.chunk_bytes for a shaped link of `rate_bps` bit/s: the smallest power of two from
    MTU_CHUNK up that the link takes LINK_CHUNK_S to carry, at most FAST_LINK_CHUNK."""
    return _link_bytes(rate_bps, LINK_CHUNK_S, MTU_CHUNK, FAST_LINK_CHUNK)


def link_datagram_frames(rate_bps: float, mtu: int = MTU) -> int:
    """dds.datagram_frames for a writer on a shaped uplink of `rate_bps` bit/s and `mtu`: the frames
    it carries in LINK_DATAGRAM_S, from DATAGRAM_FRAMES up to MAX_DATAGRAM_FRAMES."""
    if not rate_bps > 0:
        raise ValueError(f"a link rate must be positive, got {rate_bps!r} bit/s")
    return max(DATAGRAM_FRAMES, min(MAX_DATAGRAM_FRAMES, int(rate_bps / 8 * LINK_DATAGRAM_S // mtu)))


def link_send_window_bytes(rate_bps: float) -> int:
    """dds.send_window_bytes for a writer on a shaped uplink of `rate_bps` bit/s: the smallest power
    of two from SEND_WINDOW up that the link takes LINK_WINDOW_S to carry, at most MAX_SEND_WINDOW."""
    return _link_bytes(rate_bps, LINK_WINDOW_S, SEND_WINDOW, MAX_SEND_WINDOW)


def link_ring_block_bytes(rate_bps: float) -> int:
    """dds.ring_block_bytes for a shaped link of `rate_bps` bit/s: the smallest power of two from
    its chunk (link_chunk_bytes) up that the link takes LINK_RING_BLOCK_S to carry, at most
    FAST_LINK_RING_BLOCK."""
    return _link_bytes(rate_bps, LINK_RING_BLOCK_S, link_chunk_bytes(rate_bps), FAST_LINK_RING_BLOCK)


def socket_buffer_bytes(which: str = "rmem_max") -> int:
    """The wanted buffer, capped at net.core.<which> (a larger minimum makes participant creation fail)."""
    limit = _sysctl(which)
    return WANTED_SOCKET_BUFFER if limit is None else min(WANTED_SOCKET_BUFFER, limit)


def reassembly_caps(largest_message_bytes: int, senders: int) -> dict[str, int]:
    """DdsSettings fields capping incomplete messages for a node that receives messages of at most
    `largest_message_bytes` from `senders` peers: two such messages per sender (the one arriving and
    the next, or a restarted sender's), plus 1 MiB for small ones, and that for every sender.

        settings = dataclasses.replace(settings, **reassembly_caps(model_bytes, num_clients))
    """
    sender = 2 * largest_message_bytes + (1 << 20)
    return {"reassembly_sender_bytes": sender, "reassembly_total_bytes": sender * max(1, senders)}


@dataclass(frozen=True)
class DdsSettings:
    domain_id: int
    interface: str = "lo"
    peers: tuple[str, ...] = ("127.0.0.1",)
    chunk_bytes: int | None = None  # None: LOOPBACK_CHUNK if loopback_tuned else MTU_CHUNK
    write_timeout_s: float = 30.0
    lease_s: float = 2.0
    loopback_tuned: bool = True
    reassembly_timeout_s: float = 60.0  # an incomplete message is dropped after this long without a chunk
    # Caps on the buffers of incomplete messages per sender and in total (reassembly.py; None:
    # its generous defaults); reassembly_caps() derives both from the largest message expected.
    reassembly_sender_bytes: int | None = None
    reassembly_total_bytes: int | None = None
    max_participants: int = 64
    multicast: str | None = None  # None: "off" with unicast peers, "discovery" without
    link_mtu: int = MTU  # shaped links: datagrams are whole multiples of its frames
    datagram_frames: int = DATAGRAM_FRAMES  # shaped links: IP frames per DDS datagram
    send_window_bytes: int = SEND_WINDOW  # shaped links: a writer's unacknowledged bytes at most
    lossy_link: bool = False  # the link drops packets: fast repair timing (LOSSY_REPAIR_XML)
    keyring: Keyring | None = field(default=None, compare=False, repr=False)  # set: messages are authenticated
    # With a keyring: payloads encrypted too (AEGIS-128X4), not only authenticated. The cipher writes
    # each chunk straight into the sample Cyclone sends and reads it straight into the message, in the
    # passes plain messages make anyway; payloads in clear take a MAC pass of their own on each side.
    encrypt: bool = True
    # Unshaped loopback: ring blocks to a rank whose process shares this one's /dev/shm go through
    # shared memory (shm.py), their place on the DDS topic; never on a shaped link.
    shared_memory: bool = True
    ring_directions: int | None = None  # None: 1 on loopback, 2 on shaped links
    ring_block_bytes: int | None = None  # None: LOOPBACK_RING_BLOCK on loopback, chunk_bytes on shaped links
    # (a networked run's nodes get link_ring_block_bytes of the slowest link: testbed.compose_file)
    # Cyclone's domain tag: discovery ignores every participant whose tag differs, so no process
    # without the run's key file matches this node's endpoints. None: the keyring's (keyless: none).
    discovery_tag: str | None = field(default=None, compare=False, repr=False)
    extra_xml: str = field(default="", compare=False)  # appended inside <Domain>, e.g. loss injection in tests

    def __post_init__(self) -> None:
        if not 0 <= self.domain_id <= MAX_DOMAIN_ID:
            raise ValueError(f"dds.domain_id must be in 0..{MAX_DOMAIN_ID}, got {self.domain_id}")
        if self.chunk_bytes is None:
            object.__setattr__(self, "chunk_bytes", LOOPBACK_CHUNK if self.loopback_tuned else MTU_CHUNK)
        if self.chunk_bytes <= 0:
            raise ValueError(f"dds.chunk_bytes must be positive, got {self.chunk_bytes}")
        if self.write_timeout_s <= 0 or self.lease_s <= 0:
            raise ValueError("dds.write_timeout_s and dds.lease_s must be positive")
        if self.reassembly_timeout_s <= 0 or any(c is not None and c <= 0 for c in
                                                 (self.reassembly_sender_bytes, self.reassembly_total_bytes)):
            raise ValueError("dds.reassembly_timeout_s and the reassembly caps must be positive")
        object.__setattr__(self, "peers", tuple(self.peers))
        if self.multicast is None:
            object.__setattr__(self, "multicast", "off" if self.peers else "discovery")
        if self.multicast not in MULTICAST:
            raise ValueError(f"dds.multicast must be one of {', '.join(MULTICAST)}, got {self.multicast!r}")
        if self.multicast == "off" and not self.peers:
            raise ValueError("dds.multicast off needs unicast peers: with none, nothing could be discovered")
        if not 1280 <= self.link_mtu <= 9000:
            raise ValueError(f"dds.link_mtu must be in 1280..9000, got {self.link_mtu}")
        if not 1 <= self.datagram_frames <= MAX_DATAGRAM_FRAMES:
            raise ValueError(f"dds.datagram_frames must be in 1..{MAX_DATAGRAM_FRAMES}, got {self.datagram_frames}")
        for name in ("encrypt", "shared_memory"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"dds.{name} must be true or false, got {getattr(self, name)!r}")
        if self.ring_directions is None:
            object.__setattr__(self, "ring_directions", 1 if self.loopback_tuned else 2)
        if self.ring_directions not in RING_DIRECTIONS:
            raise ValueError(f"dds.ring_directions must be 1 or 2, got {self.ring_directions!r}")
        if self.ring_block_bytes is None:
            object.__setattr__(self, "ring_block_bytes", LOOPBACK_RING_BLOCK if self.loopback_tuned else self.chunk_bytes)
        if self.ring_block_bytes < 4:
            raise ValueError(f"dds.ring_block_bytes must be at least 4 (one float), got {self.ring_block_bytes}")
        if not 4096 <= self.send_window_bytes <= MAX_SEND_WINDOW:
            raise ValueError(f"dds.send_window_bytes must be in 4096..{MAX_SEND_WINDOW}, got {self.send_window_bytes}")
        if self.keyring is not None:
            if self.discovery_tag not in (None, self.keyring.discovery_tag):
                raise ValueError("dds: a discovery tag other than the keyring's would hide this node from its run")
            object.__setattr__(self, "discovery_tag", self.keyring.discovery_tag)
        if self.discovery_tag is not None and not DISCOVERY_TAG.fullmatch(self.discovery_tag):
            raise ValueError("dds: a discovery tag must be 64 lowercase hex digits")  # the tag itself is never shown

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> "DdsSettings":
        """Build from a node config's `dds` section; unknown keys are an error, not ignored."""
        known = {f for f in cls.__dataclass_fields__ if f not in ("extra_xml", "keyring", "discovery_tag")}
        unknown = set(section) - known
        if unknown:
            raise ValueError(f"unknown key(s) in dds config: {sorted(unknown)}; known: {sorted(known)}")
        if "domain_id" not in section:
            raise ValueError("dds config needs 'domain_id'")
        return cls(**dict(section))

    def reassembly_limits(self) -> dict[str, Any]:
        """Keyword arguments of reassembly.Reassembler for these settings."""
        caps = {"sender_bytes": self.reassembly_sender_bytes, "total_bytes": self.reassembly_total_bytes}
        return {"timeout_s": self.reassembly_timeout_s, **{k: v for k, v in caps.items() if v is not None}}

    @property
    def spdp_interval_s(self) -> float:
        """Seconds between participant announcements, to live peers and to lost ones alike."""
        interval = 0.8 * self.lease_s if self.lease_s < 10 else self.lease_s - 2
        return min(interval, SPDP_MAX_INTERVAL_S)

    @property
    def ring_chunk_bytes(self) -> int:
        """The chunk of a ring block's message: the whole block on loopback; chunk_bytes on a shaped
        link, where larger chunks cause drop storms."""
        return max(self.ring_block_bytes, self.chunk_bytes) if self.loopback_tuned else self.chunk_bytes

    @property
    def fragment_bytes(self) -> int:
        return LOOPBACK_FRAGMENT if self.loopback_tuned else self.message_bytes - FRAGMENT_HEADERS

    @property
    def message_bytes(self) -> int:
        if self.loopback_tuned:
            return LOOPBACK_MESSAGE
        return min(self.datagram_frames * (self.link_mtu - IP_HEADER), 65535 - IP_HEADER) - UDP_SPARE

    @property
    def ip_mtu(self) -> int | None:
        """The MTU that splits datagrams into frames (wire_bytes counts one IP header per frame);
        None on loopback, where a datagram is one frame."""
        return None if self.loopback_tuned else self.link_mtu

    def to_xml(self) -> str:
        """The Cyclone configuration for one participant of this domain."""
        # Peers: unicast discovery to the listed addresses (also with multicast, for networks that
        # drop it). TTL 1 keeps any multicast on the pinned link.
        peers_xml = "<Peers>" + "".join(f'<Peer address="{escape(p)}"/>' for p in self.peers) + "</Peers>" \
            if self.peers else ""
        multicast = MULTICAST[self.multicast]
        tag = f"<Tag>{self.discovery_tag}</Tag>" if self.discovery_tag else ""
        rcv, snd = socket_buffer_bytes("rmem_max"), socket_buffer_bytes("wmem_max")
        # Loopback: let a writer run up to 3/4 of the receive buffer ahead of acknowledgements
        # (default 500 kB, adaptive from 30 kB), which measured faster with no socket drops.
        # Shaped links: a fixed send window (see the module docstring).
        high = rcv * 3 // 4 if self.loopback_tuned else self.send_window_bytes
        low = rcv // 4 if self.loopback_tuned else self.send_window_bytes // 4
        adaptive = "" if self.loopback_tuned else "<WhcAdaptive>false</WhcAdaptive>"
        watermarks = (f"<Watermarks><WhcLow>{low}B</WhcLow><WhcHigh>{high}B</WhcHigh>"
                      f"<WhcHighInit>{high}B</WhcHighInit>{adaptive}</Watermarks>")
        return (
            '<CycloneDDS><Domain id="any">'
            f'<General><Interfaces><NetworkInterface name="{escape(self.interface)}"/></Interfaces>'
            f"<AllowMulticast>{multicast}</AllowMulticast><MulticastTimeToLive>1</MulticastTimeToLive>"
            f"<MaxMessageSize>{self.message_bytes}B</MaxMessageSize>"
            f"<FragmentSize>{self.fragment_bytes}B</FragmentSize></General>"
            f"<Discovery>{peers_xml}<ParticipantIndex>auto</ParticipantIndex>"
            f"<MaxAutoParticipantIndex>{self.max_participants}</MaxAutoParticipantIndex>"
            f"<LeaseDuration>{self.lease_s}s</LeaseDuration><SPDPInterval>{self.spdp_interval_s:.3f}s</SPDPInterval>"
            f"<DiscoveredLocatorPruneDelay>{LOST_PEER_PING_S:g}s</DiscoveredLocatorPruneDelay>{tag}</Discovery>"
            f'<Internal><SocketReceiveBufferSize min="{rcv}B"/>'
            f'<SocketSendBufferSize min="{snd}B"/>{watermarks}'
            f'{LOSSY_REPAIR_XML if self.lossy_link else ""}</Internal>'
            f"{self.extra_xml}</Domain></CycloneDDS>"
        )
