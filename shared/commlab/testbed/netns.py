"""Network namespaces on a private Linux bridge: the local backend's stand-in for containers.

Each node gets a namespace with an `eth0` (one end of a veth pair; the other end joins the
bridge) and an address in 198.19.<net>.0/24. The bridge has no address on the host, so nothing
is routed anywhere: nodes reach only each other. Needs root. Everything is removed on exit. The
names carry a tag claimed for the lab (commlab.claims), so labs of runs and tests running at the
same time never meet.

    with NetnsLab(["controller", "client-0", "client-1"]) as lab:
        lab.shape("client-0", link_for("10mbit", "client-0"))
        proc = lab.popen("client-0", ["python", "nodes/client.py", cfg])
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Sequence

from ..claims import claim
from ..netem import LinkSpec, apply_link

DEFAULT_NET = 250  # 198.19.250.0/24; every lab has its own bridge, so labs never see each other


class NetnsError(RuntimeError):
    """Creating or using a namespace failed; the message names the ip command."""


def _ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {out.stderr.strip()}")


class NetnsLab:
    def __init__(self, nodes: Sequence[str], net: int = DEFAULT_NET):
        if os.geteuid() != 0:
            raise NetnsError("network namespaces need root")
        if not 0 < net < 255:
            raise NetnsError(f"net {net}: must be 1..254 (198.19.<net>.0/24)")
        self._claim = claim("lab")
        self.tag = self._claim.number
        self.bridge = f"clbr{self.tag}"[:15]
        self.nodes = list(nodes)
        self.namespaces = {n: f"cl{self.tag}-{i}" for i, n in enumerate(self.nodes)}
        self.addresses = {n: f"198.19.{net}.{10 + i}" for i, n in enumerate(self.nodes)}
        self._created: list[tuple[str, str]] = []
        self._iptables_rule: list[str] | None = None

    def __enter__(self) -> "NetnsLab":
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _create(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self._created.append(("link", self.bridge))
        _ip("link", "set", self.bridge, "up")
        self._allow_bridged_frames()
        for i, node in enumerate(self.nodes):
            ns, host_end = self.namespaces[node], f"clv{self.tag}x{i}"[:15]
            _ip("netns", "add", ns)
            self._created.append(("netns", ns))
            _ip("link", "add", host_end, "type", "veth", "peer", "name", f"tmp{self.tag}x{i}"[:15])
            self._created.append(("link", host_end))
            _ip("link", "set", f"tmp{self.tag}x{i}"[:15], "netns", ns)
            self.exec_ip(node, "link", "set", f"tmp{self.tag}x{i}"[:15], "name", "eth0")
            self.exec_ip(node, "addr", "add", f"{self.addresses[node]}/24", "dev", "eth0")
            self.exec_ip(node, "link", "set", "eth0", "up")
            self.exec_ip(node, "link", "set", "lo", "up")
            _ip("link", "set", host_end, "master", self.bridge, "up")

    def _allow_bridged_frames(self) -> None:
        # With br_netfilter loaded (a Docker engine does that) bridged frames traverse FORWARD,
        # whose policy Docker sets to DROP: let this bridge's own frames through. A machine
        # without iptables (a fresh one, before any Docker engine) has no such rule to pass.
        if shutil.which("iptables") is None:
            return
        rule = ["FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT"]
        if subprocess.run(["iptables", "-I", *rule], capture_output=True).returncode == 0:
            self._iptables_rule = rule

    def exec_ip(self, node: str, *args: str) -> None:
        _ip("netns", "exec", self.namespaces[node], "ip", *args)

    def prefix(self, node: str) -> list[str]:
        """Command prefix that runs a program inside the node's namespace."""
        return ["ip", "netns", "exec", self.namespaces[node]]

    def popen(self, node: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        return subprocess.Popen([*self.prefix(node), *argv], **kwargs)

    def shape(self, node: str, spec: LinkSpec) -> dict[str, Any]:
        """Shape the node's uplink; returns the applied-link record (see commlab.netem)."""
        return {"node": node, **apply_link(spec, "eth0", prefix=self.prefix(node))}

    def close(self) -> None:
        for kind, name in reversed(self._created):
            args = ["netns", "del", name] if kind == "netns" else ["link", "del", name]
            subprocess.run(["ip", *args], capture_output=True)  # veths vanish with their namespace
        self._created.clear()
        if self._iptables_rule:
            subprocess.run(["iptables", "-D", *self._iptables_rule], capture_output=True)
            self._iptables_rule = None
        self._claim.release()
