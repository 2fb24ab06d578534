"""Container backends: config rewriting, compose and stack specs (fast), and end-to-end runs in Docker.

The end-to-end tests build the images (cached layers after the first build), run a short FL
experiment through the static compose file with `docker compose up`, a short DDP run through
commlab.testbed.docker_run and a short FL run as a stack on a single-node swarm, then read the
results the nodes wrote on the host.
"""
from __future__ import annotations

import csv
import ipaddress
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commlab.config.builders import dds_settings
from commlab.config.schema import DdsSection
from commlab.runs.roster import ddp_roster, fl_roster
from commlab.testbed.backend import choose_backend
from commlab.testbed.compose_file import addresses, compose_spec, container_config
from commlab.testbed.docker_run import NETS as COMPOSE_NETS
from commlab.testbed.engine import REPO, free_net, bootstrap_as_root, compose_answers, compose_missing, engine_answers
from commlab.testbed.entrypoint import PeersUnresolved, resolved_config
from commlab.testbed.swarm import (ADDRESS_POOL, ADVERTISE_ADDRESS, NETS, OVERLAY_MTU, leave_swarm, stack_config,
                                   stack_spec, swarm_state)

BENCH = ipaddress.ip_network("198.18.0.0/15")


def fl_cfg(results: Path) -> dict:
    return {"run_id": "r1", "results_dir": str(results), "checkpoint_dir": str(results / "r1" / "checkpoints"),
            "init_path": None, "link_profile": "lan", "rounds": 2,
            "dds": {"domain_id": 7, "interface": "lo", "peers": ["127.0.0.1"]},
            "dataset": {"name": "mnist", "root": "/home/me/.cache/commlab"}}


def test_container_config_rewrites_only_transport_paths_and_profile(tmp_path):
    addrs = addresses(fl_roster(2), 200)
    cfg = fl_cfg(tmp_path)
    out = container_config(cfg, "client-0", addrs, "10mbit", tmp_path)
    assert out["dds"] == {"domain_id": 7, "interface": "eth0", "loopback_tuned": False, "multicast": "data",
                          "peers": ["198.19.200.10", "198.19.200.12"], "chunk_bytes": 64 * 1024,
                          "ring_block_bytes": 64 * 1024, "send_window_bytes": 32 * 1024, "datagram_frames": 6}
    keyed = container_config({**cfg, "dds": {**cfg["dds"], "key_file": "/tmp/commlab-keys-x/client-0.key"}},
                             "client-0", addrs, "10mbit", tmp_path)
    assert keyed["dds"]["key_file"] == "/run/secrets/commlab-key"  # the compose secret, not the host path
    assert out["results_dir"] == "/results" and out["checkpoint_dir"] == "/results/r1/checkpoints"
    assert out["link_profile"] == "10mbit" and out["dataset"]["root"] is None
    assert {k: v for k, v in out.items() if k not in ("dds", "results_dir", "checkpoint_dir", "link_profile",
                                                       "dataset")} == \
        {k: v for k, v in cfg.items() if k not in ("dds", "results_dir", "checkpoint_dir", "link_profile",
                                                    "dataset")}
    assert cfg["dds"]["interface"] == "lo"  # the caller's config is left alone
    lossy = container_config(cfg, "client-0", addrs, "10mbit-loss5", tmp_path)
    assert lossy["dds"] == {**{k: v for k, v in out["dds"].items() if k != "datagram_frames"}, "lossy_link": True}


