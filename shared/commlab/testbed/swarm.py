"""Run an FL or DDP experiment as a Docker Swarm stack: one service (one task) per node.

What differs from the compose backend (docker_run), and why:
- The swarm is made here when the engine is not in one: `docker swarm init` advertising a veth
  address in 198.19.254.0/30 (swarm refuses loopback; a veth pair keeps everything on this
  machine) with its address pool in ADDRESS_POOL, so overlay networks stay in the benchmarking range.
- Overlay networks have no fixed addresses and no multicast: a node's DDS peers are the other
  nodes' names (`tasks.<node>`, their task addresses), resolved by the container's entry point
  before the node starts, and dds.multicast is off.
- An overlay's MTU is 1450 (VXLAN's 50 bytes, also on one host; the engine ignores a larger
  one): dds.link_mtu tells the nodes, so every DDS datagram still fits one frame (with 1500-byte
  datagrams IP split each in two: 2.2 % more bytes on the interfaces than on compose).
- A swarm of several engines (commlab.testbed.engine_pair) labels each node ENGINE_LABEL=<engine>;
  the services are then spread over the labelled engines in roster order (placement constraints),
  so the controller and the clients run on different engines. Unlabelled: wherever the scheduler
  puts them (one engine: that one).
- Keys are swarm secrets, one per node; images are the local ones (`--resolve-image never`: no
  registry is asked). Tasks do not restart: a node that fails ends the run, as in compose.
The run folder gets configs/, stack.yaml and swarm.log (every service's output, after the run).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..runs.roster import Node
from .backend import (RunFailed, log_tail, prepare_container_run, record_container_links, record_manifest,
                      write_container_configs, write_container_spec)
from .compose_file import CONTAINER_RESULTS, compose_spec, container_config, project_name
from .engine import EngineError, docker, free_net

ADVERTISE_LINK = ("cl-swarm0", "cl-swarm1")
ADVERTISE_ADDRESS = "198.19.254.1"
ADDRESS_POOL = "198.19.64.0/19"  # overlay subnets 198.19.64-95.0/24; compose runs use 198.19.100 and 128-249
NETS = range(65, 96)  # 198.19.64.0/24 is the swarm's own ingress network
OVERLAY_MTU = 1450
ENGINE_LABEL = "commlab.engine"
POLL_S = 2.0
PRIMARY_GRACE_S = 60.0  # the others get this long to finish after the controller / rank 0 has
DONE = ("complete", "failed", "rejected", "shutdown", "orphaned")


def swarm_state() -> str:
    return docker("info", "--format", "{{.Swarm.LocalNodeState}}").stdout.decode().strip()


def ensure_swarm() -> None:
    """Join this engine to a single-node swarm of its own, unless it is in one already."""
    if swarm_state() == "active":
        return
    if subprocess.run(["ip", "link", "show", ADVERTISE_LINK[0]], capture_output=True).returncode != 0:
        for cmd in (["ip", "link", "add", ADVERTISE_LINK[0], "type", "veth", "peer", "name", ADVERTISE_LINK[1]],
                    ["ip", "addr", "add", f"{ADVERTISE_ADDRESS}/30", "dev", ADVERTISE_LINK[0]],
                    ["ip", "link", "set", ADVERTISE_LINK[0], "up"], ["ip", "link", "set", ADVERTISE_LINK[1], "up"]):
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                raise EngineError(f"{' '.join(cmd)} failed: {out.stderr.strip()} (a swarm needs root)")
    docker(*init_args(ADVERTISE_ADDRESS), timeout_s=120)
    print(f"swarm backend: made a single-node swarm (advertising {ADVERTISE_ADDRESS}, "
          f"address pool {ADDRESS_POOL})", flush=True)


def init_args(address: str) -> list[str]:
    """`docker swarm init` advertising `address`, its overlay subnets taken from ADDRESS_POOL."""
    return ["swarm", "init", "--advertise-addr", address, "--listen-addr", f"{address}:2377",
            "--default-addr-pool", ADDRESS_POOL, "--default-addr-pool-mask-length", "24"]


def leave_swarm() -> None:
    """Undo ensure_swarm: leave the swarm and remove the advertise link."""
    if swarm_state() != "inactive":
        docker("swarm", "leave", "--force", timeout_s=120)
    subprocess.run(["ip", "link", "del", ADVERTISE_LINK[0]], capture_output=True)


def labelled_engines() -> list[str]:
    """The ENGINE_LABEL values of the swarm's ready, active nodes, sorted; [] when none has one."""
    ids = docker("node", "ls", "-q").stdout.decode().split()
    out = docker("node", "inspect", "--format",
                 f'{{{{.Status.State}}}} {{{{.Spec.Availability}}}} {{{{index .Spec.Labels "{ENGINE_LABEL}"}}}}', *ids)
    return sorted({f[2] for f in (line.split() for line in out.stdout.decode().splitlines())
                   if len(f) == 3 and f[:2] == ["ready", "active"]})


