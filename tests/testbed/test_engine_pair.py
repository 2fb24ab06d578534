"""A swarm across two Docker engines: what can be checked without an engine (addresses, dockerd
command lines, the link, placement over labelled engines, unicast discovery, the per-round model
digests the benchmark compares). The two-engine run itself is `make bench-swarm-engines` (root)."""
from __future__ import annotations

import ipaddress
import itertools

import pytest

from commlab.config.builders import dds_settings
from commlab.config.schema import DdsSection
from commlab.runs.roster import fl_roster
from commlab.testbed.backend import round_digests
from commlab.testbed.docker_run import NETS as COMPOSE_NETS
from commlab.testbed.engine_pair import ENGINES, LINK_PREFIX, dockerd_argv, link_commands, main
from commlab.testbed.swarm import ADDRESS_POOL, ADVERTISE_ADDRESS, ENGINE_LABEL, spread, stack_config, stack_spec

BENCH = ipaddress.ip_network("198.18.0.0/15")


def engine_nets(e) -> list[ipaddress.IPv4Network]:
    return [ipaddress.ip_network(e.bip, strict=False), ipaddress.ip_network(e.local_pool)]


def test_every_engine_address_is_in_the_benchmark_range_and_no_two_networks_meet():
    link = ipaddress.ip_network(f"{ENGINES[0].address}/{LINK_PREFIX}", strict=False)
    assert link.subnet_of(BENCH) and all(ipaddress.ip_address(e.address) in link for e in ENGINES)
    assert len({e.address for e in ENGINES}) == 2
    assert all(e.address not in (str(link.network_address), str(link.broadcast_address)) for e in ENGINES)
    nets = [link, ipaddress.ip_network(ADDRESS_POOL), *(n for e in ENGINES for n in engine_nets(e))]
    assert all(n.subnet_of(BENCH) for n in nets)
    assert not any(a.overlaps(b) for a, b in itertools.combinations(nets, 2))
    # ... nor the default engine's bridge, the compose networks, the single-node swarm's advertise link
    others = [ipaddress.ip_network("198.19.0.0/24"), ipaddress.ip_network("198.19.100.0/24"),
              ipaddress.ip_network(f"{ADVERTISE_ADDRESS}/30", strict=False),
              *(ipaddress.ip_network(f"198.19.{n}.0/24") for n in COMPOSE_NETS)]
    assert not any(a.overlaps(b) for a in nets for b in others)


def test_each_dockerd_has_its_own_namespace_roots_pid_file_socket_and_bridge():
    argvs = [dockerd_argv(e) for e in ENGINES]
    for e, argv in zip(ENGINES, argvs):
        assert argv[:3] == ["nsenter", f"--net=/run/netns/{e.netns}", "dockerd"]  # not `ip netns exec`: keeps /sys
        opts = dict(zip(argv[3::2], argv[4::2]))
        assert opts == {"--data-root": str(e.data_root), "--exec-root": str(e.exec_root),
                        "--pidfile": str(e.exec_root / "dockerd.pid"), "-H": e.host, "--bip": e.bip,
                        "--default-address-pool": f"base={e.local_pool},size=24"}
        assert e.host == f"unix://{e.exec_root}/docker.sock" and e.host != "unix:///var/run/docker.sock"
    for key in ("--data-root", "--exec-root", "--pidfile", "-H", "--bip"):
        assert len({argv[argv.index(key) + 1] for argv in argvs}) == 2, key
    assert len({e.netns for e in ENGINES}) == 2 and all(len(e.link) <= 15 for e in ENGINES)  # IFNAMSIZ


def test_the_veth_pair_joins_the_two_namespaces_each_end_addressed_in_its_own():
    cmds = link_commands(*ENGINES)
    a, b = ENGINES
    assert ["ip", "link", "add", a.link, "type", "veth", "peer", "name", b.link] in cmds
    for e in ENGINES:
        assert ["ip", "link", "set", e.link, "netns", e.netns] in cmds
        assert ["ip", "-n", e.netns, "addr", "add", f"{e.address}/{LINK_PREFIX}", "dev", e.link] in cmds
        assert ["ip", "-n", e.netns, "link", "set", e.link, "up"] in cmds
    assert cmds.index(["ip", "netns", "add", b.netns]) < cmds.index(["ip", "link", "set", b.link, "netns", b.netns])


