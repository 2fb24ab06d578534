"""Compose projects for one run: node configs rewritten for containers, and the compose spec.

The docker backend changes only what must differ from the local backend: the `dds` section
(interface eth0, peers = the other nodes' fixed addresses, MTU-sized fragments for shaped
links), paths under the results folder (mounted at /results) and `link_profile`. Addresses are
fixed (198.19.<net>.10+i on an internal network) so every node can list its peers before the
others exist. Compose accepts JSON, so specs are written as JSON (no YAML library needed).
"""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from ..dds.settings import MTU, link_chunk_bytes, link_datagram_frames, link_ring_block_bytes, link_send_window_bytes
from ..links.profiles import link_for, trace_path
from ..runs.roster import Node
from .images import node_image

CONTAINER_RESULTS = "/results"
CONTAINER_KEY_FILE = "/run/secrets/commlab-key"
# Node kinds without an image of their own: the reference peers (nodes/peer.py) run in the worker
# image, which has torch and the library, through the same entry point (link shaping first).
IMAGE_OF = {"peer": "worker"}
ENTRYPOINT = ["python", "-m", "commlab.testbed.entrypoint", "--"]
PROGRAM_OF = {"peer": "/opt/commlab/nodes/peer.py"}


def addresses(nodes: list[Node], net: int) -> dict[str, str]:
    return {n.name: f"198.19.{net}.{10 + i}" for i, n in enumerate(nodes)}


def networked_dds(dds: dict[str, Any], node: str, addrs: dict[str, str], link_profile: str) -> dict[str, Any]:
    """The `dds` section for a node on a shaped private network (container or namespace eth0):
    data multicast unless the run chose otherwise, unicast peers for discovery all the same,
    repair timing for loss when any node's link of the profile loses packets, and the run's chunk
    and ring block sizes (profile_chunk_bytes, profile_ring_block_bytes) and the node's send window
    and datagram (node_send_window_bytes, node_datagram_frames) unless it chose them."""
    lossy = any(link_for(link_profile, name).loss_pct > 0 for name in addrs)
    sizes = {"chunk_bytes": profile_chunk_bytes(link_profile, list(addrs)),
             "ring_block_bytes": profile_ring_block_bytes(link_profile, list(addrs)),
             "send_window_bytes": node_send_window_bytes(link_profile, node),
             # a lost frame costs its whole datagram again: lossy links keep the small ones
             "datagram_frames": None if lossy else node_datagram_frames(link_profile, node, dds.get("link_mtu") or MTU)}
    return {**dds, "interface": "eth0", "loopback_tuned": False, "multicast": dds.get("multicast") or "data",
            "peers": [a for name, a in addrs.items() if name != node],
            **{k: v for k, v in sizes.items() if v is not None and dds.get(k) is None},
            **({"lossy_link": True} if lossy else {})}


def node_rate_bps(link_profile: str, node: str) -> float | None:
    """The rate of `node`'s link on `link_profile`; None for a trace, whose rates change during
    the run."""
    if trace_path(link_profile) is not None:
        return None
    return link_for(link_profile, node).rate_bps


def slowest_rate_bps(link_profile: str, nodes: list[str]) -> float | None:
    """The rate of the slowest node's link on `link_profile`; None for a trace."""
    rates = [node_rate_bps(link_profile, name) for name in nodes]
    return None if None in rates else min(rates)


def node_send_window_bytes(link_profile: str, node: str) -> int | None:
    """dds.send_window_bytes of `node` on `link_profile`: its own uplink's
    (commlab.dds.settings.link_send_window_bytes), since a writer's window fills its own link's
    queue; None (the default, the smallest window) for a trace."""
    rate = node_rate_bps(link_profile, node)
    return None if rate is None else link_send_window_bytes(rate)


def node_datagram_frames(link_profile: str, node: str, mtu: int) -> int | None:
    """dds.datagram_frames of `node` on `link_profile`: its own uplink's, whose frames its datagrams
    fill (commlab.dds.settings.link_datagram_frames); None (the default) for a trace."""
    rate = node_rate_bps(link_profile, node)
    return None if rate is None else link_datagram_frames(rate, mtu)


