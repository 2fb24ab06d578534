"""Container entry point: shape eth0 with the run's link profile, record it, resolve the DDS peers
when they are names (swarm), then become the node.

    python -m commlab.testbed.entrypoint -- python nodes/client.py CONFIG.json

The profile is the config's `link_profile` and the record goes to the config's
<results_dir>/<run_id>/link-<node>.json. Environment: COMMLAB_NODE (node name, e.g. client-1,
which picks the node's entry in the profile), COMMLAB_LINK_PROFILE (overrides the config; empty:
leave the link alone), COMMLAB_LINK_DEV (default eth0), COMMLAB_UID/COMMLAB_GID (drop root after
shaping, so result files belong to the host user).
"""
from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from ..links.profiles import LinkError, apply_link, describe, link_for
from ..output.run_folder import write_json_atomic


def shape(config_path: str) -> None:
    try:
        cfg = json.loads(Path(config_path).read_text())
    except (OSError, ValueError) as e:
        raise LinkError(f"cannot read the node config {config_path}: {e}") from None
    node = os.environ.get("COMMLAB_NODE", "node")
    profile = os.environ.get("COMMLAB_LINK_PROFILE", cfg.get("link_profile", ""))
    if not profile:
        print(f"[{node}] no link profile: link left unshaped", flush=True)
        return
    record = {"profile": profile, "node": node,
              **apply_link(link_for(profile, node), os.environ.get("COMMLAB_LINK_DEV", "eth0"))}
    print(f"[{node}] profile {profile}: {describe(record)}", flush=True)
    if "results_dir" in cfg and "run_id" in cfg:
        run_dir = Path(cfg["results_dir"]) / cfg["run_id"]
        run_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(run_dir / f"link-{node}.json", record)
        if os.environ.get("COMMLAB_UID"):  # the node, no longer root, must still write here
            for path in (run_dir, run_dir / f"link-{node}.json"):
                os.chown(path, int(os.environ["COMMLAB_UID"]), int(os.environ.get("COMMLAB_GID", "-1")))


class PeersUnresolved(RuntimeError):
    """Peer names that did not resolve in time; the message names them."""


def resolved_config(config_path: str, timeout_s: float = 120.0,
                    resolve: Callable[[str], str] = socket.gethostbyname) -> str:
    """A config whose DDS peers are addresses: `config_path` itself when they are already, else a
    copy with every name resolved. Swarm nodes name their peers (tasks.<node>): an overlay has no
    fixed addresses, and a name resolves only once that node's task is attached, so this waits
    for all of them."""
    cfg = json.loads(Path(config_path).read_text())
    peers = cfg.get("dds", {}).get("peers") or []
    names = [p for p in peers if not _is_address(p)]
    if not names:
        return config_path
    addresses: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    while True:
        for name in names:
            if name not in addresses:
                try:
                    addresses[name] = resolve(name)
                except OSError:
                    pass
        missing = [n for n in names if n not in addresses]
        if not missing:
            break
        if time.monotonic() > deadline:
            raise PeersUnresolved(f"DDS peers {', '.join(missing)} did not resolve within {timeout_s:.0f} s")
        time.sleep(1.0)
    cfg["dds"]["peers"] = [addresses.get(p, p) for p in peers]
    fd, path = tempfile.mkstemp(prefix="commlab-node-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    os.chmod(path, 0o644)  # the node may run as the host user (COMMLAB_UID)
    return path


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def drop_privileges() -> None:
    uid, gid = os.environ.get("COMMLAB_UID"), os.environ.get("COMMLAB_GID")
    if gid:
        os.setgroups([])
        os.setgid(int(gid))
    if uid:
        os.setuid(int(uid))


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m commlab.testbed.entrypoint -- PROGRAM ARGS...", file=sys.stderr)
        return 2
    try:
        shape(argv[-1])
    except LinkError as e:
        print(f"link shaping failed: {e}", file=sys.stderr)
        return 2
    try:
        argv = [*argv[:-1], resolved_config(argv[-1])]
    except PeersUnresolved as e:
        print(f"[{os.environ.get('COMMLAB_NODE', 'node')}] {e}", file=sys.stderr)
        return 2
    drop_privileges()
    os.execvp(argv[0], argv)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
