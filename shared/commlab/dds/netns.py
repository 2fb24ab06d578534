"""Two network namespaces joined by a veth pair (198.18.0.0/15 only), optionally shaped with tbf,
for tests and benchmarks of DDS across a real link. Always removed on exit. Their names carry a
lab tag claimed for the pair (commlab.claims), so pairs made at the same time never meet."""
from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from ..claims import claim
from ..netem import ingress_drop_rule


class NetnsUnavailable(RuntimeError):
    """Namespaces cannot be created here (not root, no `ip`, no permission)."""


@dataclass(frozen=True)
class Side:
    netns: str
    interface: str
    address: str

    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns]


def _ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {out.stderr.strip()}")


def tx_bytes(side: Side) -> int:
    """Bytes sent by the side's interface (IP packets plus 14-byte Ethernet headers)."""
    out = subprocess.run([*side.exec_prefix(), "cat", f"/sys/class/net/{side.interface}/statistics/tx_bytes"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout)


@contextmanager
def veth_pair(subnet: int, rate: str | None = None, loss_pct: float = 0.0) -> Iterator[tuple[Side, Side]]:
    """Namespaces cl<tag>-a/b with 198.18.<subnet>.1/.2; `rate` (e.g. "10mbit") shapes a's egress;
    `loss_pct` of the packets arriving at either side are dropped (iptables INPUT, commlab.netem)."""
    if os.geteuid() != 0:
        raise NetnsUnavailable("network namespaces need root")
    lab = claim("lab")
    a = Side(f"cl{lab.number}-a", f"cl{lab.number}a", f"198.18.{subnet}.1")
    b = Side(f"cl{lab.number}-b", f"cl{lab.number}b", f"198.18.{subnet}.2")
    try:
        try:
            _ip("netns", "add", a.netns)
        except (OSError, RuntimeError) as e:
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
            subprocess.run([*s.exec_prefix(), "iptables", "-A", *ingress_drop_rule(loss_pct)], check=True,
                           capture_output=True)
        yield a, b
    finally:
        for s in (a, b):
            subprocess.run(["ip", "netns", "del", s.netns], capture_output=True)
        lab.release()
