"""A node paused for longer than its DDS lease (SIGSTOP, then SIGCONT: a loaded host, a VM pause,
a long collection) rejoins the run, and the run ends with the same model, round by round, as
without the pause. Each pause starts at a defined point of the node's protocol and ends only
after every peer has logged the node as lost, so it always outlasts the lease."""
import os
import re
import signal
import time

import pytest

from commlab.runs.claims import Claims
from commlab.testbed.node_procs import start_fl

# Seconds each node is paused; `make chaos` adds a pause of 30 leases (COMMLAB_PAUSES=8,60).
PAUSES = [float(s) for s in os.environ.get("COMMLAB_PAUSES", "8").split(",")]
RUN_S, STEP_S, HALT_S = 240.0, 60.0, 600.0  # hang guards: a run's end, each wait for a log line,
# reaching the fault point (three processes that import torch start in minutes on a loaded machine)
# The first test also runs the module fixture's undisturbed run, and every guard must fire before
# pytest's own timeout, whose message would not say which node hung.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(RUN_S + HALT_S + 2 * STEP_S + max(PAUSES) + RUN_S)]
MODEL = r"round (\d+)/3 .* model ([0-9a-f]{16})"


def hashes(text: str) -> list[tuple[str, str]]:
    return re.findall(MODEL, text)


def finish_all(procs: dict) -> None:
    try:
        for name, p in procs.items():
            assert p.finish(RUN_S) == 0, f"{name}:\n{p.text()}"
    finally:
        for p in procs.values():
            p.stop()


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory):
    """Per-round model hashes of the run without any pause."""
    with Claims() as claims:
        procs, _, _ = start_fl(tmp_path_factory.mktemp("undisturbed"), domain=claims.take("domain"), rounds=3,
                                deadline=200.0)
        finish_all(procs)
    return hashes(procs["controller"].text())


@pytest.mark.parametrize("pause_s", PAUSES)
@pytest.mark.parametrize("node,point", [("controller", "after_round@1"), ("client-1", "before_upload@2")])
def test_a_paused_node_rejoins_and_the_run_ends_with_the_same_models(tmp_path, undisturbed, node, point, pause_s,
                                                                    domain):
    procs, _, _ = start_fl(tmp_path, domain=domain, rounds=3, deadline=200.0, halt={node: point})
    try:
        paused = procs[node]
        paused.wait_for(f"HALTED at {point}", timeout=HALT_S)
        paused.proc.send_signal(signal.SIGSTOP)
        start = time.monotonic()
        for name, p in procs.items():
            if name != node:
                p.wait_for(f"peer '{node}' lost", timeout=STEP_S)
        time.sleep(max(0.0, pause_s - (time.monotonic() - start)))
        paused.proc.send_signal(signal.SIGCONT)
        paused.proc.send_signal(signal.SIGUSR1)
        # Back for the nodes it talks to: a client talks only to the controller, and another client
        # may finish the run before discovery shows it the paused one again.
        for name, p in procs.items():
            if name != node and "controller" in (name, node):
                p.wait_for(f"peer '{node}' is back", timeout=STEP_S)
    except BaseException:
        for p in procs.values():
            p.stop()
        raise
    finish_all(procs)
    assert hashes(procs["controller"].text()) == undisturbed
