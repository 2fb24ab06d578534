"""The test-only fault points: a node told to halt at a point stops there, says so, and goes on
only when released (or dies when killed); every other point passes straight through."""
import os
import signal
import subprocess
import sys

import pytest

from commlab.runs.fault_points import HALT_ENV, halt_at

PROGRAM = ("from commlab.runs.fault_points import halt_at\n"
           "halt_at('before_upload', 1)\nprint('round 1 uploaded', flush=True)\n"
           "halt_at('before_upload', 2)\nprint('round 2 uploaded', flush=True)\n")


def test_no_halt_without_the_variable(monkeypatch):
    monkeypatch.delenv(HALT_ENV, raising=False)
    halt_at("before_upload", 1)  # returns at once


@pytest.mark.slow
def test_halts_only_at_its_point_until_released():
    env = {**os.environ, HALT_ENV: "before_upload@2"}
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "round 1 uploaded\n"
        assert proc.stdout.readline() == "HALTED at before_upload@2\n"
        assert proc.poll() is None
        proc.send_signal(signal.SIGUSR1)
        assert proc.stdout.read().splitlines() == ["RESUMED at before_upload@2", "round 2 uploaded"]
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