def spread(nodes: list[Node], engines: list[str]) -> dict[str, str]:
    """Node -> engine, round robin in roster order: the primary on the first engine, the next node
    on the second, ...; {} (no constraint) when there is no engine to choose."""
    return {n.name: engines[i % len(engines)] for i, n in enumerate(nodes)} if engines else {}


def peer_names(nodes: list[Node]) -> dict[str, str]:
    return {n.name: f"tasks.{n.name}" for n in nodes}


def stack_config(cfg: dict[str, Any], node: str, nodes: list[Node], link_profile: str,
                 host_results: Path) -> dict[str, Any]:
    """`cfg` as the node's task must see it: the container's view, peers by name, no multicast."""
    overlay = {**cfg, "dds": {**cfg["dds"], "link_mtu": OVERLAY_MTU}}  # before the datagrams are sized to its frames
    out = container_config(overlay, node, peer_names(nodes), link_profile, host_results)
    out["dds"].update(multicast="off")
    return out


def stack_spec(nodes: list[Node], *, host_results: Path, net: int, config_dir: str,
               key_files: dict[str, str], placement: dict[str, str] | None = None) -> dict[str, Any]:
    """The compose backend's spec, turned into one `docker stack deploy` accepts; `placement`
    (node -> engine, see spread) pins each service to the swarm node with that ENGINE_LABEL."""
    spec = compose_spec(nodes, run_id="stack", host_results=host_results, net=net, config_dir=config_dir,
                        key_files=key_files)
    spec.pop("name")
    for name, svc in spec["services"].items():
        svc["networks"] = ["lab"]  # no fixed addresses on an overlay
        svc["environment"]["COMMLAB_BACKEND"] = "swarm"
        svc["deploy"] = {"restart_policy": {"condition": "none"}}
        if placement:
            svc["deploy"]["placement"] = {"constraints": [f"node.labels.{ENGINE_LABEL} == {placement[name]}"]}
        for secret in svc.get("secrets", []):
            secret["mode"] = 0o400
    spec["networks"] = {"lab": {"driver": "overlay", "internal": True,
                                "ipam": {"config": [{"subnet": f"198.19.{net}.0/24"}]}}}
    return {"version": "3.8", **spec}


