"""A test not marked `slow` (or `docker`) is a unit test: it may not start a process or a DDS
participant. One that does fails, naming what it started, so it cannot slip into `make test-fast`
unnoticed: mark it slow."""
from __future__ import annotations

import multiprocessing.process
import os
import subprocess
from typing import Any, Callable

import pytest
from cyclonedds.domain import DomainParticipant

# What starts a process or joins a DDS domain: subprocess.run, multiprocessing's spawn and fork
# contexts and DdsNode all go through one of these.
GUARDED: list[tuple[Any, str, str]] = [
    (subprocess.Popen, "__init__", "subprocess.Popen"), (multiprocessing.process.BaseProcess, "start", "a multiprocessing Process"),
    (os, "fork", "os.fork"), (os, "posix_spawn", "os.posix_spawn"), (os, "posix_spawnp", "os.posix_spawnp"),
    (os, "system", "os.system"), (DomainParticipant, "__init__", "a DDS participant")]
STARTED = pytest.StashKey[list[str]]()
ORIGINALS = pytest.StashKey[list[tuple[Any, str, Any]]]()


class StartedInUnitTest(RuntimeError):
    """A unit test started a process or a DDS participant."""


def is_unit_test(item: pytest.Item) -> bool:
    return item.get_closest_marker("slow") is None and item.get_closest_marker("docker") is None


def refusal(item: pytest.Item, label: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        argv = kwargs.get("args", args[1] if label == "subprocess.Popen" and len(args) > 1 else None)
        item.stash[STARTED].append(label if argv is None else f"{label}({argv!r})"[:200])
        raise StartedInUnitTest(f"a test not marked slow started {label}")
    return refuse


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    if is_unit_test(item):
        item.stash[STARTED] = []
        item.stash[ORIGINALS] = [(owner, name, getattr(owner, name)) for owner, name, _ in GUARDED
                                 if hasattr(owner, name)]
        for owner, name, label in GUARDED:
            if hasattr(owner, name):
                setattr(owner, name, refusal(item, label))
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    try:
        return (yield)
    finally:
        if ORIGINALS in item.stash:
            for owner, name, original in item.stash[ORIGINALS]:
                setattr(owner, name, original)
            del item.stash[ORIGINALS]
            if item.stash[STARTED]:
                pytest.fail(f"a unit test (not marked slow) started {'; '.join(dict.fromkeys(item.stash[STARTED]))}: "
                            "mark it @pytest.mark.slow", pytrace=False)