def profile_chunk_bytes(link_profile: str, nodes: list[str]) -> int | None:
    """dds.chunk_bytes for every node of a run on `link_profile`: the slowest node's link's
    (commlab.dds.settings.link_chunk_bytes), one size for all, since a ring allreduce's ranks must
    agree on its blocks; None (the default) for a trace."""
    rate = slowest_rate_bps(link_profile, nodes)
    return None if rate is None else link_chunk_bytes(rate)


def profile_ring_block_bytes(link_profile: str, nodes: list[str]) -> int | None:
    """dds.ring_block_bytes for every node of a run on `link_profile`, as profile_chunk_bytes
    (commlab.dds.settings.link_ring_block_bytes); None (the default, chunk_bytes) for a trace."""
    rate = slowest_rate_bps(link_profile, nodes)
    return None if rate is None else link_ring_block_bytes(rate)


def container_config(cfg: dict[str, Any], node: str, addrs: dict[str, str], link_profile: str,
                     host_results: Path) -> dict[str, Any]:
    """`cfg` as the node inside its container must see it."""
    out = copy.deepcopy(cfg)
    if "dds" in cfg:  # the reference peers (gloo) have their own transport
        out["dds"] = networked_dds(cfg["dds"], node, addrs, link_profile)
    out["link_profile"] = link_profile
    host = str(host_results.resolve())
    for key, value in cfg.items():  # results_dir, checkpoint_dir, ... under the host results folder
        if isinstance(value, str) and (value == host or value.startswith(host + "/")):
            out[key] = CONTAINER_RESULTS + value[len(host):]
        elif isinstance(value, str) and key.endswith(("_dir", "_path")) and value.startswith("/") \
                and key != "results_dir":
            raise ValueError(f"config key {key}={value!r} is outside the results folder {host}, "
                             "which is all a container can see")
    out["results_dir"] = CONTAINER_RESULTS
    if out.get("dds", {}).get("key_file"):  # the host file is mounted there as a compose secret (compose_spec)
        out["dds"]["key_file"] = CONTAINER_KEY_FILE
    if isinstance(out.get("dataset"), dict):
        out["dataset"]["root"] = None  # the image carries its own prepared dataset cache
    return out


def compose_spec(nodes: list[Node], *, run_id: str, host_results: Path, net: int,
                 config_dir: str, key_files: dict[str, str] | None = None) -> dict[str, Any]:
    """One service per node; configs are read from `config_dir` (a path inside the container);
    `key_files` (node: host path) become compose secrets at CONTAINER_KEY_FILE."""
    key_files = key_files or {}
    addrs = addresses(nodes, net)
    owner = {} if os.geteuid() == 0 else {"COMMLAB_UID": str(os.getuid()), "COMMLAB_GID": str(os.getgid())}
    services = {}
    for node in nodes:
        services[node.name] = {
            "image": node_image(IMAGE_OF.get(node.role, node.role)),
            "hostname": node.name,
            "command": [f"{config_dir}/{node.name}.json"],
            "cap_add": ["NET_ADMIN"],  # tc inside the container
            "environment": {"COMMLAB_NODE": node.name,
                            "COMMLAB_BACKEND": "docker", **owner, **dict(node.env)},
            "volumes": [f"{host_results.resolve()}:{CONTAINER_RESULTS}"],
            "networks": {"lab": {"ipv4_address": addrs[node.name]}},
            "stop_grace_period": "15s",
        }
        if node.role in PROGRAM_OF:
            services[node.name]["entrypoint"] = [*ENTRYPOINT, "python", PROGRAM_OF[node.role]]
        if node.name in key_files:
            services[node.name]["secrets"] = [{"source": f"{node.name}-key", "target": Path(CONTAINER_KEY_FILE).name}]
    return {
        "name": project_name(run_id),
        "services": services,
        **({"secrets": {f"{n}-key": {"file": f} for n, f in key_files.items()}} if key_files else {}),
        # internal: no gateway off the machine; the subnet is in the benchmarking range.
        "networks": {"lab": {"driver": "bridge", "internal": True,
                             "ipam": {"config": [{"subnet": f"198.19.{net}.0/24"}]}}},
    }


def project_name(run_id: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in run_id.lower())
    return f"cl-{safe}"[:60].rstrip("-_")
