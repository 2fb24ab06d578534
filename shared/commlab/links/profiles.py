"""Link profiles by name (netem/profiles.json) and their application to an interface with tc.

A profile gives each node the shape of its own uplink (egress of its interface): a rate, always
enforced with tbf, and delay/jitter/loss, enforced with netem when the kernel has it. This
kernel has no netem qdisc, so what was really applied is recorded next to what was asked for.

    python -m commlab.links.profiles show
    python -m commlab.links.profiles apply PROFILE NODE [--dev eth0] [--record FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

PROFILES_ENV = "COMMLAB_NETEM_PROFILES"  # set in the images, where the repo is not beside the code
_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
# The smallest tbf queue (bytes): a node's two DDS writers' 32 KiB send windows
# (commlab.dds.settings.SEND_WINDOW), their datagrams and acknowledgements, with room to spare.
QUEUE_FLOOR = 128 * 1024
_NO_NETEM = ("Specified qdisc kind is unknown", "Specified qdisc not found", "Unknown qdisc")


class LinkError(ValueError):
    """Unknown profile, malformed profile entry, or tc refused a shaping command."""


@dataclass(frozen=True)
class LinkSpec:
    rate: str                    # tc rate, e.g. "10mbit"
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0

    @property
    def rate_bps(self) -> float:
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit)", self.rate.strip().lower())
        if not m:
            raise LinkError(f"rate {self.rate!r}: expected a number with bit, kbit, mbit or gbit")
        return float(m.group(1)) * _UNITS[m.group(2)]

    @property
    def needs_netem(self) -> bool:
        return self.delay_ms > 0 or self.jitter_ms > 0 or self.loss_pct > 0


def profiles_path() -> Path:
    env = os.environ.get(PROFILES_ENV)
    return Path(env) if env else Path(__file__).resolve().parents[3] / "netem" / "profiles.json"


def load_profiles(path: Path | None = None) -> dict[str, Any]:
    path = path or profiles_path()
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise LinkError(f"link profile file {path} not found (set {PROFILES_ENV})") from None


def profile_names() -> list[str]:
    return sorted(load_profiles())


def _spec(entry: dict[str, Any], where: str) -> LinkSpec:
    unknown = set(entry) - {"rate", "delay_ms", "jitter_ms", "loss_pct"}
    if unknown or "rate" not in entry:
        raise LinkError(f"{where}: needs 'rate', may have delay_ms/jitter_ms/loss_pct; got {sorted(entry)}")
    spec = LinkSpec(**entry)
    spec.rate_bps  # validates the rate now, not at apply time
    return spec


def link_for(profile: str, node: str) -> LinkSpec:
    """The uplink of `node` ("controller", "client-2", "worker-0", ...) under `profile`.

    Role lists are indexed by the number at the end of the node name, cycling, so a profile
    serves any number of clients."""
    profiles = load_profiles()
    if profile not in profiles:
        raise LinkError(f"unknown link profile {profile!r}; known: {', '.join(sorted(profiles))}")
    prof = profiles[profile]
    m = re.fullmatch(r"(.*?)[-_]?(\d+)", node)
    role, index = (m.group(1), int(m.group(2))) if m else (node, 0)
    entries = prof.get("roles", {}).get(role)
    if entries:
        return _spec(entries[index % len(entries)], f"profile {profile} role {role}[{index % len(entries)}]")
    return _spec(prof["default"], f"profile {profile} default")


def tbf_args(spec: LinkSpec) -> list[str]:
    # burst: 10 ms worth of rate but at least 16 KiB, so one 1500-byte packet train fits at
    # low rates and the token bucket does not cap throughput at high rates (HZ granularity).
    burst = max(int(spec.rate_bps / 8 * 0.01), 16384)
    # The queue: 400 ms of rate before drops (DDS retransmits drops slowly), but never less than
    # QUEUE_FLOOR, so that a node's writers' send windows fit at any rate: a 400 ms queue of a
    # 0.62 Mbit/s uplink (31 KB) dropped from one 32 KiB window, and its goodput fell to 76 %.
    limit = max(int(spec.rate_bps / 8 * 0.4), QUEUE_FLOOR)
    return ["tbf", "rate", spec.rate, "burst", str(burst), "limit", str(limit)]


def netem_args(spec: LinkSpec) -> list[str]:
    args = ["netem"]
    if spec.delay_ms or spec.jitter_ms:
        args += ["delay", f"{spec.delay_ms}ms"] + ([f"{spec.jitter_ms}ms"] if spec.jitter_ms else [])
    if spec.loss_pct:
        args += ["loss", f"{spec.loss_pct}%"]
    return args


def apply_link(spec: LinkSpec, dev: str = "eth0", prefix: Sequence[str] = ()) -> dict[str, Any]:
    """Shape egress of `dev` (run each tc through `prefix`, e.g. ip netns exec NS).

    Returns a record of what was requested, what got applied and what not (and why)."""
    def tc(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*prefix, "tc", *args], capture_output=True, text=True)

    record: dict[str, Any] = {"dev": dev, "requested": asdict(spec), "applied": {}, "not_applied": {},
                              "commands": []}
    tc("qdisc", "del", "dev", dev, "root")  # start clean; fails harmlessly when nothing is set
    rate_parent = ["root"]
    if spec.needs_netem:
        cmd = ["qdisc", "replace", "dev", dev, "root", "handle", "1:", *netem_args(spec)]
        out = tc(*cmd)
        if out.returncode == 0:
            record["commands"].append("tc " + " ".join(cmd))
            record["applied"].update(delay_ms=spec.delay_ms, jitter_ms=spec.jitter_ms, loss_pct=spec.loss_pct)
            rate_parent = ["parent", "1:1", "handle", "10:"]
        else:
            why = ("the kernel has no netem qdisc" if any(s in out.stderr for s in _NO_NETEM)
                   else f"tc failed: {out.stderr.strip()}")
            record["not_applied"] = {k: v for k, v in asdict(spec).items() if k != "rate" and v} | {"reason": why}
    cmd = ["qdisc", "replace", "dev", dev, *rate_parent, *tbf_args(spec)]
    out = tc(*cmd)
    if out.returncode != 0:
        raise LinkError(f"tc {' '.join(cmd)} failed: {out.stderr.strip()} (does the process have NET_ADMIN?)")
    record["commands"].append("tc " + " ".join(cmd))
    record["applied"]["rate"] = spec.rate
    record["tc_show"] = tc("qdisc", "show", "dev", dev).stdout.strip()
    return record


def set_rate(rate_bps: float, dev: str = "eth0", prefix: Sequence[str] = ()) -> str:
    """Change only the rate of the tbf `apply_link` put on `dev` (tc replace: the same qdisc, its
    handle kept, no delete; under a netem root it is the child 10:). Returns the tc command;
    LinkError if refused (commlab.fl.adaptive: a client's allocated uplink rate)."""
    spec = LinkSpec(rate=f"{max(int(rate_bps), 8000)}bit")
    shown = subprocess.run([*prefix, "tc", "qdisc", "show", "dev", dev], capture_output=True, text=True).stdout
    parent = ["parent", "1:1", "handle", "10:"] if "netem" in shown else ["root"]
    cmd = ["qdisc", "replace", "dev", dev, *parent, *tbf_args(spec)]
    out = subprocess.run([*prefix, "tc", *cmd], capture_output=True, text=True)
    if out.returncode != 0:
        raise LinkError(f"tc {' '.join(cmd)} failed: {out.stderr.strip()} (does the process have NET_ADMIN?)")
    return "tc " + " ".join(cmd)


def describe(record: dict[str, Any]) -> str:
    """One line for logs: what got applied and what did not."""
    text = f"link on {record['dev']}: applied {record['applied']}"
    if record["not_applied"]:
        missing = {k: v for k, v in record["not_applied"].items() if k != "reason"}
        text += f"; NOT applied {missing} ({record['not_applied']['reason']})"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("show", help="list the profiles")
    ap = sub.add_parser("apply", help="shape an interface for one node of a profile")
    ap.add_argument("profile")
    ap.add_argument("node")
    ap.add_argument("--dev", default="eth0")
    ap.add_argument("--record", type=Path, help="write what was applied as JSON here")
    args = parser.parse_args(argv)
    if args.cmd == "show":
        for name, prof in sorted(load_profiles().items()):
            print(f"{name:8s} {prof.get('description', '')}")
        return 0
    record = {"profile": args.profile, "node": args.node, **apply_link(link_for(args.profile, args.node), args.dev)}
    print(describe(record), file=sys.stderr)
    if args.record:
        args.record.write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
