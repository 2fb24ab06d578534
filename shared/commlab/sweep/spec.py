"""A sweep file: the launcher flags to vary (a grid, a list of cells, or both), the seeds each cell
repeats with, and when a run stops; expanded into cells, each with a run id that is a hash of its
settings, so the same settings always name the same run folder.

    {"launcher": "fl",
     "fixed": {"clients": 2, "samples-per-round": 500},
     "grid": {"codec": ["fp32", "int8"], "profile": ["lan", "wan"]},
     "cells": [{"strategy": "median"}, {"strategy": "fedavg", "per-round": 1}],
     "seeds": [0, 1],
     "stop": {"rounds": 10, "accuracy": 0.95, "test_loss_above": 1000},
     "target_accuracy": 0.9}

Every cell is one entry of `cells` (default: one empty entry) crossed with every combination of
`grid`, over `fixed`, then repeated for each seed. Keys are the launcher's flags without the dashes
(`samples-per-round` or `samples_per_round`); true is a bare flag, a list repeats the flag. An entry
may set its own `launcher` (fl: commlab.fl.run, ddp: commlab.ddp.run, centralized: the
centralized peer, commlab.peers.run). JSON, or YAML when PyYAML is installed.

`stop` ends a run early: `rounds`, `epochs`, `accuracy` and `time_s` are the launcher's own flags;
`test_loss_above` (the run diverged: its result is decided) and `free_memory_below_mb` (the host
ran short: the cell fails, and reruns with --retry-failed) the runner watches while the cell runs.
`jobs` caps the cells at once (1: cells that measure time do not share the cores);
`interleave_seeds` runs seed 0 of every cell, then seed 1, ..., so that a machine's changing load
hits every cell alike.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

LAUNCHERS: dict[str, list[str]] = {
    "fl": ["-m", "commlab.fl.run"],
    "ddp": ["-m", "commlab.ddp.run"],
    "centralized": ["-m", "commlab.peers.run", "--kind", "centralized"],
}
USES_DDS = {"fl", "ddp"}  # launchers that take --domain-id (the sweep claims one per running cell)
# The stop metric's keys and the launcher flag each becomes.
STOP_FLAGS = {"accuracy": "stop-accuracy", "rounds": "rounds", "time_s": "round-time-budget", "epochs": "epochs"}
# The stop conditions the runner watches in a running cell (commlab.sweep.watch).
WATCHED = ("test_loss_above", "free_memory_below_mb")
# Flags the sweep sets itself for every cell.
RESERVED = {"results-dir", "run-id", "domain-id", "seed", "launcher", "backend"}
TOP_KEYS = {"name", "launcher", "fixed", "grid", "cells", "seeds", "repeats", "stop", "target_accuracy",
            "cell_timeout_s", "backend", "timeline", "jobs", "interleave_seeds"}
HASH_CHARS = 12


class SweepError(ValueError):
    """A sweep file that cannot be run; the message names the file and the problem in one line."""


@dataclass(frozen=True)
class Cell:
    """One run of the sweep: its launcher, its flags (sorted, dashes), its seed; `entry`, which of
    the file's `cells` it came from, is not part of its settings."""
    launcher: str
    flags: tuple[tuple[str, Any], ...]
    seed: int
    entry: int = field(default=0, compare=False)

    @property
    def settings(self) -> dict:
        """Everything that defines the run, as JSON values; hashed into its run id."""
        return {"launcher": self.launcher, "flags": {k: v for k, v in self.flags}, "seed": self.seed}

    @property
    def run_id(self) -> str:
        text = json.dumps(self.settings, sort_keys=True, separators=(",", ":"))
        return f"{self.launcher}-{hashlib.sha256(text.encode()).hexdigest()[:HASH_CHARS]}"

    @property
    def config(self) -> dict:
        """The settings without the seed: the cells the report groups over seeds."""
        return {"launcher": self.launcher, **dict(self.flags)}

    def argv(self, results_dir: Path, domain: int | None) -> list[str]:
        out = [sys.executable, *LAUNCHERS[self.launcher]]
        for key, value in self.flags:
            out += flag_args(key, value)
        out += ["--seed", str(self.seed), "--results-dir", str(results_dir), "--run-id", self.run_id]
        return out + (["--domain-id", str(domain)] if domain is not None else [])

    @property
    def nodes(self) -> int:
        """Processes the cell's run starts: FL controller + client processes, DDP ranks, one peer."""
        flags = dict(self.flags)
        if self.launcher == "fl":
            return int(flags.get("procs") or flags.get("clients", 2)) + 1
        if self.launcher == "ddp":
            return int(flags.get("world", 3))
        return 1


