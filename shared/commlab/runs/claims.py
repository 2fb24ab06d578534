"""Numbers that must differ between everything running on this machine at once: DDS domain ids,
TCP ports, network namespace lab tags, compose project numbers. Each is claimed by an exclusive flock on its own file under the claims folder
($COMMLAB_CLAIMS_DIR, default /tmp/commlab-claims): two runs, two test suites, or a run and a test
suite never hold the same number, and the kernel drops a claim when its process ends, even when it
is killed, so a claim is never left stale.

    with Claims() as claims:        # released together on leaving the block
        domain = claims.take("domain")
        port = claims.take("port")
    domain = hold("domain")         # held until this process exits
"""
from __future__ import annotations

import fcntl
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

CLAIMS_DIR_ENV = "COMMLAB_CLAIMS_DIR"
DEFAULT_CLAIMS_DIR = Path("/tmp/commlab-claims")


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def lab_is_free(tag: int) -> bool:
    """No namespace of a lab with this tag is left over (from a process killed mid-run): cl<tag>-<node>
    and cl<tag>-switch, which holds the lab's bridge and the veth ends plugged into it."""
    return not any(Path("/run/netns").glob(f"cl{tag}-*"))


@dataclass(frozen=True)
class Pool:
    numbers: range
    usable: Callable[[int], bool] = lambda n: True


POOLS: dict[str, Pool] = {
    "domain": Pool(range(1, 233)),  # DDS domain ids: 0..232 map to valid ports; 0 is every tool's default
    "port": Pool(range(20000, 32768), port_is_free),  # below Linux's ephemeral ports (32768..60999)
    "lab": Pool(range(1, 10000), lab_is_free),  # network namespace labs (lab_is_free names their links)
    "project": Pool(range(1, 10000)),  # compose projects a test starts itself
}


class ClaimError(RuntimeError):
    """Nothing to claim: every number of the pool is held, or the kind is unknown (one line saying which)."""


def claims_dir() -> Path:
    path = Path(os.environ.get(CLAIMS_DIR_ENV) or DEFAULT_CLAIMS_DIR)
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o1777)  # every user's processes claim from the same folder
    return path


@dataclass
class Claim:
    kind: str
    number: int
    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the only descriptor drops the flock
            self.fd = -1


_next: dict[str, int] = {}  # per kind: where this process's next search starts


def claim(kind: str, numbers: Sequence[int] | None = None) -> Claim:
    """A number of the kind's pool (or of `numbers`) that no other claim holds and that is usable.

    The search starts after the number this process claimed last (the first one at the pool's
    start, so claims stay low), and successive claims differ even when earlier ones were released."""
    if kind not in POOLS:
        raise ClaimError(f"unknown claim kind {kind!r}; known: {', '.join(POOLS)}")
    pool = POOLS[kind]
    numbers = pool.numbers if numbers is None else numbers
    folder = claims_dir()
    start = _next.get(kind, 0)
    for k in range(len(numbers)):
        number = numbers[(start + k) % len(numbers)]
        fd = os.open(folder / f"{kind}-{number}", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if not pool.usable(number):
            os.close(fd)
            continue
        _next[kind] = (start + k + 1) % len(numbers)
        return Claim(kind, number, fd)
    raise ClaimError(f"every {kind} in {min(numbers)}..{max(numbers)} is claimed already "
                     f"(claims in {folder})")


_held: list[Claim] = []


def hold(kind: str, numbers: Sequence[int] | None = None) -> int:
    """claim(), held until this process exits: for a run's launcher, which lives as long as its run."""
    _held.append(claim(kind, numbers))
    return _held[-1].number


@dataclass
class Claims:
    """Claims released together: a test's, or one run's within a process that makes many."""
    taken: list[Claim] = field(default_factory=list)

    def take(self, kind: str, numbers: Sequence[int] | None = None) -> int:
        self.taken.append(claim(kind, numbers))
        return self.taken[-1].number

    def release(self) -> None:
        for c in self.taken:
            c.release()
        self.taken.clear()

    def __enter__(self) -> "Claims":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
