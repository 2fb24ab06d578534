"""Updates signed with the key of the client they name (commlab.fl.update_identity): a host speaks
for its own logical clients only, each under its own key; any change to the update breaks the tag."""
import dataclasses

import numpy as np
import pytest

from commlab.codecs import get_codec
from commlab.dds.auth import make_keyrings
from commlab.fl import update_identity
from commlab.fl.collect import UpdateCollector
from commlab.fl.messages import ClientUpdate
from commlab.runs.roster import fl_identities


@pytest.fixture
def rings():
    nodes = ["controller", "clients-0", "clients-1"]
    return make_keyrings("run-a", nodes, trusted={"controller"}, identities=fl_identities(4, procs=2))


def update(client="client-2", **kw):
    return ClientUpdate(**{"round": 3, "client_id": client, "num_samples": 60, "payload": b"frame" * 100,
                           "compute_s": 1.5, **kw})


def test_a_host_signs_for_its_own_clients_and_the_controller_checks(rings):
    assert fl_identities(4, procs=2) == {"clients-0": ["client-0", "client-2"], "clients-1": ["client-1", "client-3"]}
    signed = update_identity.sign(rings["clients-0"], update())
    assert signed.identity_tag and update_identity.problem(rings["controller"], signed) is None


def test_a_host_cannot_sign_for_another_hosts_client(rings):
    unsigned = update_identity.sign(rings["clients-0"], update("client-1"))  # no key for client-1
    assert unsigned.identity_tag == ""
    assert "no identity tag" in update_identity.problem(rings["controller"], unsigned)
    # client-0's key on client-1's update (a host lending one client's key to another)
    key = rings["clients-0"].key_of("client-0")
    forged = dataclasses.replace(update("client-1"), identity_tag=update_identity.identity_tag(
        key, update_identity.signed_bytes(update("client-1"))))
    assert update_identity.problem(rings["controller"], forged) == "not signed with the key of the client it names"


@pytest.mark.parametrize("change", [dict(payload=b"other" * 100), dict(num_samples=10**6), dict(round=4),
                                    dict(compute_s=0.1), dict(client_id="client-0")])
def test_any_change_breaks_the_tag(rings, change):
    signed = update_identity.sign(rings["clients-0"], update())
    assert update_identity.problem(rings["controller"], dataclasses.replace(signed, **change)) is not None


def test_signed_as_received_and_unauthenticated_runs(rings):
    # An int in a float field reaches the controller as a float: the tag is over what it reads.
    sent = update_identity.sign(rings["clients-0"], dataclasses.replace(update(), compute_s=2))
    received = dataclasses.replace(sent, compute_s=2.0)
    assert update_identity.problem(rings["controller"], received) is None
    assert update_identity.sign(None, update()) == update() and update_identity.problem(None, update()) is None


def test_the_collector_rejects_an_unsigned_update(rings):
    codec = get_codec("fp32")
    collector = UpdateCollector(3, ["client-0", "client-2"], codec, 10, lambda line: None,
                                lambda c: "clients-0", lambda m: update_identity.problem(rings["controller"], m))
    frame = codec.encode(np.ones(10, np.float32))
    collector.offer(update_identity.sign(rings["clients-0"], update("client-0", payload=frame)), "clients-0")
    collector.offer(update("client-2", payload=frame), "clients-0")
    assert collector.replies.participants() == ["client-0"]
    assert collector.replies.failures == [("client-2", "not signed by the client it names (no identity tag)")]
