"""Local backend with shaped links: each node a local process in its own network namespace.

The same link profiles as the containers, applied with tc to each namespace's eth0; nodes
reach each other over a private bridge in 198.19.<net>.0/24. Needs root. Results go straight
to the host results folder, with the same layout as the other backends (plus link-<node>.json
and manifest `link_applied`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..launch import NodeProcesses, write_node_config
from ..metrics import write_json_atomic
from ..netem import link_for
from .backend import RunFailed, record_links
from .compose_file import networked_dds
from .netns import NetnsLab

GRACE_S = 60.0  # the others get this long to finish after the primary (first) node exited


def run_fl_netns(controller_cfg: dict[str, Any], client_cfgs: list[dict[str, Any]], link_profile: str,
                 net: int = 251) -> Path:
    nodes = [("controller", "controller.py", controller_cfg, {})] + \
        [(f"client-{i}", "client.py", cfg, {}) for i, cfg in enumerate(client_cfgs)]
    return _run(nodes, link_profile, net)


def run_ddp_netns(worker_cfgs: list[dict[str, Any]], link_profile: str, net: int = 252) -> Path:
    world = str(len(worker_cfgs))
    nodes = [(f"worker-{r}", "worker.py", cfg, {"RANK": str(r), "WORLD": world}) for r, cfg in enumerate(worker_cfgs)]
    return _run(nodes, link_profile, net)


def _run(nodes: list[tuple[str, str, dict[str, Any], dict[str, str]]], link_profile: str, net: int) -> Path:
    """Raises NetnsError / LinkError only before any node started, RunFailed when a node failed."""
    first = nodes[0][2]
    run_dir = Path(first["results_dir"]) / first["run_id"]
    with NetnsLab([n[0] for n in nodes], net=net) as lab:
        links = {name: {"profile": link_profile, **lab.shape(name, link_for(link_profile, name))}
                 for name, *_ in nodes}
        with NodeProcesses() as procs:
            for name, script, cfg, env in nodes:
                cfg = {**cfg, "link_profile": link_profile, "dds": networked_dds(cfg["dds"], name, lab.addresses)}
                procs.start(name, script, write_node_config(run_dir, name, cfg), env=env, prefix=lab.prefix(name))
            primary = procs.procs[nodes[0][0]]
            procs.wait_while(lambda: primary.poll() is None)
            procs.wait_while(procs.running, GRACE_S)
    for name, record in links.items():
        write_json_atomic(run_dir / f"link-{name}.json", record)
    record_links(run_dir, links)
    failed = procs.report()
    if failed:
        raise RunFailed(f"run {first['run_id']}: node(s) {', '.join(failed)} exited with errors")
    return run_dir
