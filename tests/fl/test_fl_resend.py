"""The controller's side of a node that comes back: the round's command goes again to a node with
clients yet to answer, once per return or rejoin, never to one whose clients all answered."""
from types import SimpleNamespace

import numpy as np

from commlab.fl.collect import OpenRound, UpdateCollector
from commlab.fl.controller import Controller
from commlab.fl.messages import TrainCmd
from commlab.fl.strategy import FitRes


def controller_with(returns: dict[str, int]) -> tuple[SimpleNamespace, list]:
    sent: list = []
    cmd = TrainCmd(round=2, epochs=1, lr=0.1, subset_size=8, codec="fp32", run_id="run")
    collector = UpdateCollector(2, ["client-0", "client-1", "client-2"], None, 1, lambda line: None)
    collector.replies.results.append(FitRes("client-0", 8, np.zeros(1, np.float32)))
    ctl = SimpleNamespace(
        open_round=OpenRound(cmd, collector, dict.fromkeys(returns, 0)),
        cfg=SimpleNamespace(node_of=lambda client: {"client-2": "host-b"}.get(client, client)),
        node=SimpleNamespace(announcer=SimpleNamespace(returns=lambda node: returns.get(node, 0))),
        cmd_pub=SimpleNamespace(publish=lambda msg, to=(): sent.append((msg.clients, set(to)))),
        log=lambda line: None)
    return ctl, sent


def test_the_command_goes_again_only_to_nodes_that_came_back_or_rejoined_with_clients_to_answer():
    returns = {"client-0": 0, "client-1": 0, "host-b": 0}
    ctl, sent = controller_with(returns)
    Controller.resend_to_returned(ctl)
    assert sent == []  # nobody was lost
    returns["client-0"] = returns["client-1"] = 1
    Controller.resend_to_returned(ctl)
    Controller.resend_to_returned(ctl)
    assert sent == [("client-1", {"client-1"})]  # client-0 already answered; once per return
    ctl.open_round.asked.add("host-b")  # a host of logical clients said it rejoined
    Controller.resend_to_returned(ctl)
    assert sent[1:] == [("client-2", {"host-b"})]