def test_every_node_of_a_run_gets_the_chunk_and_ring_block_of_the_slowest_link_unless_the_run_chose_them(tmp_path):
    addrs = addresses(fl_roster(3), 200)
    cfg = fl_cfg(tmp_path)
    chunks = {profile: {container_config(cfg, node, addrs, profile, tmp_path)["dds"]["chunk_bytes"] for node in addrs}
              for profile in ("1000mbit", "1000mbit-loss1", "300mbit", "100mbit", "hetero")}
    assert chunks == {"1000mbit": {256 * 1024}, "1000mbit-loss1": {256 * 1024}, "300mbit": {128 * 1024},
                      "100mbit": {64 * 1024}, "hetero": {64 * 1024}}
    blocks = {profile: {container_config(cfg, node, addrs, profile, tmp_path)["dds"]["ring_block_bytes"]
                        for node in addrs} for profile in ("1000mbit", "10mbit", "hetero")}
    assert blocks == {"1000mbit": {1024 * 1024}, "10mbit": {64 * 1024}, "hetero": {64 * 1024}}
    chosen = {**cfg, "dds": {**cfg["dds"], "chunk_bytes": 4096, "ring_block_bytes": 8192}}
    assert {k: container_config(chosen, "client-0", addrs, "1000mbit", tmp_path)["dds"][k]
            for k in ("chunk_bytes", "ring_block_bytes")} == {"chunk_bytes": 4096, "ring_block_bytes": 8192}


def test_every_node_gets_the_send_window_of_its_own_uplink_unless_the_run_chose_one(tmp_path):
    addrs = addresses(fl_roster(3), 200)
    cfg = fl_cfg(tmp_path)
    windows = {profile: {node: container_config(cfg, node, addrs, profile, tmp_path)["dds"].get("send_window_bytes")
                         for node in addrs} for profile in ("1000mbit", "hetero4")}
    assert windows == {"1000mbit": dict.fromkeys(addrs, 512 * 1024),
                       "hetero4": {"controller": 64 * 1024, "client-0": 32 * 1024, "client-1": 32 * 1024,
                                   "client-2": 32 * 1024}}
    chosen = {**cfg, "dds": {**cfg["dds"], "send_window_bytes": 8192}}
    assert container_config(chosen, "client-0", addrs, "1000mbit", tmp_path)["dds"]["send_window_bytes"] == 8192


def test_a_node_fills_its_own_fast_uplink_with_large_datagrams_but_not_a_lossy_one(tmp_path):
    addrs = addresses(fl_roster(3), 200)
    cfg = fl_cfg(tmp_path)
    frames = {profile: {node: container_config(cfg, node, addrs, profile, tmp_path)["dds"].get("datagram_frames")
                        for node in addrs} for profile in ("1000mbit", "100mbit", "1000mbit-loss1", "hetero4")}
    assert frames == {"1000mbit": dict.fromkeys(addrs, 41), "100mbit": dict.fromkeys(addrs, 6),
                      "1000mbit-loss1": dict.fromkeys(addrs, None), "hetero4": dict.fromkeys(addrs, 6)}
    overlay = {**cfg, "dds": {**cfg["dds"], "link_mtu": 1450}}  # frames of a swarm's VXLAN overlay
    assert container_config(overlay, "client-0", addrs, "1000mbit", tmp_path)["dds"]["datagram_frames"] == 43
    chosen = {**cfg, "dds": {**cfg["dds"], "datagram_frames": 2}}
    assert container_config(chosen, "client-0", addrs, "1000mbit", tmp_path)["dds"]["datagram_frames"] == 2


def test_container_config_refuses_paths_a_container_cannot_see(tmp_path):
    cfg = {**fl_cfg(tmp_path), "init_path": "/somewhere/else/ckpt.pt"}
    with pytest.raises(ValueError, match="init_path.*outside the results folder"):
        container_config(cfg, "controller", {"controller": "198.19.200.10"}, "lan", tmp_path)


