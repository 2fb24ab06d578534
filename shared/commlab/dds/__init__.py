"""Cyclone DDS transport: per-node config, chunked reliable topics, barrier, collectives, stats."""
from .collectives import Group, Handle
from .errors import BarrierTimeout, DdsError, DdsWriteTimeout, MessageError, PeerGone, PeerLost
from .node import DdsNode, exit_cleanly_on_sigterm
from .settings import DdsSettings
from .stats import CommStats, delta, wire_bytes

__all__ = ["BarrierTimeout", "CommStats", "DdsError", "DdsNode", "DdsSettings", "DdsWriteTimeout", "Group",
           "Handle", "MessageError", "PeerGone", "PeerLost", "delta", "exit_cleanly_on_sigterm", "wire_bytes"]
