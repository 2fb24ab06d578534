"""Small helpers around the Docker CLI: does an engine answer, run a docker command."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]  # shared/commlab/testbed/engine.py -> repo root
BOOTSTRAP = REPO / "scripts" / "docker-bootstrap.sh"


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
    out = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    return out.returncode == 0


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
