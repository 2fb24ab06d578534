"""Timeouts that a slow transfer can exceed follow its progress, and a round nobody can finish
ends at once: unit tests with an injected clock, and one process test at a fault point."""
from __future__ import annotations

import json
import signal
import sys

import numpy as np
import pytest

from commlab.codecs import get_codec
from commlab.dds.stats import CommStats, Progress
from commlab.fl.collect import RoundFailed, UpdateCollector
from commlab.fl.messages import ClientUpdate
from commlab.fl.run import build_configs, parse_args
from commlab.runs.roster import fl_roster

CLIENTS = ["client-0", "client-1"]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_counts_idle_time_from_the_last_chunk():
    clock, stats = Clock(), CommStats()
    progress = Progress(stats, clock)
    clock.now = 50
    assert progress.idle_s() == 50
    stats.add(chunks_received=1)  # a chunk that did not join a message (e.g. failed authentication)
    assert progress.idle_s() == 50
    stats.add(chunks_received=1, chunks_accepted=1)
    assert progress.idle_s() == 0
    clock.now = 80
    assert progress.idle_s() == 30


class Link:
    """A fake transport on the injected clock: receive(t) lets t pass; `chunks` says at which times
    a chunk arrives (progress), `updates` when a whole update is handed out."""

    def __init__(self, clock: Clock, stats: CommStats, chunks: list[float], updates: dict[float, ClientUpdate]):
        self.clock, self.stats, self.chunks, self.updates = clock, stats, sorted(chunks), dict(updates)

    def receive(self, timeout_s: float):
        end = self.clock.now + timeout_s
        while self.chunks and self.chunks[0] <= end:
            self.clock.now = max(self.clock.now, self.chunks.pop(0))
            self.stats.add(chunks_received=1, chunks_accepted=1)
        due = [t for t in self.updates if t <= end]
        if due:
            self.clock.now = max(self.clock.now, min(due))
            return self.updates.pop(min(due))
        self.clock.now = end
        return None


def update(client: str, rnd: int = 1) -> ClientUpdate:
    return ClientUpdate(round=rnd, client_id=client, num_samples=5,
                        payload=get_codec("int8").encode(np.ones(64, np.float32)))


def collect(link: Link, clock: Clock, alive=None, **limits):
    c = UpdateCollector(1, CLIENTS, get_codec("int8"), 64, lambda line: None)
    args = {"deadline_s": 10.0, "hard_limit_s": 30.0, "min_clients": 1, **limits}
    return c.collect(link.receive, clock(), idle_s=Progress(link.stats, clock).idle_s, alive=alive,
                     clock=clock, **args)


def test_an_update_still_arriving_outlasts_the_deadline_and_the_hard_limit():
    # client-0 answers at once; client-1's update streams in, a chunk a second, until t=100.
    clock, stats = Clock(), CommStats()
    link = Link(clock, stats, chunks=[float(t) for t in range(1, 100)],
                updates={0.5: update("client-0"), 100.0: update("client-1")})
    replies = collect(link, clock)
    assert replies.participants() == CLIENTS and clock.now == 100.0


def test_the_deadline_closes_the_round_once_chunks_stop():
    clock, stats = Clock(), CommStats()
    link = Link(clock, stats, chunks=[1.0, 2.0, 3.0], updates={0.5: update("client-0")})  # client-1 stalls at t=3
    replies = collect(link, clock)
    assert replies.participants() == ["client-0"] and 13.0 <= clock.now < 14.0
    assert ("client-1", "no valid update by the deadline") in replies.failures


def test_the_hard_limit_counts_from_the_last_chunk():
    clock, stats = Clock(), CommStats()
    link = Link(clock, stats, chunks=[float(t) for t in range(1, 41)], updates={})
    with pytest.raises(RoundFailed, match="hard limit of 30s"):
        collect(link, clock)
    assert 70.0 <= clock.now < 71.0


def test_a_round_no_alive_client_can_finish_fails_after_the_grace():
    clock, stats = Clock(), CommStats()
    link = Link(clock, stats, chunks=[], updates={})
    alive = lambda: {"client-1", "controller"} if clock.now < 20 else {"controller"}  # noqa: E731
    with pytest.raises(RoundFailed, match=r"too few clients can take part for min_clients=1: "
                                          r"client-0, client-1 gone \(exited or lease expired\) for 5s"):
        collect(link, clock, alive=alive, deadline_s=100.0, hard_limit_s=600.0, lost_grace_s=5.0)
    assert 25.0 <= clock.now < 26.0


def test_a_client_that_comes_back_within_the_grace_keeps_the_round_going():
    clock, stats = Clock(), CommStats()
    link = Link(clock, stats, chunks=[], updates={40.0: update("client-1")})
    alive = lambda: {"client-1"} if not 20 <= clock.now < 24 else set()  # noqa: E731  (a restart)
    replies = collect(link, clock, alive=alive, deadline_s=100.0, hard_limit_s=600.0, lost_grace_s=5.0,
                      min_clients=1)
    assert replies.participants() == ["client-1"]


def test_answered_clients_count_even_after_they_leave():
    clock, stats = Clock(), CommStats()
    link = Link(clock, stats, chunks=[], updates={1.0: update("client-0")})
    replies = collect(link, clock, alive=lambda: set(), deadline_s=10.0, lost_grace_s=2.0, min_clients=1)
    assert replies.participants() == ["client-0"] and clock.now >= 10.0


@pytest.mark.slow
def test_controller_fails_with_one_line_when_every_client_is_gone(tmp_path, domain):
    """Both clients killed before their upload: the controller ends on its own, long before the
    hard limit, with one error line and a failed manifest."""
    from commlab.runs.launch import NODES_DIR
    from commlab.testbed.node_procs import NodeProcess
    ctl_cfg, client_cfgs = build_configs(parse_args([
        "--codec", "int8_sparse", "--clients", "2", "--rounds", "2", "--deadline", "30",
        "--samples-per-round", "128", "--batch-size", "32", "--train-subset", "2000", "--test-subset", "300",
        "--results-dir", str(tmp_path / "results"), "--run-id", "gone",
        "--domain-id", str(domain)]))
    ctl_cfg.update(round_hard_limit_s=600.0, lost_client_grace_s=3.0)
    procs = {}
    for node, cfg in zip(fl_roster(2), [ctl_cfg, *client_cfgs]):
        path = tmp_path / f"{node.name}.json"
        path.write_text(json.dumps(cfg))
        procs[node.name] = NodeProcess(tmp_path, node.name, [sys.executable, str(NODES_DIR / node.script), str(path)],
                                None if node.name == "controller" else "before_upload@1")
    try:
        for name in ("client-0", "client-1"):
            procs[name].wait_for(r"HALTED at before_upload@1")
            procs[name].proc.send_signal(signal.SIGKILL)
        ctl = procs["controller"]
        assert ctl.finish(timeout=60) == 1, ctl.text()
    finally:
        for proc in procs.values():
            proc.stop()
    errors = [line for line in ctl.text().splitlines() if "failed" in line]
    assert len(errors) == 1 and "RoundFailed: round 1: too few clients can take part" in errors[0], ctl.text()
    assert "Traceback" not in ctl.text()
    manifest = json.loads((tmp_path / "results" / "gone" / "manifest.json").read_text())
    assert manifest["status"].startswith("failed: RoundFailed: round 1: too few clients")
