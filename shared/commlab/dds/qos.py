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


def announcement(write_timeout_s: float, depth: int = 1) -> Qos:
    """One durable sample per node name: late joiners and re-started peers see every live node.
    Readers keep `depth` samples per name (ANNOUNCE_READER_DEPTH): several writers may announce
    one name (a rogue beside the real node), and a rejected sample must not displace the real
    one before the reader thread has taken it."""
    return Qos(
        Policy.Reliability.Reliable(max_blocking_time=duration(seconds=write_timeout_s)),
        Policy.History.KeepLast(depth),
        Policy.Durability.TransientLocal,
        Policy.DurabilityService(cleanup_delay=0, history=Policy.History.KeepLast(1),
                                 max_samples=-1, max_instances=-1, max_samples_per_instance=-1),
    )
