"""Local backend with shaped links: each node a local process in its own network namespace.

The same link profiles as the containers, applied with tc to each namespace's eth0; nodes
reach each other over a private bridge in 198.19.<net>.0/24. Needs root. Results go straight
to the host results folder, with the same layout as the other backends (plus link-<node>.json
and manifest `link_applied`).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..metrics import write_json_atomic
from ..netem import link_for
from .compose_file import networked_dds
from .netns import NetnsLab

NODES = Path(__file__).resolve().parents[3] / "nodes"
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
    first = nodes[0][2]
    run_dir = Path(first["results_dir"]) / first["run_id"]
    (run_dir / "configs").mkdir(parents=True, exist_ok=True)
    with NetnsLab([n[0] for n in nodes], net=net) as lab:
        links, procs = {}, {}
        for name, script, cfg, env in nodes:
            links[name] = {"profile": link_profile, **lab.shape(name, link_for(link_profile, name))}
            cfg = {**cfg, "link_profile": link_profile, "dds": networked_dds(cfg["dds"], name, lab.addresses)}
            path = run_dir / "configs" / f"{name}.json"
            write_json_atomic(path, cfg)
            procs[name] = lab.popen(name, [sys.executable, str(NODES / script), str(path)],
                                    env={**os.environ, "COMMLAB_BACKEND": "local", **env})
        try:
            procs[nodes[0][0]].wait()
            deadline = time.monotonic() + GRACE_S
            while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            for p in procs.values():  # only our own children, SIGTERM first (nodes exit cleanly)
                if p.poll() is None:
                    p.terminate()
                    try:
                        p.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        p.kill()
    for name, record in links.items():
        write_json_atomic(run_dir / f"link-{name}.json", record)
    manifest_path = run_dir / "manifest.json"
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        write_json_atomic(manifest_path, {**manifest, "link_applied": links, "backend": "local"})
    codes = {n: p.returncode for n, p in procs.items()}
    if any(codes.values()):
        raise RuntimeError(f"run {first['run_id']}: nodes exited with errors {codes}")
    return run_dir