def test_services_are_spread_over_the_labelled_engines_in_roster_order(tmp_path):
    nodes = fl_roster(2)
    assert spread(nodes, ["a", "b"]) == {"controller": "a", "client-0": "b", "client-1": "a"}
    assert spread(nodes, ["a"]) == {"controller": "a", "client-0": "a", "client-1": "a"}
    assert spread(nodes, []) == {}
    placed = stack_spec(nodes, host_results=tmp_path, net=65, config_dir="/c", key_files={},
                        placement=spread(nodes, ["a", "b"]))
    assert placed["services"]["client-0"]["deploy"] == {
        "restart_policy": {"condition": "none"},
        "placement": {"constraints": [f"node.labels.{ENGINE_LABEL} == b"]}}
    assert placed["services"]["controller"]["deploy"]["placement"]["constraints"] == \
        [f"node.labels.{ENGINE_LABEL} == a"]
    free = stack_spec(nodes, host_results=tmp_path, net=65, config_dir="/c", key_files={})
    assert all("placement" not in svc["deploy"] for svc in free["services"].values())


def test_nodes_find_their_peers_by_unicast_with_multicast_off(tmp_path):
    cfg = {"run_id": "r1", "results_dir": str(tmp_path), "link_profile": "lan", "rounds": 2,
           "dds": {"domain_id": 7, "interface": "lo", "peers": ["127.0.0.1"]}}
    for node in ("controller", "client-0", "client-1"):
        out = stack_config(cfg, node, fl_roster(2), "10mbit", tmp_path)
        peers = [f"tasks.{n.name}" for n in fl_roster(2) if n.name != node]
        assert out["dds"]["peers"] == peers and out["dds"]["interface"] == "eth0"
        xml = dds_settings(DdsSection(**{**out["dds"], "peers": ("198.19.65.3", "198.19.65.4")})).to_xml()
        assert "<AllowMulticast>false</AllowMulticast>" in xml
        assert '<Peer address="198.19.65.3"/><Peer address="198.19.65.4"/>' in xml
        assert '<NetworkInterface name="eth0"' in xml


def test_round_digests_reads_the_controller_lines_of_either_log(tmp_path):
    log = tmp_path / "swarm.log"
    log.write_text(
        "controller-1  | [controller] round 1/2 acc 0.3024 loss 2.18 up 0.69MB down 13.67MB time 30.1s participants "
        "client-0;client-1 rejected 0 model f88d8237a8f49022 replica f88d8237a8f49022\n"
        "client-0 | [client-0] round 2: training on 300 samples from model f88d8237a8f49022 (round 1)\n"
        "controller | [controller] round 2/2 acc 0.3148 loss 1.96 up 0.69MB down 13.67MB time 15.4s participants "
        "client-0;client-1 rejected 0 model 21a182aa5faf6ddb replica 21a182aa5faf6ddb\n"
        "client-1 | [client-1] round 3/3 acc 0.1 model 0000000000000000 replica 0000000000000000\n")
    assert round_digests(log) == {1: "f88d8237a8f49022", 2: "21a182aa5faf6ddb"}


def test_the_engine_pair_command_names_its_usage(capsys):
    assert main(["sideways"]) == 2
    assert "usage: python -m commlab.testbed.engine_pair up|down" in capsys.readouterr().err



def test_a_pair_that_is_up_already_is_refused_and_left_alone(tmp_path, monkeypatch):
    from commlab.testbed import engine_pair
    state = tmp_path / "state.json"
    state.write_text('{"pids": {"a": 1, "b": 2}}')  # another run's pair
    monkeypatch.setattr(engine_pair, "STATE_FILE", state)
    taken_down = []
    monkeypatch.setattr(engine_pair, "down", lambda *a, **k: taken_down.append(True))
    with pytest.raises(engine_pair.EngineError, match="an engine pair is up already .*engine_pair down"):
        with engine_pair.EnginePair():
            pass
    assert taken_down == [] and state.exists()
