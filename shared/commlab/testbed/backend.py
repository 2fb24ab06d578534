"""Which backend runs an experiment, and running one experiment's nodes on it.

docker: one container per node (compose); swarm: the same as a Docker Swarm stack. local: plain processes on loopback for the `lan` profile; for any
other profile each node in its own network namespace with the profile applied (root), or, without
root, plain processes that say (on the console and in the manifest) that the run is unshaped.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable

from ..output.progress import echo
from ..output.run_folder import git_commit, write_json_atomic
from ..runs.roster import CONTROLLER
from .engine import BOOTSTRAP, compose_answers, engine_answers
from .images import build_images, images_current

BACKENDS = ("auto", "docker", "swarm", "local")
# The controller's line after each round (commlab.fl.controller), as a container run's log has it.
ROUND_MODEL = re.compile(rf"\[{CONTROLLER}\] round (\d+)/\d+ .* model ([0-9a-f]{{16}}) replica ")


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
    if requested in ("docker", "swarm"):
        if not ok:
            raise RuntimeError(f"backend {requested} requested but unusable: {detail}; start one with {BOOTSTRAP}")
        if requested == "swarm" and os.geteuid() != 0:
            raise RuntimeError("backend swarm needs root (it makes the swarm and its advertise link)")
        print(f"backend: {requested} (requested; engine {detail})", flush=True)
        return requested
    choice = "docker" if ok else "local"
    why = f"Docker engine {detail} answers" if ok else f"no usable Docker engine: {detail}"
    print(f"backend: {choice} (auto: {why})", flush=True)
    return choice


def run_nodes(prog: str, backend: str, profile: str, run_dir: Path, nodes: list[str], *,
              local: Callable[[], int], netns: Callable[[], Path], docker: Callable[[], Path]) -> int:
    """Run the nodes on `backend` (see the module doc); 0 when all succeeded, else 1 after one line
    naming what failed (the nodes' own output has been streamed already). Meanwhile the run's CSVs
    are followed into TensorBoard events (commlab.report.tracking), whichever backend writes them."""
    from ..report.tracking import live_tensorboard
    with live_tensorboard(run_dir):
        return _run_on_backend(prog, backend, profile, run_dir, nodes, local=local, netns=netns, docker=docker)


def _run_on_backend(prog: str, backend: str, profile: str, run_dir: Path, nodes: list[str], *,
                    local: Callable[[], int], netns: Callable[[], Path], docker: Callable[[], Path]) -> int:
    from ..links.netns import NetnsError
    from ..links.profiles import trace_path
    from ..links.spec import LinkError
    if backend in ("docker", "swarm") and trace_path(profile) is not None:
        print(f"{prog}: trace profiles are followed in network namespaces only: use --backend local (root)",
              file=sys.stderr, flush=True)
        return 2
    try:
        if backend in ("docker", "swarm"):
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
    record_manifest(run_dir, "link_applied", links)


def record_manifest(run_dir: Path, key: str, value: Any) -> None:
    """Add `key` to the run's manifest (when the run has one)."""
    manifest_path = run_dir / "manifest.json"
    if manifest_path.exists():
        write_json_atomic(manifest_path, {**json.loads(manifest_path.read_text()), key: value})


def prepare_container_run(cfgs: list[dict[str, Any]], results_dir: Path, backend: str) -> tuple[str, Path]:
    """The run's id and host folder (with configs/ made), once the node images are current."""
    run_ids = {c["run_id"] for c in cfgs}
    if len(run_ids) != 1:
        raise ValueError(f"node configs disagree on run_id: {sorted(run_ids)}")
    run_id = run_ids.pop()
    run_dir = results_dir / run_id
    (run_dir / "configs").mkdir(parents=True, exist_ok=True)
    if not images_current():
        print(f"{backend} backend: node images missing or older than the sources: building them", flush=True)
        build_images()
    return run_id, run_dir


def write_container_configs(run_dir: Path, names: list[str], cfgs: list[dict[str, Any]],
                            rewrite: Callable[[dict[str, Any], str], dict[str, Any]]) -> dict[str, str]:
    """configs/<node>.json: each node's config as its container reads it (`rewrite(cfg, node)`);
    returns node -> its key file on the host, for the nodes of an authenticated run."""
    for name, cfg in zip(names, cfgs):
        write_json_atomic(run_dir / "configs" / f"{name}.json", rewrite(cfg, name))
    return {name: c["dds"]["key_file"] for name, c in zip(names, cfgs) if c.get("dds", {}).get("key_file")}


def write_container_spec(spec: dict[str, Any], path: Path) -> Path:
    """Write a compose or stack spec (JSON, which both read), every node told the commit it runs."""
    for svc in spec["services"].values():
        svc["environment"]["COMMLAB_GIT_COMMIT"] = git_commit()
    path.write_text(json.dumps(spec, indent=2))
    return path


def record_container_links(run_dir: Path) -> None:
    """What each container's tc really applied (link-<node>.json from its entry point) -> manifest."""
    record_links(run_dir, {p.stem.removeprefix("link-"): json.loads(p.read_text())
                           for p in sorted(run_dir.glob("link-*.json"))})


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def round_digests(log: Path) -> dict[int, str]:
    """Round -> digest of the FL controller's model after that round (commlab.models.weights_digest),
    from a container run's log (compose.log, swarm.log); equal digests: bit-identical models."""
    found = (ROUND_MODEL.search(line) for line in log.read_text(errors="replace").splitlines())
    return {int(m.group(1)): m.group(2) for m in found if m}
