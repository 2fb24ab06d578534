"""A DDP rank paused for longer than its DDS lease (SIGSTOP, then SIGCONT) rejoins the run, and
every rank ends each epoch with the same model as without the pause: what the others wrote to it
meanwhile, and what it wrote to them, is written again when asked (commlab.dds.resend). The pause
starts at a defined point of the rank's protocol and ends only after every other rank has logged
it as lost, so it always outlasts the lease."""
import os
import re
import signal
import time

import pytest

from commlab.runs.claims import Claims
from commlab.testbed.node_procs import NodeProcess, start_ddp

# Seconds the rank is paused; `make chaos` adds a pause of 30 leases (COMMLAB_PAUSES=8,60).
PAUSES = [float(s) for s in os.environ.get("COMMLAB_PAUSES", "8").split(",")]
RUN_S, STEP_S, HALT_S = 300.0, 60.0, 600.0  # hang guards: a run's end, each wait for a log line,
# reaching the fault point (three processes that import torch start in minutes on a loaded machine)
# The first test of a method also runs its undisturbed run, and every guard must fire
# before pytest's own timeout, whose message would not say which node hung.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * RUN_S + HALT_S + 2 * STEP_S + max(PAUSES) + RUN_S)]
EPOCH = r"\[worker (\d)\] epoch (\d+): .* model ([0-9a-f]{16})"
WORLD = 3
# dense: the ring allreduce (two rings of blocks); int8: an allgather of frames.
METHODS = ("dense", "int8")


def epochs(procs: list[NodeProcess]) -> list[tuple[str, str, str]]:
    return sorted(t for p in procs for t in re.findall(EPOCH, p.text()))


def finish(procs: list) -> None:
    try:
        for p in procs:
            assert p.finish(RUN_S) == 0, p.text()[-3000:]
    finally:
        for p in procs:
            p.stop()


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory):
    """method -> per-epoch model hashes of each rank in its run without a pause (run when first
    asked for, so that a selection of one method runs only that method's)."""
    out: dict[str, list[tuple[str, str, str]]] = {}

    def hashes(method: str) -> list[tuple[str, str, str]]:
        if method not in out:
            with Claims() as claims:
                procs = start_ddp(tmp_path_factory.mktemp(f"undisturbed-{method}"), method, claims.take("domain"))
                finish(procs)
            out[method] = epochs(procs)
            assert len(out[method]) == 2 * WORLD and len({h for _, _, h in out[method]}) == 2  # ranks agree
        return out[method]
    return hashes


@pytest.mark.parametrize("pause_s", PAUSES)
@pytest.mark.parametrize("method", METHODS)
def test_a_paused_rank_rejoins_and_every_epoch_ends_with_the_same_model(tmp_path, undisturbed, method, pause_s,
                                                                      domain):
    expected = undisturbed(method)
    point = "before_exchange@12"  # the second epoch's third step (10 steps per epoch)
    procs = start_ddp(tmp_path, method, domain, halt={1: point})
    paused, others = procs[1], [procs[0], procs[2]]
    try:
        paused.wait_for(f"HALTED at {point}", timeout=HALT_S)
        paused.proc.send_signal(signal.SIGSTOP)
        start_s = time.monotonic()
        for p in others:
            p.wait_for("peer 'worker-1' lost", timeout=STEP_S)
        time.sleep(max(0.0, pause_s - (time.monotonic() - start_s)))
        paused.proc.send_signal(signal.SIGCONT)
        paused.proc.send_signal(signal.SIGUSR1)
        for p in others:
            p.wait_for("peer 'worker-1' is back", timeout=STEP_S)
    except BaseException:
        for p in procs:
            p.stop()
        raise
    finish(procs)
    assert epochs(procs) == expected
