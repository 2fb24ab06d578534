"""The two QoS profiles of commlab: lossless data, and durable per-node announcements."""
from __future__ import annotations

from cyclonedds.core import Policy, Qos
from cyclonedds.util import duration


def lossless(write_timeout_s: float) -> Qos:
    """Reliable + KeepAll + unlimited resources: a write blocks (up to the timeout) rather than drop.

    Volatile: a reader sees only what is written after it matched, which is why publishers wait
    for the expected readers first (KeepLast silently dropped samples for slow readers).
    IgnoreLocal: a collective's rank keeps its own contribution in memory instead of receiving it.
    """
    return Qos(
        Policy.IgnoreLocal.Participant,
        Policy.Reliability.Reliable(max_blocking_time=duration(seconds=write_timeout_s)),
        Policy.History.KeepAll,
        Policy.ResourceLimits(max_samples=-1, max_instances=-1, max_samples_per_instance=-1),
        Policy.Durability.Volatile,
    )


ANNOUNCE_BACKLOG = 1024  # announcements a reader holds before its thread takes them


def announcement(write_timeout_s: float, reader: bool = False) -> Qos:
    """One durable sample per node: late joiners and re-started peers see every live node's last
    announcement. A reader keeps every sample until its thread takes them, up to ANNOUNCE_BACKLOG:
    several writers share the keyless topic (a rogue beside the real nodes), so a flood must
    neither displace a real announcement (KeepLast would) nor grow the memory without bound; past
    the backlog a sample is refused and its reliable writer sends it again later.
    IgnoreLocal: a node's own announcements are of no use to it, and delivering them to its own
    reader made its write block (up to the timeout) while a flood kept that reader full."""
    backlog = ANNOUNCE_BACKLOG if reader else -1
    return Qos(
        Policy.IgnoreLocal.Participant,
        Policy.Reliability.Reliable(max_blocking_time=duration(seconds=write_timeout_s)),
        Policy.History.KeepAll if reader else Policy.History.KeepLast(1),
        Policy.ResourceLimits(max_samples=backlog, max_instances=-1, max_samples_per_instance=backlog),
        Policy.Durability.TransientLocal,
        Policy.DurabilityService(cleanup_delay=0, history=Policy.History.KeepLast(1),
                                 max_samples=-1, max_instances=-1, max_samples_per_instance=-1),
    )
