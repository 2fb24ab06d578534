"""Data multicast on the private bridge of network namespaces (root): one send of the model
reaches every client, the result is bit-identical to unicast, and nothing is multicast on
loopback or on an interface outside the testbed's 198.18.0.0/15 range."""
import csv
import ipaddress
import json
import os
import socket
from pathlib import Path

import pytest

from commlab.config.schema import PRIVATE_MULTICAST_NET, ConfigError, DdsSection
from commlab.dds import DdsSettings
from commlab.fl.checkpoint import load_checkpoint
from commlab.fl.run import build_configs, parse_args
from commlab.models import weights_digest
from commlab.testbed.netns_run import run_fl_netns

CLIENTS, ROUNDS, HIDDEN = 3, 3, 32  # a small CNN (hidden 32: 1.0 MB of fp32) keeps the shaped run short
NET = 243  # 198.19.243.0/24: a bridge of its own


def fl_run(tmp_path: Path, multicast: str) -> Path:
    ctl, clients = build_configs(parse_args([
        "--codec", "fp32", "--downlink-codec", "fp32", "--multicast", multicast, "--clients", str(CLIENTS),
        "--rounds", str(ROUNDS), "--samples-per-round", "128", "--train-subset", "2000", "--test-subset", "300",
        "--profile", "10mbit", "--results-dir", str(tmp_path), "--run-id", f"mc-{multicast}"]))
    for cfg in (ctl, *clients):
        cfg["model"]["params"] = {"hidden": HIDDEN}
    return run_fl_netns(ctl, clients, "10mbit", net=NET)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if os.geteuid() != 0:
        print("SKIP reason: network namespaces need root")
        pytest.skip("network namespaces need root")
    base = tmp_path_factory.mktemp("multicast")
    return {mode: fl_run(base, mode) for mode in ("off", "data")}


def rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "rounds.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_multicast_and_unicast_give_the_same_model(runs):
    digests = {mode: weights_digest(load_checkpoint(run_dir / "checkpoints").weights) for mode, run_dir in runs.items()}
    assert digests["off"] == digests["data"]


@pytest.mark.slow
def test_multicast_sends_the_model_once_for_all_clients(runs):
    model_bytes = json.loads((runs["data"] / "manifest.json").read_text())["initial_model_bytes"]
    for mode, run_dir in runs.items():
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["multicast"] == mode
        for row in rows(run_dir)[1:]:  # round 1 may carry repairs of the initial broadcast
            down, iface = int(row["bytes_down"]), int(row["iface_bytes_down"])
            if mode == "data":
                assert int(row["bytes_down_multicast"]) > 0
                # On the wire: once, plus whatever DDS repaired for a client that missed fragments
                # (a loaded machine drops some); unicast to CLIENTS would be CLIENTS times the model.
                assert down <= 1.05 * model_bytes and iface <= 1.5 * model_bytes, row
            else:
                assert int(row["bytes_down_multicast"]) == 0
                assert down >= CLIENTS * 0.95 * model_bytes and iface >= CLIENTS * 0.95 * model_bytes, row
    # The addresses the nodes used (the controller's peers: every client) are in the private range.
    peers = json.loads((runs["data"] / "manifest.json").read_text())["config"]["dds"]["peers"]
    assert len(peers) == CLIENTS and all(ipaddress.ip_address(a) in PRIVATE_MULTICAST_NET for a in peers)


@pytest.mark.parametrize("interface", ["lo", *[n for _, n in socket.if_nameindex() if n != "lo"][:1]])
def test_multicast_is_refused_outside_the_private_range(interface):
    from commlab.config.schema import interface_ipv4
    address = interface_ipv4(interface)
    if address is not None and address in PRIVATE_MULTICAST_NET:
        pytest.skip(f"{interface} is inside {PRIVATE_MULTICAST_NET}")
    with pytest.raises(ConfigError, match=r"dds.multicast: data is only allowed on a private network in 198.18.0.0/15"):
        DdsSection(domain_id=1, interface=interface, multicast="data").check_host()
    DdsSection(domain_id=1, interface=interface, multicast="off", peers=("127.0.0.1",)).check_host()


def test_multicast_settings_in_the_cyclone_xml():
    assert "<AllowMulticast>false</AllowMulticast>" in DdsSettings(domain_id=1).to_xml()
    xml = DdsSettings(domain_id=1, interface="eth0", peers=("198.19.1.11",), multicast="data").to_xml()
    assert "<AllowMulticast>true</AllowMulticast>" in xml and "<MulticastTimeToLive>1</MulticastTimeToLive>" in xml
    assert '<Peer address="198.19.1.11"/>' in xml  # unicast discovery stays for networks without multicast
    with pytest.raises(ValueError, match="multicast off needs unicast peers"):
        DdsSettings(domain_id=1, interface="eth0", peers=(), multicast="off")
