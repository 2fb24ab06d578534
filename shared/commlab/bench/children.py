"""Running what a benchmark measures: a launcher (`python -m commlab.fl.run ...`) or a set of
nodes started together (probe sender and receiver, DDP ranks), each with its output in a log file.

The terminal shows progress and results, not the children's output: each child writes to its own
log (its first line the command), and a child that fails is reported in one line naming it, its
exit code, the last line of its log and the log's path. Ending a run signals only the processes
started here, by PID (SIGTERM first: launchers then end their own nodes, then SIGKILL).
"""
from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from commlab.output.progress import echo

END_GRACE_S = 15.0  # how long a child may take to exit after SIGTERM (a launcher ends its nodes first)


@dataclass
class Child:
    name: str
    argv: list[str]
    log: Path
    returncode: int | None = None
    ended: bool = False  # ended by us (stopped, timed out, or a sibling failed), not by itself

    @property
    def failed(self) -> bool:
        return not self.ended and self.returncode not in (None, 0)

    def output(self) -> str:
        """What the child wrote (stdout and stderr), without the command line heading the log."""
        text = self.log.read_text(errors="replace")
        return text.split("\n", 1)[1] if text.startswith("$ ") else text

    def last_line(self) -> str:
        lines = [line for line in self.output().splitlines() if line.strip()]
        return lines[-1].strip() if lines else "(no output)"


@dataclass
class Outcome:
    """How a run ended: every child's exit, the wall time, and why it was ended early if it was."""
    children: list[Child]
    wall_s: float
    stopped: str | None = None  # the stop condition's reason, or a timeout
    timed_out: bool = False
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every child exited 0, or the run was stopped on purpose (not timed out)."""
        return not self.failures and not self.timed_out

    @property
    def status(self) -> str:
        """"ok", the stop reason, or "exit N" of the first child that failed (a table cell)."""
        failed = [c for c in self.children if c.failed]
        if failed:
            return f"exit {failed[0].returncode}"
        return self.stopped or "ok"

    def child(self, name: str) -> Child:
        return next(c for c in self.children if c.name == name)

    def check(self) -> "Outcome":
        """Raise SystemExit with the one-line failure when the run did not end ok."""
        if not self.ok:
            raise SystemExit(self.failures[0])
        return self


def run_logged(commands: Sequence[str] | Mapping[str, Sequence[str]], log: Path, *,
               stop: Callable[[], str | None] | None = None, timeout_s: float | None = None,
               poll_s: float = 0.5, cwd: Path | None = None) -> Outcome:
    """Run one command (its output in ``log``) or a set of named commands started together (each
    in ``<log stem>-<name>.log`` beside it) and wait until all have exited.

    ``stop`` is asked every ``poll_s`` seconds; when it returns a reason the children are ended and
    the outcome carries that reason (e.g. "ok (stopped at target)"). A child that exits non-zero
    ends the rest of its set (they would wait for it until their own timeouts) and is reported in
    one line; ``timeout_s`` ends every child and counts as a failure.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(commands, Mapping):
        children = [Child(name, [str(x) for x in argv], log.with_name(f"{log.stem}-{name}.log"))
                    for name, argv in commands.items()]
    else:
        children = [Child(log.stem, [str(x) for x in commands], log)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started, procs, outcome = time.monotonic(), [], None
    try:
        for c in children:
            with open(c.log, "w") as f:
                f.write(f"$ {shlex.join(c.argv)}\n")
                f.flush()
                procs.append(subprocess.Popen(c.argv, stdout=f, stderr=subprocess.STDOUT, cwd=cwd, env=env))
        outcome = _wait(children, procs, stop, timeout_s, poll_s, started)
    finally:
        _end(children, procs)
    for c in children:
        if c.failed:
            outcome.failures.append(f"{c.name} exited {c.returncode}: {c.last_line()} (log: {c.log})")
    if outcome.timed_out:
        outcome.failures.append(f"{', '.join(c.name for c in children)}: {outcome.stopped} (logs: {log.parent})")
    for line in outcome.failures:
        echo(f"[bench] FAILED {line}")
    return outcome


def _wait(children: list[Child], procs: list[subprocess.Popen], stop: Callable[[], str | None] | None,
          timeout_s: float | None, poll_s: float, started: float) -> Outcome:
    while True:
        for c, p in zip(children, procs):
            c.returncode = p.poll()
        if all(c.returncode is not None for c in children) or any(c.failed for c in children):
            return Outcome(children, time.monotonic() - started)
        if timeout_s is not None and time.monotonic() - started > timeout_s:
            return Outcome(children, time.monotonic() - started, f"timed out after {timeout_s:g} s", timed_out=True)
        reason = stop() if stop is not None else None
        if reason is not None:
            return Outcome(children, time.monotonic() - started, reason)
        time.sleep(poll_s)


def _end(children: list[Child], procs: list[subprocess.Popen]) -> None:
    """SIGTERM to every child of ours still running, SIGKILL after END_GRACE_S."""
    live = [(c, p) for c, p in zip(children, procs) if p.poll() is None]
    for c, p in live:
        c.ended = True
        p.terminate()
    for c, p in live:
        try:
            c.returncode = p.wait(timeout=END_GRACE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            c.returncode = p.wait()
