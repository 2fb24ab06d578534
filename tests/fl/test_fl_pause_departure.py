"""Liveness around a pause, without processes or timing. A client whose controller is gone for
good ends with one line, not after its idle timeout: at once when the controller said it was
closing, or once its lease expired and it stayed away for controller_return_s; a controller that
may still come back, or was restarted, is waited for (in-memory topics of test_fl_client, a real
PeerDirectory, loss times set). A controller that stood still while collecting does not count
its own stall against the clients' grace (the injected clock of test_slow_links)."""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from commlab.config.schema import from_dict
from commlab.dds import CommStats, PeerGone
from commlab.dds.announce import Peer, PeerDirectory
from commlab.fl.client import Client, ClientIdle
from commlab.fl.collect import RoundFailed
from commlab.fl.config import ClientConfig
from commlab.fl.messages import Stop
from test_fl_client import Node
from test_slow_links import Clock, Link, collect, update

IDLE_S = 0.5  # the idle timeout: what the client ends with when it cannot tell the controller is gone


def _client(tmp_path, controller: Peer | None, inbox: dict | None = None) -> tuple[Client, list[str]]:
    cfg = from_dict(ClientConfig, {"run_id": "run", "results_dir": str(tmp_path), "dds": {"domain_id": 1},
                                   "client_id": 0, "num_clients": 1, "idle_timeout_s": IDLE_S,
                                   "controller_return_s": 60.0})
    node = Node(inbox or {})
    node.announcer.directory = PeerDirectory("client-0")
    if controller is not None:
        node.announcer.directory.peers["controller"] = controller
    lines: list[str] = []
    return Client(cfg, node, torch.nn.Linear(2, 2), None, {0: np.arange(8)}, lines.append), lines


def _controller(alive: bool, leaving: bool = False, lost_s_ago: float = 0.0) -> Peer:
    info = {"leaving": True} if leaving else {}
    return Peer("controller", "p1", 1, info, alive=alive, lost_at=time.monotonic() - lost_s_ago)


def test_a_client_whose_controller_said_it_was_closing_ends_at_once_naming_it(tmp_path):
    client, _ = _client(tmp_path, _controller(alive=False, leaving=True))
    with pytest.raises(PeerGone) as e:
        client.run()
    assert str(e.value) == ("client-0: the controller left (it said it was closing), and no Stop came: "
                            "the run is over here")
    assert "\n" not in str(e.value)


def test_a_client_ends_once_its_controller_stayed_away_longer_than_controller_return_s(tmp_path):
    client, _ = _client(tmp_path, _controller(alive=False, lost_s_ago=61.0))
    with pytest.raises(PeerGone, match=r"the controller is gone \(its lease expired\) and was not back within 60s"):
        client.run()


@pytest.mark.parametrize("state", [{"alive": False, "lost_s_ago": 1.0}, {"alive": True}, None],
                         ids=["lost-within-return-s", "alive", "not-seen"])
def test_a_controller_that_may_still_come_back_is_waited_for_until_the_idle_timeout(tmp_path, state):
    client, _ = _client(tmp_path, None if state is None else _controller(**state))
    with pytest.raises(ClientIdle):
        client.run()


def test_the_stop_that_came_before_the_controller_left_ends_the_run_normally(tmp_path):
    client, lines = _client(tmp_path, _controller(alive=False, leaving=True),
                            {Stop: [Stop(run_id="run", last_round=3)]})
    client.run()
    assert lines[-1].startswith("stopped on the Stop message: run over after round 3")


def test_a_restarted_controller_replaces_the_lost_one_under_the_same_name(tmp_path):
    directory = PeerDirectory("client-0")
    directory.peers["controller"] = _controller(alive=False, lost_s_ago=61.0)
    assert directory.departed("controller", 60.0) is not None
    directory.peers["controller"] = Peer("controller", "p2", 2, {})  # what a new incarnation's announcement makes
    assert directory.departed("controller", 60.0) is None


class StalledLink(Link):
    """The controller stands still (SIGSTOP) from t=20 to t=80; meanwhile its view of the clients expires."""

    def receive(self, timeout_s: float):
        if 20.0 <= self.clock.now < 80.0:
            self.clock.now = 80.0
        return super().receive(timeout_s)


def test_a_stall_of_the_controller_does_not_count_against_the_clients_grace():
    clock, stats = Clock(), CommStats()
    link = StalledLink(clock, stats, chunks=[], updates={90.0: update("client-1")})
    # Seen gone from t=10 (before the stall) until rediscovered 5 s after the controller resumed.
    alive = lambda: set() if 10 <= clock.now < 85 else {"client-1"}  # noqa: E731
    replies = collect(link, clock, alive=alive, deadline_s=100.0, hard_limit_s=600.0, lost_grace_s=30.0)
    assert replies.participants() == ["client-1"]


def test_clients_gone_after_the_controller_resumed_still_fail_the_round_after_the_grace():
    clock, stats = Clock(), CommStats()
    link = StalledLink(clock, stats, chunks=[], updates={})
    with pytest.raises(RoundFailed, match=r"client-0, client-1 gone \(exited or lease expired\) for 30s"):
        collect(link, clock, alive=lambda: set(), deadline_s=100.0, hard_limit_s=600.0, lost_grace_s=30.0)
    assert 110.0 <= clock.now < 111.0  # the grace counted from the resume at t=80
