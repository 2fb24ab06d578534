"""Run output: one folder per run with a manifest and append-only CSV tables.

Rows are flushed as they are written so a run that dies leaves every finished round or step
readable; the manifest is replaced atomically so a reader never sees half of it.
"""
from __future__ import annotations

import csv
import json
import os
import resource
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, BinaryIO, Callable, Mapping

from commlab.output.memory_watch import MemoryWatch


def git_commit(repo_dir: Path | None = None) -> str:
    """The checked-out commit, or 'unknown' outside a git checkout (inside a container)."""
    env_commit = os.environ.get("COMMLAB_GIT_COMMIT")
    if env_commit:
        return env_commit
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo_dir or Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def backend_name(interface: str) -> str:
    """Backend recorded in the manifest: $COMMLAB_BACKEND (set by every launcher), else guessed from
    the DDS interface (the docker backend rewrites it to eth0)."""
    return os.environ.get("COMMLAB_BACKEND") or ("local" if interface == "lo" else "docker")


def new_run_id(kind: str, label: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{kind}-{label}-{os.getpid()}"


def write_atomic(path: Path, data: bytes | Callable[[BinaryIO], None], mode: int | None = None) -> None:
    """Replace `path` whole or not at all, also across a crash: `data` (bytes, or a function that
    writes to the open binary file, e.g. torch.save / np.savez) goes to a temporary file of its own in
    the same folder, which is flushed, fsynced and renamed over `path`; then the folder is fsynced so
    the rename itself is durable. Readers see the old file or the new one, never part of either.
    The temporary file is removed if writing fails. `mode`: permissions to set (default: the umask's)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, "xb") as f:
            if isinstance(data, (bytes, bytearray, memoryview)):
                f.write(data)
            else:
                data(f)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def write_transport_totals(results_dir: Path | str, run_id: str, node: str, totals: Mapping[str, Any],
                           memory: MemoryWatch | None = None) -> None:
    """results/<run-id>/transport-<node>.json: a node's CommStats at its end (bytes, messages,
    and what it dropped: malformed, expired, evicted, and by authentication reason), and the
    node's peak resident memory (with a MemoryWatch: also when idle and by phase)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    watched = memory.record() if memory is not None else {}
    peak = max(peak, watched.get("peak_rss_bytes", 0))
    write_json_atomic(Path(results_dir) / run_id / f"transport-{node}.json",
                      {**totals, **watched, "peak_rss_bytes": peak})


def peak_memory_line(run_dir: Path) -> str | None:
    """One line naming each node's peak resident memory and their sum (an upper bound on what
    the nodes held at once), from the transport-<node>.json files; None when there are none."""
    peaks, detail = {}, {}
    for path in sorted(run_dir.glob("transport-*.json")):
        try:
            doc = json.loads(path.read_text())
            name = path.stem.removeprefix("transport-")
            peaks[name] = int(doc["peak_rss_bytes"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a node that died before writing it, or a run from before this field
        if "idle_rss_bytes" in doc:  # a MemoryWatch: idle and each phase's peak
            rises = doc.get("phase_rise_rss_bytes", {})
            phases = "".join(f", {k} {v / 2**20:.0f} (+{rises.get(k, 0) / 2**20:.0f})"
                             for k, v in sorted(doc.get("phase_peak_rss_bytes", {}).items()))
            worst = doc.get("exchange_above_idle_x_model")
            target = "" if worst is None else f"; exchange {worst:.2f}x model (target {doc['exchange_target_x_model']:g}x)"
            detail[name] = f" (idle {doc['idle_rss_bytes'] / 2**20:.0f}{phases}{target})"
    if not peaks:
        return None
    nodes = ", ".join(f"{name} {peak / 2**20:.0f} MiB{detail.get(name, '')}" for name, peak in peaks.items())
    return f"peak memory (max RSS): {nodes}; all {len(peaks)} nodes together at most {sum(peaks.values()) / 2**30:.2f} GiB"


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str).encode())


class CsvTable:
    """Append-only CSV file with a fixed header; each row is flushed to disk at once."""

    def __init__(self, path: Path, columns: list[str]):
        self.path = path
        self.columns = columns
        new = not path.exists() or path.stat().st_size == 0
        self._file = open(path, "a", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=columns, extrasaction="raise")
        if new:
            self._writer.writeheader()
            self._file.flush()

    def append(self, row: Mapping[str, Any]) -> None:
        missing = set(self.columns) - set(row)
        if missing:
            raise KeyError(f"{self.path.name}: row lacks columns {sorted(missing)}")
        self._writer.writerow(row)
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class RunWriter:
    """results/<run_id>/: manifest.json plus named CSV tables."""

    def __init__(self, results_dir: Path | str, run_id: str, manifest: Mapping[str, Any]):
        self.dir = Path(results_dir) / run_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.manifest: dict[str, Any] = {"run_id": run_id, "git_commit": git_commit(),
                                         "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                         **manifest}
        self._tables: dict[str, CsvTable] = {}
        write_json_atomic(self.dir / "manifest.json", self.manifest)

    def table(self, name: str, columns: list[str]) -> CsvTable:
        if name not in self._tables:
            self._tables[name] = CsvTable(self.dir / f"{name}.csv", columns)
        return self._tables[name]

    def update_manifest(self, **fields: Any) -> None:
        self.manifest.update(fields)
        write_json_atomic(self.dir / "manifest.json", self.manifest)

    def applied_links(self) -> dict[str, Any]:
        """What each node's link really got: the link-<node>.json records its entry point wrote
        into this run folder (containers, namespaces); empty for plain loopback runs."""
        links: dict[str, Any] = {}
        for path in sorted(self.dir.glob("link-*.json")):
            try:
                links[path.stem.removeprefix("link-")] = json.loads(path.read_text())
            except (OSError, ValueError) as e:
                links[path.stem.removeprefix("link-")] = {"error": f"unreadable {path.name}: {e}"}
        return links

    def close(self, status: str = "completed") -> None:
        # Folding the link records in here puts them into the manifest however the nodes were
        # started (a plain `docker compose up` has no launcher that could do it afterwards).
        links = self.applied_links()
        self.update_manifest(status=status, finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                             **({"link_applied": links} if links else {}))
        for t in self._tables.values():
            t.close()
