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
GRACE_S = 60.0


def run_fl_netns(controller_cfg: dict[str, Any], client_cfgs: list[dict[str, Any]], link_profile: str,
                 net: int = 251) -> Path:
    names = ["controller"] + [f"client-{i}" for i in range(len(client_cfgs))]
    run_dir = Path(controller_cfg["results_dir"]) / controller_cfg["run_id"]
    (run_dir / "configs").mkdir(parents=True, exist_ok=True)
    with NetnsLab(names, net=net) as lab:
        links, procs = {}, {}
        for name, cfg in zip(names, [controller_cfg, *client_cfgs]):
            links[name] = {"profile": link_profile, **lab.shape(name, link_for(link_profile, name))}
            cfg = {**cfg, "link_profile": link_profile, "dds": networked_dds(cfg["dds"], name, lab.addresses)}
            path = run_dir / "configs" / f"{name}.json"
            write_json_atomic(path, cfg)
            script = NODES / ("controller.py" if name == "controller" else "client.py")
            procs[name] = lab.popen(name, [sys.executable, str(script), str(path)],
                                    env={**os.environ, "COMMLAB_BACKEND": "local-netns"})
        try:
            procs["controller"].wait()
            deadline = time.monotonic() + GRACE_S
            while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            for p in procs.values():
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
        write_json_atomic(manifest_path, {**manifest, "link_applied": links})
    codes = {n: p.returncode for n, p in procs.items()}
    if any(codes.values()):
        raise RuntimeError(f"run {controller_cfg['run_id']}: nodes failed {codes}")
    return run_dir
