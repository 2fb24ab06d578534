"""`python -m commlab.peers.run --kind gloo --hook none|fp16|powersgd --world 3 --profile 10mbit`
and `python -m commlab.peers.run --kind centralized --world 3`.

Starts the reference peers (docs/peers.md) the way the testbed starts its own nodes: gloo ranks as
local processes on loopback for the `lan` profile, or each in its own network namespace with the
profile applied to its eth0 (root; rank 0's 198.19.253.x address is the master, GLOO_SOCKET_IFNAME
is eth0), or with `--backend docker` each in its own container of the worker image (rank 0's
service name is the master); without root the run is unshaped and says so (commlab.testbed.backend.run_nodes). The
centralized trainer is one local process (it sends nothing). Data, model, seeds and
hyper-parameters default to `python -m commlab.ddp.run`'s, so the runs compare at equal steps.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from commlab.config.schema import ConfigError, from_dict, to_dict
from commlab.data.dataset import dataset_spec
from commlab.ddp.config import steps_per_epoch
from commlab.links.profiles import profile_arg
from commlab.config.train_step_spec import DEFAULT_TRAIN_STEP, resolve_spec_path
from commlab.output.run_folder import new_run_id
from commlab.peers.config import HOOKS, KINDS, PeerConfig
from commlab.runs.claims import hold
from commlab.runs.launch import (PEER_GRACE_S, CsvProgress, Launch, NodeProcesses, codec_params, launch,
                                 write_node_config)
from commlab.runs.roster import Node, worker_name
from commlab.testbed.backend import choose_backend, run_nodes
from commlab.runs.process_exit import exit_now

NET = 253            # 198.19.253.0/24 (FL namespaces use 251, DDS workers 252)
NETNS_PORT = 29500   # every rank has its own namespace: a fixed port is free


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m commlab.peers.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--kind", default="gloo", help=f"{' | '.join(KINDS)} | flower (its flags: --kind flower --help)")
    p.add_argument("--hook", default="none", help=f"gloo's DDP comm hook: {' | '.join(HOOKS)}")
    p.add_argument("--world", type=int, default=3,
                   help="gloo ranks; centralized: the world whose data and budget it matches")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--profile", default="lan", type=profile_arg,
                   help="link profile (commlab.links.profiles), applied in network namespaces (root)")
    p.add_argument("--model", default="mnist_cnn", help="a model by name (docs/workloads.md), sized for the dataset")
    p.add_argument("--model-param", action="append", default=[], metavar="KEY=JSON",
                   help="model parameter, e.g. hidden=256 (repeatable)")
    p.add_argument("--dataset", default="mnist", help="a dataset by name or synthetic:<name> (docs/workloads.md)")
    p.add_argument("--train-subset", type=int, default=20000, help="random training subset (0: all)")
    p.add_argument("--test-subset", type=int, help="random test subset (default: all)")
    p.add_argument("--batch-size", type=int, default=32, help="per worker (centralized: world x this per step)")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--samples", type=int, default=0,
                   help="centralized: a sample budget instead of --epochs (e.g. an FL run's rounds x clients x "
                   "samples per round): ceil(N / (world x batch)) steps, ending inside an epoch if need be")
    p.add_argument("--seed", type=int, default=0, help="the run seed, as the DDS worker's (commlab.runs.seeds)")
    p.add_argument("--data-seed", type=int, help="the data subsets and shards (default: --seed)")
    p.add_argument("--powersgd-rank", type=int, default=2)
    p.add_argument("--start-iter", type=int, default=2, help="dense steps before PowerSGD (torch needs >= 2)")
    p.add_argument("--train-step", default=DEFAULT_TRAIN_STEP, metavar="SPEC")
    p.add_argument("--timeout", type=float, default=300.0, help="gloo timeout: a lost rank fails the others")
    p.add_argument("--backend", choices=("local", "docker", "auto"), default="local",
                   help="local: processes (network namespaces with a profile, as root); docker: gloo ranks in "
                   "containers; auto: docker when an engine and compose answer")
    p.add_argument("--results-dir", default="results")
    p.add_argument("--run-id")
    return p.parse_args(argv)


def build_config(a: argparse.Namespace) -> dict:
    """The config every node reads, validated through the peers' own schema (ConfigError)."""
    label = f"gloo-{a.hook}-w{a.world}" if a.kind == "gloo" else f"centralized-w{a.world}"
    cfg = {"run_id": a.run_id or new_run_id("ddp", label), "results_dir": str(Path(a.results_dir).resolve()),
           "kind": a.kind, "world": a.world, "hook": a.hook if a.kind == "gloo" else "none",
           "powersgd_rank": a.powersgd_rank, "start_iter": a.start_iter, "link_profile": a.profile,
           "master_port": hold("port"), "timeout_s": a.timeout, "train_step": resolve_spec_path(a.train_step),
           "model": {"name": a.model, "params": codec_params(a.model_param, "model parameter")},
           "dataset": {"name": a.dataset, "train_subset": a.train_subset or None, "test_subset": a.test_subset},
           "training": {"epochs": a.epochs, "batch_size": a.batch_size, "lr": a.lr, "momentum": a.momentum,
                        "weight_decay": a.weight_decay},
           "seeds": {"run": a.seed, "data": a.data_seed}}
    if a.kind == "gloo" and a.hook not in HOOKS:  # before anything else: one line naming the choices
        raise ConfigError(f"--hook: must be one of {', '.join(HOOKS)}, got {a.hook!r}")
    if a.samples:
        if a.kind != "centralized" or a.samples < 0:
            raise ConfigError(f"--samples: a positive budget of the centralized peer only, got {a.samples}")
        steps = -(-a.samples // (a.world * a.batch_size))
        per_epoch = total_steps({**cfg, "training": {**cfg["training"], "epochs": 1}})
        if per_epoch > 0:
            cfg["training"]["epochs"] = -(-steps // per_epoch)
        cfg["max_steps"] = steps
    return to_dict(from_dict(PeerConfig, cfg))


def roster(cfg: dict) -> list[Node]:
    """gloo: worker-0 .. worker-<W-1> (rank 0 first: the master; the names give them the workers'
    links in every profile); centralized: one node."""
    if cfg["kind"] == "centralized":
        return [Node("centralized", "peer")]
    return [Node(worker_name(r), "peer", (("RANK", str(r)), ("WORLD", str(cfg["world"])))) for r in range(cfg["world"])]


def run_local(cfg: dict) -> int:
    """Every node a plain process on loopback; non-zero if any failed."""
    run_dir = Path(cfg["results_dir"]) / cfg["run_id"]
    path = write_node_config(run_dir, "peer", {**cfg, "interface": "lo", "master_addr": "127.0.0.1"})
    with NodeProcesses() as procs:
        nodes = [procs.start(node, path) for node in roster(cfg)]
        procs.wait_while(lambda: all(p.poll() in (None, 0) for p in nodes) and procs.running())
        procs.wait_while(procs.running, PEER_GRACE_S)
    return 1 if procs.report() else 0


def run_netns(cfg: dict, profile: str) -> Path:
    """Each rank in its own namespace, eth0 shaped by the profile; RunFailed when a rank failed."""
    from commlab.testbed.netns_run import run_in_namespaces
    nodes = roster(cfg)

    def start(procs: NodeProcesses, lab, run_dir: Path) -> None:
        node_cfg = {**cfg, "interface": "eth0", "master_addr": lab.addresses[nodes[0].name], "master_port": NETNS_PORT}
        path = write_node_config(run_dir, "peer", node_cfg)
        for node in nodes:
            procs.start(Node(node.name, node.role, (*node.env, ("GLOO_SOCKET_IFNAME", "eth0"))), path,
                        prefix=lab.prefix(node.name))

    def wait(procs: NodeProcesses) -> None:
        ranks = list(procs.procs.values())
        procs.wait_while(lambda: all(p.poll() in (None, 0) for p in ranks) and procs.running())
        procs.wait_while(procs.running, PEER_GRACE_S)
    return run_in_namespaces(nodes, Path(cfg["results_dir"]) / cfg["run_id"], profile, NET, start, wait)


def run_docker(cfg: dict) -> Path:
    """Each rank in its own container (worker image, eth0 shaped by the profile); rank 0's
    service name is the master, which compose's DNS resolves on the run's network."""
    from commlab.testbed.docker_run import run_peers
    node_cfg = {**cfg, "interface": "eth0", "master_addr": worker_name(0), "master_port": NETNS_PORT}
    nodes = [Node(n.name, n.role, (*n.env, ("GLOO_SOCKET_IFNAME", "eth0"))) for n in roster(cfg)]
    return run_peers(nodes, node_cfg, cfg["link_profile"], Path(cfg["results_dir"]))


def total_steps(cfg: dict) -> int:
    n = dataset_spec(cfg["dataset"]["name"]).train_size
    if cfg["dataset"]["train_subset"]:
        n = min(n, cfg["dataset"]["train_subset"])
    steps = cfg["training"]["epochs"] * steps_per_epoch(n, cfg["world"], cfg["training"]["batch_size"])
    return min(steps, cfg["max_steps"]) if cfg.get("max_steps") else steps


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--kind")
    if pre.parse_known_args(argv)[0].kind == "flower":  # FL flags and defaults: commlab.peers.flower_run
        from commlab.peers.flower_run import main as run_flower
        return run_flower(argv)
    a = parse_args(argv)
    return launch("commlab.peers.run", lambda: plan_run(a), (RuntimeError,))


def plan_run(a: argparse.Namespace) -> Launch:
    """The run the flags ask for: the peers' config, progress (rank 0's steps) and how they run (the
    centralized trainer: one process, no link to shape)."""
    cfg = build_config(a)
    method = PeerConfig(**{k: cfg[k] for k in ("run_id", "results_dir", "kind", "hook")}).method
    progress = CsvProgress("steps-rank0.csv", total_steps(cfg), "step", numbered_from=0, note_column="train_loss",
                           note_label="loss")
    what = f"{method}, world {a.world}, {a.epochs} epochs, profile {a.profile}"
    if cfg["kind"] == "centralized":  # one process, no link to shape

        def run_centralized(run_dir: Path) -> int:
            from commlab.report.tracking import live_tensorboard
            with live_tensorboard(run_dir):  # as run_nodes follows the others' CSVs
                return run_local(cfg)
        return Launch(cfg, what, progress, run_centralized)
    backend = choose_backend(a.backend)  # docker asked for, and no engine answers: one line (RuntimeError)
    return Launch(cfg, what, progress, lambda run_dir: run_nodes(
        "commlab.peers.run", backend, a.profile, run_dir, [n.name for n in roster(cfg)],
        local=lambda: run_local(cfg), netns=lambda: run_netns(cfg, a.profile), docker=lambda: run_docker(cfg)))


if __name__ == "__main__":
    exit_now(main())