def test_compose_spec_uses_internal_benchmark_network_and_fixed_addresses(tmp_path):
    spec = compose_spec(ddp_roster(2), run_id="20260101-ddp-x", host_results=tmp_path, net=201,
                        config_dir="/results/x/configs")
    net = spec["networks"]["lab"]
    assert net["internal"] is True
    assert ipaddress.ip_network(net["ipam"]["config"][0]["subnet"]).subnet_of(BENCH)
    for name, svc in spec["services"].items():
        assert ipaddress.ip_address(svc["networks"]["lab"]["ipv4_address"]) in BENCH
        assert svc["cap_add"] == ["NET_ADMIN"] and svc["image"] == "commlab-worker:latest"
        assert svc["command"] == [f"/results/x/configs/{name}.json"]
    assert spec["services"]["worker-1"]["environment"]["RANK"] == "1"
    assert spec["services"]["worker-1"]["environment"]["WORLD"] == "2"
    keyed = compose_spec(ddp_roster(2), run_id="x", host_results=tmp_path, net=201, config_dir="/c",
                         key_files={"worker-0": "/tmp/k/worker-0.key", "worker-1": "/tmp/k/worker-1.key"})
    # Each container sees only its own key file, as a secret (never in the results volume).
    assert keyed["secrets"] == {"worker-0-key": {"file": "/tmp/k/worker-0.key"},
                                "worker-1-key": {"file": "/tmp/k/worker-1.key"}}
    assert keyed["services"]["worker-1"]["secrets"] == [{"source": "worker-1-key", "target": "commlab-key"}]


def test_stack_spec_has_an_internal_overlay_in_the_swarm_pool_and_no_fixed_addresses(tmp_path):
    pool = ipaddress.ip_network(ADDRESS_POOL)
    # The pool must not meet the compose networks (198.19.100 and 198.19.128-249) or the engine's bridge.
    assert pool.subnet_of(BENCH) and ipaddress.ip_address(ADVERTISE_ADDRESS) in BENCH
    for other in ("198.19.0.0/24", "198.19.100.0/24", "198.19.128.0/17"):
        assert not pool.overlaps(ipaddress.ip_network(other))
    assert all(ipaddress.ip_network(f"198.19.{n}.0/24").subnet_of(pool) for n in NETS)
    spec = stack_spec(fl_roster(2), host_results=tmp_path, net=NETS[0], config_dir="/results/x/configs",
                      key_files={"client-0": "/tmp/k/client-0.key"})
    net = spec["networks"]["lab"]
    assert net["driver"] == "overlay" and net["internal"] is True
    assert ipaddress.ip_network(net["ipam"]["config"][0]["subnet"]).subnet_of(pool)
    for svc in spec["services"].values():
        assert svc["networks"] == ["lab"] and svc["deploy"] == {"restart_policy": {"condition": "none"}}
        assert svc["environment"]["COMMLAB_BACKEND"] == "swarm"
    assert spec["services"]["client-0"]["secrets"] == [{"source": "client-0-key", "target": "commlab-key", "mode": 0o400}]
    assert "name" not in spec and "secrets" not in spec["services"]["client-1"]
    out = stack_config(fl_cfg(tmp_path), "client-0", fl_roster(2), "10mbit", tmp_path)
    assert out["dds"]["peers"] == ["tasks.controller", "tasks.client-1"]
    assert out["dds"]["multicast"] == "off"  # an overlay carries none
    # VXLAN leaves 1450 bytes: a DDS datagram must fill whole frames of it, or IP adds a nearly
    # empty frame to every one.
    settings = dds_settings(DdsSection(**{**out["dds"], "peers": tuple(out["dds"]["peers"])}))
    frames = settings.datagram_frames
    assert (frames - 1) * (OVERLAY_MTU - 20) < settings.message_bytes + 8 <= frames * (OVERLAY_MTU - 20)


