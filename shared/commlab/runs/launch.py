"""Starting the node programs of one run as local processes (plain, or inside network namespaces),
and `launch`, the one skeleton of every launcher (`python -m commlab.fl.run`, `commlab.ddp.run`,
`commlab.peers.run`, its `--kind flower`).

Each node's output is relayed to ours line by line as it comes (above the progress bar when one is
drawn on the terminal); ending the run signals only the processes started here, by PID (SIGTERM
first: nodes exit cleanly on it, then SIGKILL).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

from ..output.progress import echo, watch_csv
from .roster import Node
from .zygote import ForkedProcess, shared_zygote

NODES_DIR = Path(__file__).resolve().parents[3] / "nodes"
END_GRACE_S = 15.0  # how long a node may take to exit after SIGTERM
PEER_GRACE_S = 15.0  # after a node failed (or the server ended), the others get this long before they are ended


def end_nodes_on_sigterm() -> None:
    """Let SIGTERM unwind through NodeProcesses.__exit__, so the nodes we started are ended too."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


T = TypeVar("T")
Process = subprocess.Popen | ForkedProcess  # a node forked by the zygote, or any other program
P = TypeVar("P", subprocess.Popen, ForkedProcess)


def config_or_report(prog: str, build: Callable[[], T], errors: tuple[type[Exception], ...] = ()) -> T | None:
    """What ``build`` returns (the node configs of a run), or None after one line on stderr naming
    the problem: a ConfigError (bad flags, files), or one of ``errors``. The launcher then exits 2."""
    from commlab.config.schema import ConfigError
    try:
        return build()
    except (ConfigError, *errors) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return None


def announce(cfg: dict[str, Any], what: str) -> Path:
    """Print the run's id, ``what`` it is and where its results go; returns that folder."""
    run_dir = Path(cfg["results_dir"]) / cfg["run_id"]
    print(f"[run] {cfg['run_id']}: {what}, results {run_dir}", flush=True)
    return run_dir


@dataclass(frozen=True)
class CsvProgress:
    """A run's progress, drawn from the csv its nodes append one row per `unit` to (output.progress.watch_csv)."""
    file: str
    total: int
    unit: str
    numbered_from: int = 1
    note_column: str | None = None
    note_label: str | None = None


@dataclass(frozen=True)
class Launch:
    """A run with its node configs built: the config that names it (run_id, results_dir), what it
    is (announced), its progress, `run(run_dir)` starting its nodes on the chosen backend (the exit
    code) and `after(run_dir)` printing what it measured."""
    cfg: dict[str, Any]
    what: str
    progress: CsvProgress
    run: Callable[[Path], int]
    after: Callable[[Path], None] = lambda run_dir: None


def launch(prog: str, build: Callable[[], Launch], errors: tuple[type[Exception], ...] = ()) -> int:
    """Every launcher's main: SIGTERM ends the nodes started here; the run is built, or one line
    names the problem (exit 2); it is announced, its progress drawn while its nodes run, and
    summed up once they ended."""
    end_nodes_on_sigterm()
    plan = config_or_report(prog, build, errors)
    if plan is None:
        return 2
    run_dir = announce(plan.cfg, plan.what)
    p = plan.progress
    stop_progress = watch_csv(run_dir / p.file, p.total, p.unit, numbered_from=p.numbered_from,
                              note_column=p.note_column, note_label=p.note_label)
    try:
        code = plan.run(run_dir)
    finally:
        stop_progress()
    plan.after(run_dir)
    return code


def codec_params(pairs: list[str], what: str = "codec parameter") -> dict[str, Any]:
    """KEY=VALUE command-line pairs -> codec (or model) parameters; VALUE is JSON when it parses, else a string."""
    from commlab.config.schema import ConfigError
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"{what} {pair!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def write_node_config(run_dir: Path, node: str, cfg: dict[str, Any]) -> Path:
    """results/<run-id>/configs/<node>.json: the exact config the node read, kept with its results."""
    path = run_dir / "configs" / f"{node}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg, indent=2))
    return path


class NodeProcesses:
    """The node processes of one run by name; use as a context manager so they are always ended."""

    def __init__(self) -> None:
        self.procs: dict[str, Process] = {}
        self._relays: list[threading.Thread] = []

    def start(self, node: Node, config: Path, prefix: Sequence[str] = ()) -> Process:
        """Run the node's program nodes/<role>.py CONFIG with its environment (through `prefix`, e.g.
        ip netns exec NS); the manifest records backend local (COMMLAB_BACKEND) whatever interface
        the node's DDS uses. Without a prefix the node is forked from this process's zygote, its
        libraries already imported (zygote.py)."""
        argv = [sys.executable, str(NODES_DIR / node.script), str(config)]
        if prefix:
            return self.start_command(node.name, argv, prefix, dict(node.env))
        return self._track(node.name, shared_zygote().spawn_piped(argv, _node_env(dict(node.env))))

    def start_command(self, name: str, argv: Sequence[str], prefix: Sequence[str] = (),
                      env: dict[str, str] | None = None) -> subprocess.Popen:
        """Run any program of the run (e.g. a Flower SuperLink) under `name`, its output relayed,
        ended with the nodes."""
        return self._track(name, subprocess.Popen([*prefix, *argv], env=_node_env(env), text=True,
                                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT))

    def _track(self, name: str, proc: P) -> P:
        self.procs[name] = proc
        self._relays.append(threading.Thread(target=_relay, args=(proc,), daemon=True))
        self._relays[-1].start()
        return proc

    def wait_while(self, condition, timeout_s: float | None = None, poll_s: float = 0.3) -> None:
        """Sleep while condition() holds, at most timeout_s."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while condition() and (deadline is None or time.monotonic() < deadline):
            time.sleep(poll_s)

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs.values())

    def report(self) -> list[str]:
        """After end(): print every node's exit code; the names of the nodes that failed."""
        codes = {n: p.returncode for n, p in self.procs.items()}
        failed = [n for n, c in codes.items() if c != 0]
        echo(f"[run] exit codes: {codes}" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
        return failed

    def end(self) -> None:
        live = [p for p in self.procs.values() if p.poll() is None]
        for p in live:
            p.terminate()
        for p in live:
            try:
                p.wait(timeout=END_GRACE_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for t in self._relays:
            t.join(timeout=5)

    def __enter__(self) -> "NodeProcesses":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.end()


def _node_env(env: dict[str, str] | None) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "COMMLAB_BACKEND": "local", **(env or {})}


def _relay(proc: Process) -> None:
    for line in proc.stdout:
        echo(line)
