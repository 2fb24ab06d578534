"""Link profiles by name (netem/profiles.json) and their application to an interface with tc.

A profile gives each node the shape of its own uplink (egress of its interface): a rate, always
enforced with tbf, and delay/jitter/loss, enforced with netem when the kernel has it. Without
netem, loss is applied to the node's ingress instead: iptables drops that share of the packets
its INPUT chain sees (whole datagrams, after reassembly). What was really applied is recorded next
to what was asked for.

Profile names: a name in the file (`10mbit`), a bare rate (`100mbit`, every node the same),
`trace:<file>` (rates over time, commlab.links.trace), each optionally followed by `-loss<p>`:
`p` percent of every node's incoming packets lost (`10mbit-loss5`).

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
import shutil
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Sequence

from .spec import RATE, LinkError, LinkSpec

PROFILES_ENV = "COMMLAB_NETEM_PROFILES"  # set in the images, where the repo is not beside the code
# The smallest tbf queue (bytes): a node's two DDS writers' 32 KiB send windows
# (commlab.dds.settings.SEND_WINDOW), their datagrams and acknowledgements, with room to spare.
QUEUE_FLOOR = 128 * 1024


def queue_floor_for(send_window_bytes: int) -> int:
    """The smallest tbf queue for a node whose DDS writers run `send_window_bytes` ahead: QUEUE_FLOOR,
    or four windows for a fast link's larger window, so that a rate lowered during a run (an
    allocated uplink) does not drop from the windows the node started with."""
    return max(QUEUE_FLOOR, 4 * send_window_bytes)
_NO_NETEM = ("Specified qdisc kind is unknown", "Specified qdisc not found", "Unknown qdisc")
_LOSS_SUFFIX = re.compile(r"(?P<base>.+)-loss(?P<pct>\d+(?:\.\d+)?)")
TRACE_PREFIX = "trace:"
LOSS_EXAMPLES = ("10mbit-loss1", "10mbit-loss5")  # listed by `show`; any BASE-loss<p> works
INGRESS_DROP_COMMENT = "commlab-loss"  # marks the one INPUT rule apply_link owns


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


def check_profile(profile: str) -> str:
    """`profile` itself when it resolves; LinkError naming the problem."""
    link_for(profile, "controller")
    return profile


def profile_arg(profile: str) -> str:
    """argparse type of --profile: the launcher exits with the one line naming the problem."""
    try:
        return check_profile(profile)
    except LinkError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _spec(entry: dict[str, Any], where: str) -> LinkSpec:
    unknown = set(entry) - {"rate", "delay_ms", "jitter_ms", "loss_pct"}
    if unknown or "rate" not in entry:
        raise LinkError(f"{where}: needs 'rate', may have delay_ms/jitter_ms/loss_pct; got {sorted(entry)}")
    spec = LinkSpec(**entry)
    spec.rate_bps  # validates the rate now, not at apply time
    return spec


def split_loss(profile: str) -> tuple[str, float | None]:
    """"10mbit-loss5" -> ("10mbit", 5.0); a name without the suffix -> (name, None)."""
    m = _LOSS_SUFFIX.fullmatch(profile)
    if not m:
        return profile, None
    pct = float(m.group("pct"))
    if not 0 < pct < 100:
        raise LinkError(f"link profile {profile!r}: loss must be above 0 and below 100 percent")
    return m.group("base"), pct


def trace_path(profile: str) -> Path | None:
    """The trace file `profile` follows ("trace:<file>", with or without a loss suffix); None for
    a profile of fixed rates."""
    base = split_loss(profile)[0]
    return Path(base[len(TRACE_PREFIX):]) if base.startswith(TRACE_PREFIX) else None


def link_for(profile: str, node: str) -> LinkSpec:
    """The uplink of `node` ("controller", "client-2", "worker-0", ...) under `profile` (at the
    start of the run, for a trace).

    Role lists are indexed by the number at the end of the node name, cycling, so a profile
    serves any number of clients."""
    base, loss = split_loss(profile)
    spec = _base_link(base, node)
    return spec if loss is None else replace(spec, loss_pct=loss)


def _base_link(profile: str, node: str) -> LinkSpec:
    if (trace := trace_path(profile)) is not None:
        from .trace import load_trace
        return LinkSpec(rate=f"{int(load_trace(trace).rate_at(node, 0.0))}bit")
    profiles = load_profiles()
    if profile not in profiles:
        if re.fullmatch(RATE, profile.strip().lower()):
            return LinkSpec(rate=profile)
        raise LinkError(f"unknown link profile {profile!r}; known: {', '.join(sorted(profiles))}, a rate "
                        "(e.g. 100mbit), trace:<file>, each optionally with -loss<percent>")
    prof = profiles[profile]
    m = re.fullmatch(r"(.*?)[-_]?(\d+)", node)
    role, index = (m.group(1), int(m.group(2))) if m else (node, 0)
    entries = prof.get("roles", {}).get(role)
    if entries:
        return _spec(entries[index % len(entries)], f"profile {profile} role {role}[{index % len(entries)}]")
    return _spec(prof["default"], f"profile {profile} default")


def tbf_args(spec: LinkSpec, queue_floor: int = QUEUE_FLOOR) -> list[str]:
    # burst: 10 ms worth of rate but at least 16 KiB, so one 1500-byte packet train fits at
    # low rates and the token bucket does not cap throughput at high rates (HZ granularity).
    burst = max(int(spec.rate_bps / 8 * 0.01), 16384)
    # The queue: 400 ms of rate before drops (DDS retransmits drops slowly), but never less than
    # queue_floor, so that a node's writers' send windows fit at any rate: a 400 ms queue of a
    # 0.62 Mbit/s uplink (31 KB) dropped from one 32 KiB window, and its goodput fell to 76 %.
    limit = max(int(spec.rate_bps / 8 * 0.4), queue_floor)
    return ["tbf", "rate", spec.rate, "burst", str(burst), "limit", str(limit)]


def netem_args(spec: LinkSpec) -> list[str]:
    args = ["netem"]
    if spec.delay_ms or spec.jitter_ms:
        args += ["delay", f"{spec.delay_ms}ms"] + ([f"{spec.jitter_ms}ms"] if spec.jitter_ms else [])
    if spec.loss_pct:
        args += ["loss", f"{spec.loss_pct}%"]
    return args


def ingress_drop_rule(loss_pct: float) -> list[str]:
    """The iptables INPUT rule that drops loss_pct percent of incoming packets at random."""
    return ["INPUT", "-m", "statistic", "--mode", "random", "--probability", f"{loss_pct / 100:.6g}",
            "-m", "comment", "--comment", INGRESS_DROP_COMMENT, "-j", "DROP"]


def _clear_ingress_drop(prefix: Sequence[str]) -> None:
    """Delete the INPUT rules an earlier apply_link added (matched by their comment)."""
    if shutil.which("iptables") is None:
        return
    rules = subprocess.run([*prefix, "iptables", "-w", "-S", "INPUT"], capture_output=True, text=True).stdout
    for line in rules.splitlines():
        if f"--comment {INGRESS_DROP_COMMENT}" in line and line.startswith("-A "):
            subprocess.run([*prefix, "iptables", "-w", "-D", *line.split()[1:]], capture_output=True)


def _drop_ingress(loss_pct: float, prefix: Sequence[str]) -> tuple[str | None, str]:
    """Add the ingress drop rule; (the command, "") or (None, why not)."""
    if shutil.which("iptables") is None:
        return None, "no iptables here for ingress loss"
    cmd = ["iptables", "-w", "-A", *ingress_drop_rule(loss_pct)]  # -w: the xtables lock is machine-wide
    out = subprocess.run([*prefix, *cmd], capture_output=True, text=True)
    if out.returncode != 0:
        return None, f"iptables failed: {out.stderr.strip()}"
    return " ".join(cmd), ""


def apply_link(spec: LinkSpec, dev: str = "eth0", prefix: Sequence[str] = ()) -> dict[str, Any]:
    """Shape egress of `dev` (run each tc through `prefix`, e.g. ip netns exec NS); loss goes to
    netem, or without it to the ingress of this namespace or container (iptables INPUT).

    Returns a record of what was requested, what got applied and what not (and why)."""
    def tc(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*prefix, "tc", *args], capture_output=True, text=True)

    record: dict[str, Any] = {"dev": dev, "requested": asdict(spec), "applied": {}, "not_applied": {},
                              "commands": []}
    tc("qdisc", "del", "dev", dev, "root")  # start clean; fails harmlessly when nothing is set
    _clear_ingress_drop(prefix)
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
            missing = {k: v for k, v in asdict(spec).items() if k != "rate" and v}
            if spec.loss_pct:
                cmd, why_not = _drop_ingress(spec.loss_pct, prefix)
                if cmd:
                    record["commands"].append(cmd)
                    record["applied"].update(loss_pct=spec.loss_pct, loss_on="ingress (iptables INPUT)")
                    del missing["loss_pct"]
                else:
                    why += f"; {why_not}"
            if missing:
                record["not_applied"] = missing | {"reason": why}
    cmd = ["qdisc", "replace", "dev", dev, *rate_parent, *tbf_args(spec)]
    out = tc(*cmd)
    if out.returncode != 0:
        raise LinkError(f"tc {' '.join(cmd)} failed: {out.stderr.strip()} (does the process have NET_ADMIN?)")
    record["commands"].append("tc " + " ".join(cmd))
    record["applied"]["rate"] = spec.rate
    record["tc_show"] = tc("qdisc", "show", "dev", dev).stdout.strip()
    return record


def set_rate(rate_bps: float, dev: str = "eth0", prefix: Sequence[str] = (), queue_floor: int = QUEUE_FLOOR) -> str:
    """Change only the rate of the tbf `apply_link` put on `dev` (tc replace: the same qdisc, its
    handle kept, no delete; under a netem root it is the child 10:); its queue at least
    `queue_floor` bytes (queue_floor_for: what the node's send window needs). Returns the tc
    command; LinkError if refused (commlab.fl.adaptive.shaping: a client's allocated uplink rate)."""
    spec = LinkSpec(rate=f"{max(int(rate_bps), 8000)}bit")
    shown = subprocess.run([*prefix, "tc", "qdisc", "show", "dev", dev], capture_output=True, text=True).stdout
    parent = ["parent", "1:1", "handle", "10:"] if "netem" in shown else ["root"]
    cmd = ["qdisc", "replace", "dev", dev, *parent, *tbf_args(spec, queue_floor)]
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
            print(f"{name:14s} {prof.get('description', '')}")
        print(f"{'RATE':14s} every node the same rate, e.g. 100mbit")
        print(f"{'trace:FILE':14s} rates over time from a CSV of time_s,node,rate (commlab.links.trace)")
        print(f"{'BASE-lossP':14s} any of these with P % of every node's incoming packets lost, "
              f"e.g. {', '.join(LOSS_EXAMPLES)}")
        return 0
    record = {"profile": args.profile, "node": args.node, **apply_link(link_for(args.profile, args.node), args.dev)}
    print(describe(record), file=sys.stderr)
    if args.record:
        args.record.write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
