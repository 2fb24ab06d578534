"""Network namespaces joined by veth links (198.18.0.0/15 only): the local stand-in for a network
of containers, and a shaped link for tests and benchmarks of the transport. Needs root. Everything
made is removed on exit. Names carry a lab tag claimed for the lab (commlab.runs.claims), so labs
made at the same time never meet.

`NetnsLab`: a namespace per node, each with an `eth0` (one end of a veth pair; the other end joins
a bridge in the lab's own switch namespace) and an address in 198.19.<net>.0/24. Nothing of the lab
is on the host, so nothing is routed anywhere: nodes reach only each other.

    with NetnsLab(["controller", "client-0", "client-1"]) as lab:
        lab.shape("client-0", link_for("10mbit", "client-0"))
        proc = lab.popen("client-0", ["python", "nodes/client.py", cfg])

`veth_pair`: two namespaces joined directly by one veth pair, optionally shaped with tbf.
"""
from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from ..runs.claims import claim
from .profiles import apply_link, ingress_drop_rule
from .spec import LinkSpec

DEFAULT_NET = 250  # 198.19.250.0/24; every lab has its own bridge, so labs never see each other
BRIDGE = "br0"  # in the lab's switch namespace, where no other bridge is
# With br_netfilter loaded (a Docker engine loads it) every bridged IPv4 frame goes through
# iptables: conntrack reassembles each fragmented datagram at the bridge and fragments it again.
# A switch does nothing of the kind, and the cost fell on UDP (DDS) frame by frame but on TCP
# (gloo, Flower) only per GSO segment of up to 64 KiB. These switches of the bridge's namespace
# turn that off there (each namespace has its own; the host's stay as they are).
BRIDGE_NETFILTER = ("bridge-nf-call-iptables", "bridge-nf-call-ip6tables", "bridge-nf-call-arptables")


class NetnsError(RuntimeError):
    """Creating or using a namespace failed; the message names the ip command."""


class NetnsUnavailable(NetnsError):
    """Namespaces cannot be created here at all (not root, no `ip`, no permission)."""


def _ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {out.stderr.strip()}")


def _bridge_without_netfilter(netns: str) -> None:
    """Bridged frames in `netns` skip iptables (without br_netfilter they do anyway: nothing to write).
    Python writes the switches, inside the namespace: a fresh machine may lack even sysctl."""
    write = ("import sys\nfor path in sys.argv[1:]:\n    try:\n        open(path, 'w').write('0')\n"
             "    except FileNotFoundError:\n        pass")
    out = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", write,
                          *(f"/proc/sys/net/bridge/{name}" for name in BRIDGE_NETFILTER)], capture_output=True, text=True)
    if out.returncode != 0:
        raise NetnsError(f"turning off bridge netfilter in {netns}: {(out.stderr.strip().splitlines() or ['?'])[-1]}")


def _require_root() -> None:
    if os.geteuid() != 0:
        raise NetnsUnavailable("network namespaces need root")


class NetnsLab:
    def __init__(self, nodes: Sequence[str], net: int = DEFAULT_NET):
        _require_root()
        if not 0 < net < 255:
            raise NetnsError(f"net {net}: must be 1..254 (198.19.<net>.0/24)")
        self._claim = claim("lab")
        self.tag = self._claim.number
        self.switch = f"cl{self.tag}-switch"  # the namespace of the bridge every node's eth0 plugs into
        self.nodes = list(nodes)
        self.namespaces = {n: f"cl{self.tag}-{i}" for i, n in enumerate(self.nodes)}
        self.addresses = {n: f"198.19.{net}.{10 + i}" for i, n in enumerate(self.nodes)}
        self._created: list[str] = []  # namespaces; their veths and the bridge go with them

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
        _ip("netns", "add", self.switch)
        self._created.append(self.switch)
        _ip("-n", self.switch, "link", "add", BRIDGE, "type", "bridge")
        _ip("-n", self.switch, "link", "set", BRIDGE, "up")
        _bridge_without_netfilter(self.switch)
        for i, node in enumerate(self.nodes):
            ns, port = self.namespaces[node], f"port{i}"
            _ip("netns", "add", ns)
            self._created.append(ns)
            _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", self.switch)
            self.exec_ip(node, "addr", "add", f"{self.addresses[node]}/24", "dev", "eth0")
            self.exec_ip(node, "link", "set", "eth0", "up")
            self.exec_ip(node, "link", "set", "lo", "up")
            _ip("-n", self.switch, "link", "set", port, "master", BRIDGE, "up")

    def exec_ip(self, node: str, *args: str) -> None:
        _ip("netns", "exec", self.namespaces[node], "ip", *args)

    def prefix(self, node: str) -> list[str]:
        """Command prefix that runs a program inside the node's namespace."""
        return ["ip", "netns", "exec", self.namespaces[node]]

    def popen(self, node: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        return subprocess.Popen([*self.prefix(node), *argv], **kwargs)

    def shape(self, node: str, spec: LinkSpec) -> dict[str, Any]:
        """Shape the node's uplink; returns the applied-link record (see commlab.links.profiles)."""
        return {"node": node, **apply_link(spec, "eth0", prefix=self.prefix(node))}

    def close(self) -> None:
        for name in reversed(self._created):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)  # veths vanish with their namespace
        self._created.clear()
        self._claim.release()


@dataclass(frozen=True)
class Side:
    netns: str
    interface: str
    address: str

    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns]


def tx_bytes(side: Side) -> int:
    """Bytes sent by the side's interface (IP packets plus 14-byte Ethernet headers)."""
    out = subprocess.run([*side.exec_prefix(), "cat", f"/sys/class/net/{side.interface}/statistics/tx_bytes"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout)


@contextmanager
def veth_pair(subnet: int, rate: str | None = None, loss_pct: float = 0.0) -> Iterator[tuple[Side, Side]]:
    """Namespaces cl<tag>-a/b with 198.18.<subnet>.1/.2; `rate` (e.g. "10mbit") shapes a's egress;
    `loss_pct` of the packets arriving at either side are dropped (iptables INPUT, links.profiles)."""
    _require_root()
    lab = claim("lab")
    a = Side(f"cl{lab.number}-a", f"cl{lab.number}a", f"198.18.{subnet}.1")
    b = Side(f"cl{lab.number}-b", f"cl{lab.number}b", f"198.18.{subnet}.2")
    try:
        try:
            _ip("netns", "add", a.netns)
        except (OSError, NetnsError) as e:
            raise NetnsUnavailable(f"cannot create a network namespace: {e}") from e
        _ip("netns", "add", b.netns)
        _ip("link", "add", a.interface, "netns", a.netns, "type", "veth", "peer", "name", b.interface, "netns", b.netns)
        for s in (a, b):
            _ip("-n", s.netns, "addr", "add", f"{s.address}/24", "dev", s.interface)
            _ip("-n", s.netns, "link", "set", s.interface, "up")
            _ip("-n", s.netns, "link", "set", "lo", "up")
        if rate:
            subprocess.run([*a.exec_prefix(), "tc", "qdisc", "add", "dev", a.interface, "root", "tbf",
                            "rate", rate, "burst", "32kbit", "latency", "400ms"], check=True, capture_output=True)
        for s in (a, b) if loss_pct else ():
            subprocess.run([*s.exec_prefix(), "iptables", "-w", "-A", *ingress_drop_rule(loss_pct)], check=True,
                           capture_output=True)
        yield a, b
    finally:
        for s in (a, b):
            subprocess.run(["ip", "netns", "del", s.netns], capture_output=True)
        lab.release()