def test_the_entry_point_resolves_peer_names_and_names_the_ones_that_do_not(tmp_path):
    path = tmp_path / "client-0.json"
    path.write_text(json.dumps({"dds": {"peers": ["tasks.controller", "198.19.65.7"]}, "rounds": 2}))
    answers = {"tasks.controller": ["not yet", "198.19.65.3"]}  # attached on the second look

    def resolve(name: str) -> str:
        answer = answers[name].pop(0)
        if answer == "not yet":
            raise OSError("unknown host")
        return answer

    resolved = resolved_config(str(path), resolve=resolve)
    assert json.loads(Path(resolved).read_text()) == {"dds": {"peers": ["198.19.65.3", "198.19.65.7"]}, "rounds": 2}
    assert json.loads(path.read_text())["dds"]["peers"][0] == "tasks.controller"  # the shared file is left alone
    os.unlink(resolved)
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"dds": {"peers": ["198.19.65.3"]}}))
    assert resolved_config(str(plain), resolve=resolve) == str(plain)
    with pytest.raises(PeersUnresolved, match="tasks.controller did not resolve"):
        resolved_config(str(path), timeout_s=0.0, resolve=lambda name: (_ for _ in ()).throw(OSError("unknown")))


@pytest.fixture(scope="module")
def bootstrapped():
    """As root, whatever the container tests need is installed (and the engine started) before any
    test checks for it; as another user nothing changes and the checks below say what is missing."""
    bootstrap_as_root()


@pytest.fixture(scope="module")
def compose(bootstrapped):
    missing = compose_missing()
    if missing:
        pytest.skip(missing)


