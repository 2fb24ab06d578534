"""commlab.runs.claims: a number claimed by one process (a run, a test suite) is held by no other until
released or until the holder ends, even by SIGKILL; each claim of a process starts its search
after the last, bound ports are passed over, and a full pool is one error naming it."""
from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest

from commlab.runs import claims as claims_module
from commlab.runs.claims import ClaimError, Claims, claim


@pytest.fixture(autouse=True)
def own_claims_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(claims_module.CLAIMS_DIR_ENV, str(tmp_path / "claims"))


def test_a_held_number_is_not_given_again_until_released():
    first = claim("domain", [5, 6])
    second = claim("domain", [5, 6])
    assert {first.number, second.number} == {5, 6}
    with pytest.raises(ClaimError, match=r"^every domain in 5\.\.6 is claimed already \(claims in .*claims\)$"):
        claim("domain", [5, 6])
    first.release()
    assert claim("domain", [5, 6]).number == first.number


def test_successive_claims_of_a_process_differ_even_after_a_release():
    with Claims() as taken:
        numbers = [taken.take("domain") for _ in range(3)]
        taken.release()
        numbers.append(taken.take("domain"))
    assert len(set(numbers)) == 4 and all(1 <= n <= 232 for n in numbers)


def test_a_bound_port_is_passed_over():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        busy = s.getsockname()[1]
        assert claim("port", [busy, busy + 1]).number == busy + 1


def test_unknown_kind_is_one_line():
    with pytest.raises(ClaimError, match=r"^unknown claim kind 'domains'; known: domain, port, lab, project$"):
        claim("domains")


HOLDER = """
import sys, time
from commlab.runs.claims import hold
print(hold("domain", [int(sys.argv[1])]), flush=True)
time.sleep(60)
"""


@pytest.mark.slow
def test_another_process_holds_it_until_it_is_killed():
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, "7"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "7"
        with pytest.raises(ClaimError, match="every domain in 7..7 is claimed already"):
            claim("domain", [7])
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        assert claim("domain", [7]).number == 7  # the kernel dropped the dead holder's lock
    finally:
        holder.kill()
        holder.wait()
