"""`python -m commlab.fl.run --codec C --clients N --rounds R --backend local|docker|auto`

Builds the controller and client configs of one FL run (unique DDS domain, run id, results
folder), then starts the nodes through commlab.testbed.backend.run_nodes: local processes (in
network namespaces for a shaped profile when root) or one container per node.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from commlab.config_schema import ConfigError, from_dict, to_dict
from commlab.fl.config import ClientConfig, ControllerConfig
from commlab.launch import NodeProcesses, codec_params, end_nodes_on_sigterm, random_domain, write_node_config
from commlab.metrics import new_run_id
from commlab.progress import watch_csv
from commlab.roster import fl_roster
from commlab.testbed.backend import choose_backend, run_nodes
from commlab.testbed.docker_run import run_fl
from commlab.testbed.netns_run import run_fl_netns
from commlab.train_step import DEFAULT_TRAIN_STEP, resolve_spec_path

CLIENT_GRACE_S = 60.0  # how long clients may take to exit after the controller finished


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m commlab.fl.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--codec", default="fp32")
    p.add_argument("--codec-param", action="append", default=[], metavar="KEY=JSON",
                   help="codec parameter, e.g. ratio=0.05 (repeatable)")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--samples-per-round", type=int, default=6000)
    p.add_argument("--backend", choices=("local", "docker", "auto"), default="local")
    p.add_argument("--profile", default="lan", help="link profile (commlab.netem): applied in containers, or "
                   "with --backend local in network namespaces (root; without root the run is unshaped)")
    p.add_argument("--model", default="mnist_cnn")
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--partition", choices=("iid", "dirichlet", "shards"), default="dirichlet")
    p.add_argument("--alpha", type=float, default=0.5)
    p.add_argument("--labels-per-client", type=int, default=2)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--train-step", default=DEFAULT_TRAIN_STEP, metavar="SPEC",
                   help="every client's loss of one batch: package.module:function or path/to/file.py:function "
                   "(default %(default)s; docs/fl.md)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-clients", type=int, default=1)
    p.add_argument("--deadline", type=float, default=300.0, help="round deadline in seconds")
    p.add_argument("--train-subset", type=int, help="use a random subset of the training set (fast checks)")
    p.add_argument("--test-subset", type=int)
    p.add_argument("--init-path", help="checkpoint file or directory to resume from")
    p.add_argument("--results-dir", default="results")
    p.add_argument("--run-id")
    p.add_argument("--domain-id", type=int, help="DDS domain (default: random in 100..169; tests use 170 and up)")
    return p.parse_args(argv)


def build_configs(a: argparse.Namespace) -> tuple[dict, list[dict]]:
    """Controller and client configs (validated through the same schema the nodes use)."""
    run_id = a.run_id or new_run_id("fl", a.codec)
    domain = a.domain_id if a.domain_id is not None else random_domain(100, 170)
    results = str(Path(a.results_dir).resolve())
    common = {"run_id": run_id, "results_dir": results, "link_profile": a.profile,
              "dds": {"domain_id": domain, "interface": "lo", "peers": ["127.0.0.1"]},
              "model": {"name": a.model, "params": {}},
              "dataset": {"name": a.dataset, "train_subset": a.train_subset, "test_subset": a.test_subset},
              "partition": {"scheme": a.partition, "alpha": a.alpha, "labels_per_client": a.labels_per_client,
                            "seed": a.seed},
              "train_step": resolve_spec_path(a.train_step)}
    controller = {**common, "checkpoint_dir": str(Path(results) / run_id / "checkpoints"),
                  "rounds": a.rounds, "expected_clients": a.clients, "min_clients": a.min_clients,
                  "codec": {"name": a.codec, "params": codec_params(a.codec_param)},
                  "training": {"local_epochs": a.epochs, "batch_size": a.batch_size, "lr": a.lr,
                               "samples_per_round": a.samples_per_round, "seed": a.seed},
                  "round_deadline_s": a.deadline, "round_hard_limit_s": max(600.0, 2 * a.deadline),
                  "init_path": a.init_path, "seed": a.seed}
    clients = [{**common, "client_id": i, "num_clients": a.clients, "optimizer": {"momentum": a.momentum}}
               for i in range(a.clients)]
    # Round-trip through the schema: a bad flag fails here, before any process starts.
    return (to_dict(from_dict(ControllerConfig, controller)),
            [to_dict(from_dict(ClientConfig, c)) for c in clients])


def run_local(controller_cfg: dict, client_cfgs: list[dict]) -> int:
    """Start controller + clients as local processes; non-zero if any of them failed."""
    run_dir = Path(controller_cfg["results_dir"]) / controller_cfg["run_id"]
    with NodeProcesses() as procs:
        controller, *clients = [procs.start(node, write_node_config(run_dir, node.name, cfg))
                                for node, cfg in zip(fl_roster(len(client_cfgs)), [controller_cfg, *client_cfgs])]
        # The controller decides the run; stop early only when no client is left to train.
        procs.wait_while(lambda: controller.poll() is None and any(c.poll() in (None, 0) for c in clients))
        if controller.poll() == 0:
            procs.wait_while(lambda: any(c.poll() is None for c in clients), CLIENT_GRACE_S)
    return 1 if procs.report() else 0


def main(argv: list[str] | None = None) -> int:
    end_nodes_on_sigterm()
    a = parse_args(argv)
    try:
        controller, clients = build_configs(a)
    except ConfigError as e:
        print(f"commlab.fl.run: config error: {e}", file=sys.stderr)
        return 2
    try:
        backend = "local" if a.backend == "local" else choose_backend(a.backend)
    except RuntimeError as e:
        print(f"commlab.fl.run: {e}", file=sys.stderr)
        return 2
    run_dir = Path(controller["results_dir"]) / controller["run_id"]
    print(f"[run] {controller['run_id']}: codec {a.codec}, {a.clients} clients, {a.rounds} rounds, "
          f"backend {backend}, DDS domain {controller['dds']['domain_id']}, results {run_dir}", flush=True)
    # Every backend writes rounds.csv into this host folder: one row per round, whoever runs the nodes.
    stop_progress = watch_csv(run_dir / "rounds.csv", a.rounds, "round", note_column="test_accuracy",
                              note_label="acc")
    try:
        code = run_nodes("commlab.fl.run", backend, a.profile, run_dir,
                         [node.name for node in fl_roster(len(clients))],
                         local=lambda: run_local(controller, clients),
                         netns=lambda: run_fl_netns(controller, clients, a.profile),
                         docker=lambda: run_fl(controller, clients, a.profile, Path(controller["results_dir"])))
    finally:
        stop_progress()
    summarize(run_dir)
    return code


def summarize(run_dir: Path) -> None:
    """One line per round from rounds.csv: what the run measured, whichever backend ran it."""
    path = run_dir / "rounds.csv"
    if not path.exists():
        return
    with open(path) as f:
        for r in csv.DictReader(f):
            print(f"[run] round {r['round']}: accuracy {float(r['test_accuracy']):.4f}, "
                  f"up {int(r['bytes_up']) / 1e6:.2f} MB, down {int(r['bytes_down']) / 1e6:.2f} MB, "
                  f"round time {float(r['round_time_s']):.1f}s, participants {r['participants']}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
