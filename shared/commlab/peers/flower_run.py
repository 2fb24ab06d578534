"""`python -m commlab.peers.run --kind flower --clients 2 --rounds 10 --profile 10mbit`: Flower FedAvg
on the testbed's links with `make fl-fp32`'s data, model, seeds and hyper-parameters (docs/peers.md).

The Flower server is node `controller`, client i node `client-<i>`: with the `lan` profile plain
processes on loopback, otherwise (root) each in its own network namespace with the profile on its
eth0, the FL nodes' links (`link_for`), the server's 198.19.254.x address for the clients. Without
root the run is unshaped and says so (commlab.testbed.backend.run_nodes). Needs `flwr` (an optional
extra: `make peer-flower` and `make bench-peers-fl` install it).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from commlab.config_schema import ConfigError, from_dict, to_dict
from commlab.fl.run import add_experiment_args
from commlab.launch import NodeProcesses, write_node_config
from commlab.metrics import new_run_id
from commlab.peers.flower import METHOD, FlowerConfig, roster
from commlab.peers.run import GRACE_S, free_port, no_containers
from commlab.progress import watch_csv
from commlab.testbed.backend import run_nodes
from commlab.train_step import resolve_spec_path

NET = 254            # 198.19.254.0/24 (FL namespaces 251, DDS workers 252, gloo 253)
NETNS_PORT = 8080    # the server has its own namespace: a fixed port is free


def parse_args(argv: list[str]) -> argparse.Namespace:
    """`python -m commlab.fl.run`'s flags and defaults, for those that apply to Flower FedAvg."""
    p = argparse.ArgumentParser(prog="python -m commlab.peers.run --kind flower", description=__doc__.split("\n\n")[0])
    p.add_argument("--kind", default="flower")
    add_experiment_args(p)
    p.add_argument("--profile", default="lan")
    p.add_argument("--deadline", type=float, default=600.0, help="Flower's round timeout in seconds")
    return p.parse_args(argv)


def build_config(a: argparse.Namespace) -> dict:
    """The one config every Flower node reads, validated through its schema (ConfigError)."""
    cfg = {"run_id": a.run_id or new_run_id("fl", METHOD), "results_dir": str(Path(a.results_dir).resolve()),
           "clients": a.clients, "rounds": a.rounds, "server_address": f"127.0.0.1:{free_port()}",
           "link_profile": a.profile, "model": {"name": a.model, "params": {}},
           "dataset": {"name": a.dataset, "train_subset": a.train_subset, "test_subset": a.test_subset},
           "partition": {"scheme": a.partition, "alpha": a.alpha, "labels_per_client": a.labels_per_client,
                         "seed": a.seed},
           "training": {"local_epochs": a.epochs, "batch_size": a.batch_size, "lr": a.lr,
                        "samples_per_round": a.samples_per_round, "seed": a.seed},
           "optimizer": {"momentum": a.momentum}, "seed": a.seed, "round_timeout_s": a.deadline,
           "train_step": resolve_spec_path(a.train_step)}
    return to_dict(from_dict(FlowerConfig, cfg))


def _wait(procs: NodeProcesses) -> None:
    """The server decides the run; stop early only when no client is left to train."""
    server, *clients = procs.procs.values()
    procs.wait_while(lambda: server.poll() is None and any(c.poll() in (None, 0) for c in clients))
    procs.wait_while(procs.running, GRACE_S)


def run_local(cfg: dict) -> int:
    run_dir = Path(cfg["results_dir"]) / cfg["run_id"]
    path = write_node_config(run_dir, "flower", {**cfg, "interface": "lo"})
    with NodeProcesses() as procs:
        for node in roster(cfg["clients"]):
            procs.start(node, path)
        _wait(procs)
    return 1 if procs.report() else 0


def run_netns(cfg: dict, profile: str) -> Path:
    from commlab.testbed.netns_run import run_in_namespaces
    nodes = roster(cfg["clients"])

    def start(procs: NodeProcesses, lab, run_dir: Path) -> None:
        address = f"{lab.addresses[nodes[0].name]}:{NETNS_PORT}"
        path = write_node_config(run_dir, "flower", {**cfg, "interface": "eth0", "server_address": address})
        for node in nodes:
            procs.start(node, path, prefix=lab.prefix(node.name))
    return run_in_namespaces(nodes, Path(cfg["results_dir"]) / cfg["run_id"], profile, NET, start, _wait)


def main(argv: list[str]) -> int:
    a = parse_args(argv)
    try:
        import flwr  # noqa: F401
    except ImportError:
        print("commlab.peers.run: --kind flower needs flwr (pip install flwr; `make peer-flower` does it)",
              file=sys.stderr)
        return 2
    try:
        cfg = build_config(a)
    except ConfigError as e:
        print(f"commlab.peers.run: {e}", file=sys.stderr)
        return 2
    run_dir = Path(cfg["results_dir"]) / cfg["run_id"]
    print(f"[run] {cfg['run_id']}: {METHOD} (flwr {flwr.__version__}), {a.clients} clients, {a.rounds} rounds, "
          f"profile {a.profile}, results {run_dir}", flush=True)
    stop_progress = watch_csv(run_dir / "rounds.csv", a.rounds, "round", note_column="test_accuracy", note_label="acc")
    try:
        return run_nodes("commlab.peers.run", "local", a.profile, run_dir, [n.name for n in roster(a.clients)],
                         local=lambda: run_local(cfg), netns=lambda: run_netns(cfg, a.profile), docker=no_containers)
    finally:
        stop_progress()
