"""Nodes forked from the zygote (commlab.runs.zygote) behave as `python PROGRAM ARGS` would: their
arguments, environment, folder and output, their exit codes and signals, their own random state."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from commlab.runs.zygote import Zygote, ZygoteError, forkable

pytestmark = pytest.mark.slow

PROGRAM = '''import os, random, sys
import numpy as np
print("argv", sys.argv[1:], "cwd", os.getcwd(), "env", os.environ.get("ZYGOTE_TEST"), "path0", sys.path[0])
print("random", random.random(), np.random.random())
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
'''


@pytest.fixture(scope="module")
def zygote():
    with Zygote() as z:
        yield z


def test_a_fork_runs_the_program_with_its_arguments_environment_folder_and_output(zygote, tmp_path):
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    logs = []
    for i, code in enumerate((0, 3)):
        logs.append(tmp_path / f"out{i}.log")
        with open(logs[-1], "w") as log:
            proc = zygote.spawn([sys.executable, str(program), str(code), "x y"], {**os.environ, "ZYGOTE_TEST": f"v{i}"},
                                log, cwd=str(tmp_path / ".."))
        assert proc.wait(60) == code and proc.poll() == code
    texts = [log.read_text() for log in logs]
    assert f"argv ['0', 'x y'] cwd {tmp_path.parent} env v0 path0 {tmp_path}" in texts[0]
    assert "env v1" in texts[1] and all("to stderr" in t for t in texts)
    randoms = [next(line for line in t.splitlines() if line.startswith("random")) for t in texts]
    assert randoms[0] != randoms[1]  # neither Python's nor numpy's generator is the zygote's copy


def test_an_uncaught_exception_exits_1_with_its_traceback_and_code_strings_run(zygote, tmp_path):
    log = tmp_path / "out.log"
    with open(log, "w") as f:
        failing = zygote.spawn([sys.executable, "-c", "raise ValueError('bad config')"], dict(os.environ), f)
        assert failing.wait(60) == 1
        exiting = zygote.spawn([sys.executable, "-c", "import sys; print(sys.argv); sys.exit(5)", "a"],
                               dict(os.environ), f)
        assert exiting.wait(60) == 5
    text = log.read_text()
    assert "ValueError: bad config" in text and "['-c', 'a']" in text


def test_signals_reach_the_fork_and_its_exit_is_the_signal(zygote, tmp_path):
    with open(tmp_path / "out.log", "w") as log:
        proc = zygote.spawn([sys.executable, "-c", "import time; time.sleep(600)"], dict(os.environ), log)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.5)
    assert proc.poll() is None
    proc.kill()
    assert proc.wait(60) == -signal.SIGKILL


def test_only_python_programs_are_forked(zygote):
    assert forkable([sys.executable, "nodes/client.py", "c.json"]) and forkable([sys.executable, "-c", "pass"])
    assert not forkable([sys.executable, "-m", "commlab.fl.run"]) and not forkable(["ip", "netns", "exec", "x"])
    with pytest.raises(ValueError, match="-m"):
        zygote.spawn([sys.executable, "-m", "x"], {}, 1)


def test_a_zygote_that_died_is_named_when_its_forks_exit_code_is_asked(tmp_path):
    with Zygote() as z, open(tmp_path / "out.log", "w") as log:
        proc = z.spawn([sys.executable, "-c", "import time; time.sleep(600)"], dict(os.environ), log)
        z.proc.kill()
        z.proc.wait()
        os.kill(proc.pid, signal.SIGKILL)  # its exit status went to the dead zygote's adopter
        with pytest.raises(ZygoteError, match=rf"zygote \(pid {z.proc.pid}\) ended .*node pid {proc.pid} ended with an unknown exit code"):
            proc.wait(60)
        with pytest.raises(ZygoteError, match="ended with exit code -9; cannot start"):
            z.spawn([sys.executable, "-c", "pass"], dict(os.environ), log)
