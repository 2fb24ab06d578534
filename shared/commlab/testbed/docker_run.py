"""Run an FL or DDP experiment as a compose project: one container per node.

The run folder on the host (results/<run-id>/) gets the rewritten node configs (configs/), the
generated compose.yaml, compose.log (every container's output), link-<node>.json from each
container's entry point, and whatever the nodes write (manifest.json, CSV tables, checkpoints).
After the run, the manifest gains `link_applied` (node -> what tc really applied).
"""
from __future__ import annotations

import json
import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..output.progress import echo
from ..output.run_folder import write_json_atomic
from ..runs.roster import Node, ddp_roster, fl_roster_of
from .backend import RunFailed, log_tail, prepare_container_run, record_container_links, write_container_spec
from .compose_file import CONTAINER_RESULTS, addresses, compose_spec, container_config, project_name
from .engine import free_net
from .swarm import run_stack

NETS = range(128, 250)  # 198.19.<net>.0/24 for run networks; below 128 stays free for the engine
CONTROLLER_GRACE_S = 60.0  # clients get this long to leave after the controller has finished


def run_fl(controller_cfg: dict[str, Any], client_cfgs: list[dict[str, Any]], link_profile: str,
           results_dir: Path, swarm: bool = False) -> Path:
    """On compose, or with `swarm` as a Docker Swarm stack (commlab.testbed.swarm)."""
    return (run_stack if swarm else _run)(fl_roster_of(client_cfgs), [controller_cfg, *client_cfgs], link_profile,
                                          Path(results_dir))


def run_ddp(worker_cfgs: list[dict[str, Any]], link_profile: str, results_dir: Path, swarm: bool = False) -> Path:
    return (run_stack if swarm else _run)(ddp_roster(len(worker_cfgs)), worker_cfgs, link_profile, Path(results_dir))


def run_peers(nodes: list[Node], cfg: dict[str, Any], link_profile: str, results_dir: Path) -> Path:
    """Reference peers (commlab.peers: gloo ranks), one container each from the worker image; the
    first node is rank 0, the master the others reach by its service name."""
    return _run(nodes, [cfg] * len(nodes), link_profile, Path(results_dir))


def _run(nodes: list[Node], cfgs: list[dict[str, Any]], link_profile: str, results_dir: Path) -> Path:
    """The first node is the primary one (controller, rank 0): once it has exited, the run ends."""
    run_id, run_dir = prepare_container_run(cfgs, results_dir, "docker")
    net = free_net(run_id, NETS)
    addrs = addresses(nodes, net)
    for node, cfg in zip(nodes, cfgs):
        write_json_atomic(run_dir / "configs" / f"{node.name}.json",
                          container_config(cfg, node.name, addrs, link_profile, results_dir))
    spec = compose_spec(nodes, run_id=run_id, host_results=results_dir, net=net,
                        config_dir=f"{CONTAINER_RESULTS}/{run_id}/configs",
                        key_files={n.name: c["dds"]["key_file"] for n, c in zip(nodes, cfgs) if c.get("dds", {}).get("key_file")})
    compose_file = run_dir / "compose.yaml"
    write_container_spec(spec, compose_file)
    project = project_name(run_id)
    print(f"docker backend: {len(nodes)} containers on 198.19.{net}.0/24, link profile {link_profile}, "
          f"compose file {compose_file}", flush=True)
    try:
        codes = _up(compose_file, project, nodes[0].name, run_dir / "compose.log")
    finally:
        subprocess.run(["docker", "compose", "-f", str(compose_file), "-p", project, "down", "-t", "5",
                        "--remove-orphans"], capture_output=True)
    record_container_links(run_dir)
    failed = {name: code for name, code in codes.items() if code != 0}
    if failed:
        # First line: what failed (the launchers print only that); then the log's tail.
        raise RunFailed(f"run {run_id}: containers exited with errors {failed} (log: {run_dir / 'compose.log'})"
                        f"\n{log_tail(run_dir / 'compose.log')}")
    return run_dir


def _up(compose_file: Path, project: str, primary: str, log_path: Path) -> dict[str, int]:
    """`docker compose up`, output to the console and log_path; returns service -> exit code.

    When the primary node (controller / rank 0) has exited, the others get CONTROLLER_GRACE_S
    to finish before they are stopped, so a crashed primary cannot leave the run hanging."""
    base = ["docker", "compose", "-f", str(compose_file), "-p", project]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([*base, "up", "--no-color"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        primary_done_at: float | None = None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        last_poll = 0.0
        while proc.poll() is None:
            if sel.select(timeout=1.0):
                line = proc.stdout.readline()
                log.write(line)
                echo(line.decode(errors="replace"))
            now = time.monotonic()
            if now - last_poll > 2.0:
                last_poll = now
                if primary_done_at is None and _states(base).get(primary, ("", 0))[0] == "exited":
                    primary_done_at = now
                if primary_done_at is not None and now - primary_done_at > CONTROLLER_GRACE_S:
                    print(f"docker backend: {primary} finished {CONTROLLER_GRACE_S:.0f} s ago; stopping the rest",
                          flush=True)
                    subprocess.run([*base, "stop", "-t", "5"], capture_output=True)
                    primary_done_at = float("inf")
        rest = proc.stdout.read()
        log.write(rest)
        sys.stdout.write(rest.decode(errors="replace"))
    return {name: code for name, (_, code) in _states(base).items()}


def _states(base: list[str]) -> dict[str, tuple[str, int]]:
    out = subprocess.run([*base, "ps", "-a", "--format", "json"], capture_output=True, text=True)
    rows: list[dict[str, Any]] = []
    for line in out.stdout.splitlines():  # one JSON object a line (compose >= 2.21) or one array
        line = line.strip()
        if line:
            parsed = json.loads(line)
            rows.extend(parsed if isinstance(parsed, list) else [parsed])
    return {r["Service"]: (r.get("State", ""), int(r.get("ExitCode", 0))) for r in rows}
