"""Which backend runs an experiment, and running one experiment's nodes on it.

docker: one container per node. local: plain processes on loopback for the `lan` profile; for any
other profile each node in its own network namespace with the profile applied (root), or, without
root, plain processes that say (on the console and in the manifest) that the run is unshaped.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from ..metrics import write_json_atomic
from ..progress import echo
from .engine import BOOTSTRAP, compose_answers, engine_answers

BACKENDS = ("auto", "docker", "local")


class RunFailed(RuntimeError):
    """A node (container or namespaced process) of the run exited with an error; the message names it."""


def choose_backend(requested: str) -> str:
    """"auto" -> "docker" when an engine (and compose v2) answers, else "local"; prints the choice and why."""
    if requested not in BACKENDS:
        raise ValueError(f"unknown backend {requested!r}; choose one of {', '.join(BACKENDS)}")
    if requested == "local":
        print("backend: local (requested)", flush=True)
        return "local"
    ok, detail = engine_answers()
    if ok and not compose_answers():
        ok, detail = False, "the engine answers but `docker compose` (v2) is missing"
    if requested == "docker":
        if not ok:
            raise RuntimeError(f"backend docker requested but unusable: {detail}; start one with {BOOTSTRAP}")
        print(f"backend: docker (requested; engine {detail})", flush=True)
        return "docker"
    choice = "docker" if ok else "local"
    why = f"Docker engine {detail} answers" if ok else f"no usable Docker engine: {detail}"
    print(f"backend: {choice} (auto: {why})", flush=True)
    return choice


def run_nodes(prog: str, backend: str, profile: str, run_dir: Path, nodes: list[str], *,
              local: Callable[[], int], netns: Callable[[], Path], docker: Callable[[], Path]) -> int:
    """Run the nodes on `backend` (see the module doc); 0 when all succeeded, else 1 after one line
    naming what failed (the nodes' own output has been streamed already)."""
    from ..netem import LinkError
    from .netns import NetnsError
    try:
        if backend == "docker":
            docker()
            return 0
        if profile == "lan":
            return local()
        if os.geteuid() == 0:
            try:
                netns()
                return 0
            except (NetnsError, LinkError) as e:  # raised while building the namespaces, before any node started
                why = f"network namespaces could not be set up ({e})"
        else:
            why = "applying it needs root (network namespaces and tc)"
        echo(f"[run] link profile {profile} NOT applied: {why}; this run is unshaped (loopback)")
        code = local()
        record_links(run_dir, {n: {"profile": profile, "applied": {}, "not_applied": {"reason": why}} for n in nodes})
        return code
    except RuntimeError as e:  # RunFailed, EngineError, an image build that failed: no traceback
        print(f"{prog}: {backend} run failed: {str(e).splitlines()[0]}", file=sys.stderr, flush=True)
        return 1


def record_links(run_dir: Path, links: dict[str, Any]) -> None:
    """Put what each node's link really got (node -> record) into the manifest as `link_applied`."""
    manifest_path = run_dir / "manifest.json"
    if manifest_path.exists():
        write_json_atomic(manifest_path, {**json.loads(manifest_path.read_text()), "link_applied": links})