def run_stack(nodes: list[Node], cfgs: list[dict[str, Any]], link_profile: str, results_dir: Path) -> Path:
    """The first node is the primary one (controller, rank 0): once it has finished, the run ends."""
    ensure_swarm()
    run_id, run_dir = prepare_container_run(cfgs, results_dir, "swarm")
    net = free_net(run_id, NETS)
    key_files = write_container_configs(run_dir, [n.name for n in nodes], cfgs, lambda cfg, name: stack_config(
        cfg, name, nodes, link_profile, results_dir))
    placement = spread(nodes, labelled_engines())
    spec = stack_spec(nodes, host_results=results_dir, net=net, config_dir=f"{CONTAINER_RESULTS}/{run_id}/configs",
                      key_files=key_files, placement=placement)
    stack_file = write_container_spec(spec, run_dir / "stack.yaml")
    stack = project_name(run_id)
    where = f", on engines {' '.join(f'{n}={e}' for n, e in placement.items())}" if placement else ""
    print(f"swarm backend: stack {stack}, {len(nodes)} services on overlay 198.19.{net}.0/24{where}, link profile "
          f"{link_profile}, stack file {stack_file}", flush=True)
    try:
        docker("stack", "deploy", "--resolve-image", "never", "-c", str(stack_file), stack, timeout_s=300)
        states = _wait(stack, nodes[0].name)
        _save_logs(stack, nodes, run_dir / "swarm.log")
        if placement:
            record_manifest(run_dir, "swarm_engines", _task_engines(stack))
    finally:
        docker("stack", "rm", stack, check=False)
    record_container_links(run_dir)
    failed = {name: f"{state} {error}".strip() for name, (state, error) in states.items() if state != "complete"}
    if failed:
        raise RunFailed(f"run {run_id}: services did not complete: {failed} (log: {run_dir / 'swarm.log'})"
                        f"\n{log_tail(run_dir / 'swarm.log')}")
    return run_dir


def _wait(stack: str, primary: str) -> dict[str, tuple[str, str]]:
    """Service -> (final state, error) once every task is done; the others are removed
    PRIMARY_GRACE_S after the primary finished, so a crashed primary cannot leave the run hanging."""
    primary_done_at: float | None = None
    while True:
        states = _task_states(stack)
        if states and all(state in DONE for state, _ in states.values()):
            return states
        if primary_done_at is None and states.get(primary, ("",))[0] in DONE:
            primary_done_at = time.monotonic()
        if primary_done_at is not None and time.monotonic() - primary_done_at > PRIMARY_GRACE_S:
            print(f"swarm backend: {primary} finished {PRIMARY_GRACE_S:.0f} s ago; ending the rest", flush=True)
            return {name: (state if state in DONE else "ended", error) for name, (state, error) in states.items()}
        time.sleep(POLL_S)


def _task_states(stack: str) -> dict[str, tuple[str, str]]:
    out = docker("stack", "ps", stack, "--no-trunc", "--format", "{{json .}}").stdout.decode()
    states = {}
    for line in out.splitlines():
        row = json.loads(line)
        service = row["Name"].removeprefix(f"{stack}_").rsplit(".", 1)[0]
        states[service] = (row["CurrentState"].split(" ")[0].lower(), row.get("Error", ""))
    return states


def _task_engines(stack: str) -> dict[str, str]:
    """Service -> ENGINE_LABEL of the swarm node its task ran on, as the swarm reports it."""
    rows = [json.loads(line) for line in
            docker("stack", "ps", stack, "--no-trunc", "--format", "{{json .}}").stdout.decode().splitlines()]
    node_ids = docker("inspect", "--format", "{{.NodeID}}", *(r["ID"] for r in rows)).stdout.decode().split()
    labels = dict(line.split(" ", 1) for line in docker(
        "node", "inspect", "--format", f'{{{{.ID}}}} {{{{index .Spec.Labels "{ENGINE_LABEL}"}}}}',
        *sorted(set(node_ids))).stdout.decode().splitlines())
    return {r["Name"].removeprefix(f"{stack}_").rsplit(".", 1)[0]: labels.get(n, "?") for r, n in zip(rows, node_ids)}


def _save_logs(stack: str, nodes: list[Node], path: Path) -> None:
    with open(path, "ab") as log:
        for node in nodes:
            out = docker("service", "logs", "--no-trunc", "--raw", f"{stack}_{node.name}", check=False)
            for line in (out.stdout + out.stderr).splitlines():
                log.write(f"{node.name} | ".encode() + line + b"\n")


def main(argv: list[str]) -> int:
    if argv != ["down"]:
        print("usage: python -m commlab.testbed.swarm down   (leave the single-node swarm; make stack-down)",
              file=sys.stderr)
        return 2
    for stack in docker("stack", "ls", "--format", "{{.Name}}").stdout.decode().split():
        if stack.startswith("cl-"):
            docker("stack", "rm", stack, check=False)
    leave_swarm()
    print("swarm: left; advertise link removed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