@dataclass(frozen=True)
class Sweep:
    name: str
    cells: list[Cell]
    target_accuracy: float | None
    cell_timeout_s: float
    timeline: str | None  # the run whose per-round timeline the report draws (default: the first)
    watch: dict[str, float] = field(default_factory=dict)  # stop conditions the runner checks (WATCHED)
    jobs: int | None = None  # the most cells at once this sweep allows


def differing(configs: list[dict]) -> list[str]:
    """The settings whose values are not the same in every config (missing counts as a value)."""
    keys = sorted({k for c in configs for k in c})
    return [k for k in keys if len({repr(c.get(k)) for c in configs}) > 1]


def label(config: dict, keys: list[str]) -> str:
    """`config` named by its values of `keys`; a key it lacks (the launcher's default) is left out,
    which keeps two different configs' labels apart."""
    return ", ".join(f"{k}={config[k]}" for k in keys if k in config) or "launcher defaults"


def flag_args(key: str, value: Any) -> list[str]:
    if value is True:
        return [f"--{key}"]
    if isinstance(value, list):
        return [x for item in value for x in (f"--{key}", str(item))]
    return [f"--{key}", str(value)]


def read_file(path: Path) -> dict:
    """The sweep file as a dict: JSON, or YAML (.yaml/.yml) when PyYAML is installed."""
    try:
        text = path.read_text()
    except OSError as e:
        raise SweepError(f"{path}: cannot read ({e.strerror})") from None
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise SweepError(f"{path}: YAML sweep files need PyYAML (pip install pyyaml); or write it as JSON") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise SweepError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise SweepError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise SweepError(f"{path}: expected an object at the top")
    return data


def flag_name(where: str, key: Any) -> str:
    if not isinstance(key, str) or not key or not all(c.isalnum() or c in "-_" for c in key):
        raise SweepError(f"{where}: {key!r} is not a launcher flag name")
    name = key.replace("_", "-")
    if name in RESERVED:
        raise SweepError(f"{where}: {name} is set by the sweep itself (seeds: `seeds`; launcher: `launcher`)")
    return name


def flag_value(where: str, value: Any) -> Any:
    ok = (str, int, float, bool)
    if isinstance(value, ok) and value is not False or isinstance(value, list) and all(isinstance(v, ok) for v in value):
        return value
    raise SweepError(f"{where}: {value!r} is not a flag value (a string, number, true, or a list of them)")


def settings_of(where: str, raw: Any) -> dict:
    if not isinstance(raw, dict):
        raise SweepError(f"{where}: expected an object of flag: value")
    return {flag_name(where, k): flag_value(f"{where}.{k}", v) for k, v in raw.items() if k != "launcher"}


def seeds_of(path: Path, data: dict) -> list[int]:
    if "seeds" in data and "repeats" in data:
        raise SweepError(f"{path}: give seeds or repeats, not both")
    seeds = data.get("seeds", list(range(data.get("repeats", 1))) if isinstance(data.get("repeats", 1), int) else None)
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise SweepError(f"{path}: seeds must be a non-empty list of integers (repeats: a count)")
    if len(set(seeds)) != len(seeds):
        raise SweepError(f"{path}: seeds repeat a seed: {seeds}")
    return seeds


def stop_of(path: Path, raw: Any) -> tuple[dict, dict]:
    """`stop` split into launcher flags and the conditions the runner watches."""
    if not isinstance(raw, dict):
        raise SweepError(f"{path}: stop must be an object such as {{\"rounds\": 10, \"accuracy\": 0.95}}")
    unknown = set(raw) - set(STOP_FLAGS) - set(WATCHED)
    if unknown:
        raise SweepError(f"{path}: unknown stop metric {sorted(unknown)}; known: {', '.join([*STOP_FLAGS, *WATCHED])}")
    for k, v in raw.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
            raise SweepError(f"{path}: stop.{k} must be a positive number, got {v!r}")
    return ({STOP_FLAGS[k]: v for k, v in raw.items() if k in STOP_FLAGS},
            {k: float(v) for k, v in raw.items() if k in WATCHED})


