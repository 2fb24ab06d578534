"""The client's command handling, on in-memory topics (no transport, no training, no timing)."""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from commlab.config.schema import from_dict
from commlab.dds import CommStats
from commlab.fl.client import Client
from commlab.fl.config import ClientConfig
from commlab.fl.messages import ModelRequest, Stop, TrainCmd


class Topic:
    """Hands out the messages queued for one topic, then None at once."""

    def __init__(self, messages: list):
        self.messages = list(messages)

    def receive(self, timeout_s: float | None = None):
        return self.messages.pop(0) if self.messages else None

    def publish(self, msg, to=()) -> None:
        self.messages.append(msg)


class Announcer:
    """How often each peer came back after it was lost (commlab.dds.announce)."""

    def __init__(self) -> None:
        self.returned: dict[str, int] = {}

    def returns(self, name: str) -> int:
        return self.returned.get(name, 0)


class Node:
    def __init__(self, inbox: dict[type, list]):
        self.inbox, self.stats, self.announcer = inbox, CommStats(), Announcer()
        self.settings = SimpleNamespace(keyring=None)

    def subscriber(self, cls: type) -> Topic:
        return Topic(self.inbox.get(cls, []))

    def publisher(self, cls: type) -> Topic:
        return Topic([])

    def barrier(self, expected: set[str], timeout_s: float) -> None:
        pass


def _cmd(rnd: int, epochs: int, run_id: str = "run") -> TrainCmd:
    return TrainCmd(round=rnd, epochs=epochs, lr=0.1, seed=1, subset_size=8, codec="fp32", run_id=run_id)


def test_train_cmd_without_epochs_is_rejected_and_the_client_runs_on_until_stop(tmp_path):
    cfg = from_dict(ClientConfig, {"run_id": "run", "results_dir": str(tmp_path), "dds": {"domain_id": 1},
                                   "client_id": 0, "num_clients": 1})
    # The Stop is queued from the start: the commands already waiting still run first.
    inbox = {TrainCmd: [_cmd(1, 0), _cmd(1, -2), _cmd(1, 1, run_id="other"), _cmd(1, 1)],
             Stop: [Stop(run_id="other", last_round=9), Stop(run_id="run", last_round=1)]}
    lines: list[str] = []
    client = Client(cfg, Node(inbox), torch.nn.Linear(2, 2), None, {0: np.arange(8)}, lines.append)
    ran: list[TrainCmd] = []
    client.run_round = ran.append
    client.run()
    assert ran == [_cmd(1, 1)]
    assert lines == [
        "rejected TrainCmd for round 1: epochs must be >= 1, got 0 (a run ends with a Stop message)",
        "rejected TrainCmd for round 1: epochs must be >= 1, got -2 (a run ends with a Stop message)",
        "ignoring TrainCmd of run 'other' (this is run 'run')",
        "ignoring Stop of run 'other' (this is run 'run')",
        "stopped on the Stop message: run over after round 1 (completed), replica empty"]


@pytest.mark.slow
def test_the_client_does_not_import_the_controller():
    check = "import sys, commlab.fl.client; print(sorted(m for m in sys.modules if m.startswith('commlab.fl.')))"
    loaded = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True).stdout
    assert "'commlab.fl.messages'" in loaded and "'commlab.fl.controller'" not in loaded, loaded


def test_an_update_the_codec_refuses_is_one_line_and_the_client_goes_on(tmp_path, monkeypatch):
    import commlab.fl.client as client_module
    cfg = from_dict(ClientConfig, {"run_id": "run", "results_dir": str(tmp_path), "dds": {"domain_id": 1},
                                   "client_id": 0, "num_clients": 1})
    model = torch.nn.Linear(2, 2)
    diverged = np.full(6, np.inf, np.float32)  # what a diverged error-feedback residual looks like
    monkeypatch.setattr(client_module, "local_update", lambda *a, **k: (diverged, 0.0))
    lines: list[str] = []
    client = Client(cfg, Node({}), model, None, {0: np.arange(8)}, lines.append)
    client._wait_for_model = lambda rnd, deadline_s: 0.0
    client.replica.weights, client.replica.round = np.zeros(6, np.float32), 0
    sent = client.update_pub.messages
    cmd = _cmd(1, 1)
    cmd.codec = "int8"
    client.run_round(cmd)
    assert sent == [] and lines[-1].startswith("round 1: no update sent, the codec refused it: int8")


def test_a_command_for_the_round_already_uploaded_gets_the_same_update_again(tmp_path, monkeypatch):
    """The controller lost the update (or a restarted one asks again): the same bytes go out, the
    client does not train again (its compression memory has moved on since)."""
    import commlab.fl.client as client_module
    cfg = from_dict(ClientConfig, {"run_id": "run", "results_dir": str(tmp_path), "dds": {"domain_id": 1},
                                   "client_id": 0, "num_clients": 1})
    trained: list[int] = []

    def local_update(*args, **kwargs):
        trained.append(1)
        return np.full(6, 0.5 * len(trained), np.float32), 0.0
    monkeypatch.setattr(client_module, "local_update", local_update)
    client = Client(cfg, Node({}), torch.nn.Linear(2, 2), None, {0: np.arange(8)}, lambda line: None)
    client._wait_for_model = lambda rnd, deadline_s: 0.0
    client.replica.weights, client.replica.round = np.zeros(6, np.float32), 0
    sent = client.update_pub.messages
    client.run_round(_cmd(1, 1))
    client.run_round(_cmd(1, 1))
    assert len(trained) == 1 and len(sent) == 2 and sent[0] is sent[1]
    client.replica.round = 1
    client.run_round(_cmd(2, 1))
    assert len(trained) == 2 and sent[2].round == 2 and sent[2].payload != sent[0].payload


def test_a_controller_that_comes_back_is_told_which_model_the_client_holds(tmp_path):
    cfg = from_dict(ClientConfig, {"run_id": "run", "results_dir": str(tmp_path), "dds": {"domain_id": 1},
                                   "client_id": 0, "num_clients": 1})
    node = Node({})
    client = Client(cfg, node, torch.nn.Linear(2, 2), None, {0: np.arange(8)}, lambda line: None)
    requests = client.request_pub.messages
    client._greet_returned_controller()
    assert requests == []  # never lost: nothing to say
    node.announcer.returned["controller"] = 1
    client._greet_returned_controller()
    client._greet_returned_controller()
    assert requests == [ModelRequest(run_id="run", client_id="client-0", have="", rejoined=True)]
