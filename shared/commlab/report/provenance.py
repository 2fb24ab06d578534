"""Where a table's numbers come from, in the lines above it: the exact command, the commit, the
date, the machine (cores, CPU model, kernel) and the wall time. Every generated result table
(commlab.report.results_doc) and every benchmark table (commlab.bench) carries them."""
from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime
from pathlib import Path

HEADER_FIELDS = ("command", "commit", "date", "machine", "wall time")


def git_commit(root: Path) -> str:
    """Short commit of ``root``, "+dirty" when anything but the generated tables differs from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
    dirty = git("status", "--porcelain", "--", ".", ":(exclude)docs/results")
    return git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model}, kernel {platform.release()}"


def duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def header(command: str, commit: str, date: datetime, machine_text: str, wall_s: float) -> list[str]:
    """The lines above every table; ``command`` is markdown (code spans included)."""
    values = (command, f"`{commit}`", date.strftime("%Y-%m-%d %H:%M UTC"), machine_text, duration(wall_s))
    return [f"- {field}: {value}" for field, value in zip(HEADER_FIELDS, values)]