def load(path: Path, check: Callable[[Cell], str | None] | None = None) -> Sweep:
    """The sweep in `path`, its cells expanded; `check(cell)` returns why a cell's flags are refused
    (default: the launcher's own argument parser)."""
    path = Path(path)
    data = read_file(path)
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise SweepError(f"{path}: unknown keys {sorted(unknown)}; known: {', '.join(sorted(TOP_KEYS))}")
    default_launcher = data.get("launcher", "fl")
    fixed = settings_of(f"{path}: fixed", data.get("fixed", {}))
    grid = data.get("grid", {})
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise SweepError(f"{path}: grid must map flags to non-empty lists of values")
    axes = [(flag_name(f"{path}: grid", k), [flag_value(f"{path}: grid.{k}", v) for v in vs]) for k, vs in grid.items()]
    entries = data.get("cells", [{}])
    if not isinstance(entries, list) or not entries:
        raise SweepError(f"{path}: cells must be a non-empty list of objects")
    stop, watch = stop_of(path, data.get("stop", {}))
    backend = {"backend": data.get("backend", "local")}
    cells: list[Cell] = []
    for i, entry in enumerate(entries):
        where = f"{path}: cells[{i}]"
        launcher = entry.get("launcher", default_launcher) if isinstance(entry, dict) else None
        if launcher not in LAUNCHERS:
            raise SweepError(f"{where}: launcher {launcher!r} is not one of {', '.join(LAUNCHERS)}")
        own = settings_of(where, entry)
        for combo in itertools.product(*(values for _, values in axes)):
            flags = {**fixed, **dict(zip((k for k, _ in axes), combo)), **own}
            flags = {**flags, **{k: v for k, v in stop.items() if k not in own}, **backend}
            for seed in seeds_of(path, data):
                cells.append(Cell(launcher, tuple(sorted(flags.items())), seed, i))
    if data.get("interleave_seeds", False) is True:
        cells.sort(key=lambda c: c.seed)  # stable: each seed keeps the cells' order
    elif data.get("interleave_seeds", False) is not False:
        raise SweepError(f"{path}: interleave_seeds must be true or false")
    ids = [c.run_id for c in cells]
    if len(set(ids)) != len(ids):
        twice = next(c for c in cells if ids.count(c.run_id) > 1)
        raise SweepError(f"{path}: two cells have the same settings: {twice.settings}")
    for cell in cells:
        problem = (check or launcher_refuses)(cell)
        if problem:
            raise SweepError(f"{path}: cell {cell.config} seed {cell.seed}: {problem}")
    target = data.get("target_accuracy", data.get("stop", {}).get("accuracy"))
    if target is not None and not (isinstance(target, (int, float)) and 0 < target <= 1):
        raise SweepError(f"{path}: target_accuracy must be a fraction in (0, 1], got {target!r}")
    timeout = data.get("cell_timeout_s", 3600)
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise SweepError(f"{path}: cell_timeout_s must be a positive number of seconds")
    jobs = data.get("jobs")
    if jobs is not None and not (isinstance(jobs, int) and not isinstance(jobs, bool) and jobs >= 1):
        raise SweepError(f"{path}: jobs must be a whole number of cells, at least 1, got {jobs!r}")
    return Sweep(str(data.get("name") or path.stem), cells, target, float(timeout), data.get("timeline"), watch, jobs)


def launcher_refuses(cell: Cell) -> str | None:
    """The launcher's argument parser on the cell's flags: its error line, or None when it accepts them."""
    if cell.launcher == "fl":
        from commlab.fl.run import parse_args
    elif cell.launcher == "ddp":
        from commlab.ddp.run import parse_args
    else:
        from commlab.peers.run import parse_args
    argv = cell.argv(Path("results"), 1 if cell.launcher in USES_DDS else None)[len(LAUNCHERS[cell.launcher]) + 1:]
    if cell.launcher == "centralized":
        argv = ["--kind", "centralized", *argv]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parse_args(argv)
    except SystemExit:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        return lines[-1] if lines else "the launcher refused its flags"
    return None