@pytest.mark.slow
def test_static_compose_files_stay_in_the_benchmark_range(compose):
    for path in ("compose.yaml", "compose/fl.yaml", "compose/ddp.yaml"):
        out = subprocess.run(["docker", "compose", "-f", str(REPO / path), "config", "--format", "json"],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        spec = json.loads(out.stdout)
        for net in spec["networks"].values():
            assert net["internal"] is True
            assert all(ipaddress.ip_network(c["subnet"]).subnet_of(BENCH) for c in net["ipam"]["config"])


@pytest.mark.slow
def test_choose_backend():
    assert choose_backend("local") == "local"
    with pytest.raises(ValueError, match="unknown backend 'k8s'"):
        choose_backend("k8s")
    assert choose_backend("auto") == ("docker" if engine_answers()[0] and compose_answers() else "local")


@pytest.fixture(scope="module")
def engine(bootstrapped):
    from commlab.testbed.images import build_images, engine_missing
    missing = engine_missing()
    if missing:
        pytest.skip(missing)
    t0 = time.monotonic()
    build_images()
    print(f"images ready in {time.monotonic() - t0:.0f} s")


def read_csv(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(1200)  # includes a cold image build (module fixture) when first
def test_fl_with_docker_compose_up(engine, tmp_path, claims):
    project = f"cltest{claims.take('project')}"
    # A free 198.19.<net>.0/24, so a default `docker compose up` left on the machine cannot clash.
    env = {**os.environ, "RESULTS_DIR": str(tmp_path), "ROUNDS": "2", "SAMPLES": "1000", "LINK_PROFILE": "100mbit",
           "COMPOSE_NET": str(free_net(project, COMPOSE_NETS))}
    compose = ["docker", "compose", "-f", str(REPO / "compose" / "fl.yaml"), "-p", project]
    try:
        up = subprocess.run([*compose, "up", "--abort-on-container-failure"], env=env, capture_output=True, text=True, timeout=480)
        states = subprocess.run([*compose, "ps", "-a", "--format", "{{.Service}} {{.ExitCode}}"],
                                env=env, capture_output=True, text=True).stdout.split("\n")
    finally:
        subprocess.run([*compose, "down", "-v", "-t", "5"], env=env, capture_output=True)
    assert up.returncode == 0, up.stdout[-3000:]
    assert sorted(s for s in states if s) == ["client-0 0", "client-1 0", "controller 0", "setup 0"], up.stdout[-3000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["backend"] == "docker" and manifest["link_profile"] == "100mbit"
    rounds = read_csv(run_dir / "rounds.csv")
    assert len(rounds) == 2 and all(int(r["bytes_up"]) > 0 for r in rounds)
    assert float(rounds[-1]["test_accuracy"]) > 0.5
    clients = [row for p in run_dir.glob("clients*.csv") for row in read_csv(p)]
    assert len(clients) == 4 and all(float(r["comm_time_s"]) > 0 for r in clients)
    for node in ("controller", "client-0", "client-1"):
        link = json.loads((run_dir / f"link-{node}.json").read_text())
        assert link["applied"]["rate"] == "100mbit" and "tbf" in link["tc_show"]


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_ddp_with_docker_run(engine, tmp_path):
    from commlab.ddp.run import build_config, parse_args
    from commlab.testbed.docker_run import run_ddp

    cfg = build_config(parse_args(["--method", "dgc", "--world", "2", "--epochs", "1", "--train-subset", "2000",
                                   "--test-subset", "1000", "--results-dir", str(tmp_path)]))
    run_dir = run_ddp([cfg, cfg], "10mbit", tmp_path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["backend"] == "docker" and set(manifest["link_applied"]) == {"worker-0", "worker-1"}
    steps = [row for p in run_dir.glob("steps*.csv") for row in read_csv(p)]
    assert steps and all(int(s["bytes_sent"]) > 0 for s in steps)
    epochs = [row for p in run_dir.glob("epochs*.csv") for row in read_csv(p)]
    assert epochs and all(0 < float(e["test_accuracy"]) <= 1 for e in epochs)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_gloo_peers_in_containers_train_as_on_loopback(engine, tmp_path):
    """The reference gloo ranks as containers of the worker image on shaped links (rank 0's service
    name is the master) train exactly what the same ranks train as local processes."""
    short = ["--kind", "gloo", "--hook", "none", "--world", "2", "--epochs", "1", "--train-subset", "320",
             "--test-subset", "200"]
    runs = {}
    for backend, profile in (("docker", "100mbit"), ("local", "lan")):
        out = subprocess.run([sys.executable, "-m", "commlab.peers.run", *short, "--backend", backend,
                              "--profile", profile, "--results-dir", str(tmp_path / backend)],
                             cwd=REPO, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
        (runs[backend],) = [p for p in (tmp_path / backend).iterdir() if (p / "manifest.json").exists()]
    manifest = json.loads((runs["docker"] / "manifest.json").read_text())
    assert {n: link["applied"]["rate"] for n, link in manifest["link_applied"].items()} == \
        {"worker-0": "100mbit", "worker-1": "100mbit"}
    steps = read_csv(runs["docker"] / "steps-rank1.csv")
    assert len(steps) == 5 and all(int(s["bytes_sent"]) > 3_000_000 for s in steps)  # eth0's counters
    final = {b: read_csv(r / "epochs-rank0.csv")[-1] for b, r in runs.items()}
    assert final["docker"]["test_accuracy"] == final["local"]["test_accuracy"]
    assert final["docker"]["test_loss"] == final["local"]["test_loss"]


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_fl_as_a_stack_on_a_single_node_swarm(engine, tmp_path):
    was = swarm_state()
    try:
        out = subprocess.run([sys.executable, "-m", "commlab.fl.run", "--backend", "swarm", "--clients", "2",
                              "--rounds", "2", "--samples-per-round", "1000", "--profile", "100mbit",
                              "--results-dir", str(tmp_path)], capture_output=True, text=True, timeout=900)
    finally:
        if was == "inactive":  # a swarm this test made; one the machine had stays
            leave_swarm()
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["backend"] == "swarm" and manifest["multicast"] == "off" and manifest["status"] == "completed"
    rounds = read_csv(run_dir / "rounds.csv")
    assert len(rounds) == 2 and rounds[-1]["participants"] == "client-0;client-1"
    for node in ("controller", "client-0", "client-1"):
        link = json.loads((run_dir / f"link-{node}.json").read_text())
        assert link["applied"]["rate"] == "100mbit" and "tbf" in link["tc_show"]
    assert "round 2/2" in (run_dir / "swarm.log").read_text()
