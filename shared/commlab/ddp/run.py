"""`python -m commlab.ddp.run --method dense|dgc|<codec> --world N --epochs E --backend local|docker|swarm|auto`

Builds the WORLD identical worker configs of one DDP run (unique run id and DDS domain), then
starts the workers through commlab.testbed.backend.run_nodes: local processes (WORLD/RANK in their
environment; in network namespaces for a shaped profile when root) or one container per worker.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from commlab.codecs import CodecError
from commlab.codecs.base import codec_class
from commlab.config.schema import ConfigError, from_dict, to_dict
from commlab.data.dataset import dataset_spec, load_raw
from commlab.ddp.config import WorkerConfig, steps_per_epoch
from commlab.runs.claims import hold
from commlab.runs.launch import PEER_GRACE_S, CsvProgress, Launch, NodeProcesses, codec_params, launch, write_node_config
from commlab.links.profiles import profile_arg
from commlab.config.train_step_spec import DEFAULT_TRAIN_STEP, resolve_spec_path
from commlab.output.run_folder import new_run_id, peak_memory_line
from commlab.runs.keys import run_keys, with_key_file
from commlab.runs.roster import ddp_roster
from commlab.testbed.backend import choose_backend, run_nodes
from commlab.testbed.docker_run import run_ddp
from commlab.testbed.netns_run import run_ddp_netns
from commlab.runs.process_exit import exit_now


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m commlab.ddp.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--method", default="dgc", help="dense (allreduce), or any registered codec: each says "
                   "how it is exchanged (fp16, bf16: allreduce; powersgd<r>: two allreduces; dgc, int8, qsgd4, "
                   "signsgd, ...: allgather of frames)")
    p.add_argument("--method-param", action="append", default=[], metavar="KEY=JSON",
                   help="codec parameter, e.g. ratio=0.05 (repeatable)")
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--backend", choices=("local", "docker", "swarm", "auto"), default="local")
    p.add_argument("--multicast", choices=("off", "discovery", "data"),
                   help="what DDS may multicast (default: data on the private networks of namespaces and "
                   "containers, off on loopback, where multicast is refused)")
    p.add_argument("--profile", default="lan", type=profile_arg,
                   help="link profile (commlab.links.profiles): applied in containers, or "
                   "with --backend local in network namespaces (root; without root the run is unshaped)")
    p.add_argument("--model", default="mnist_cnn", help="a model by name (docs/workloads.md), sized for the dataset")
    p.add_argument("--model-param", action="append", default=[], metavar="KEY=JSON",
                   help="model parameter, e.g. hidden=256 (repeatable)")
    p.add_argument("--dataset", default="mnist", help="a dataset by name, text:<path> or synthetic:<name> "
                   "(docs/workloads.md); its files in COMMLAB_DATA_DIR (make DATA_DIR=)")
    p.add_argument("--train-subset", type=int, default=20000, help="random training subset (0: all)")
    p.add_argument("--test-subset", type=int, help="random test subset (default: all)")
    p.add_argument("--batch-size", type=int, default=32, help="per worker")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0, help="the run seed: model init, batch orders, compressors "
                   "(commlab.runs.seeds)")
    p.add_argument("--data-seed", type=int, help="the data subsets and the ranks' shards (default: --seed)")
    p.add_argument("--train-step", default=DEFAULT_TRAIN_STEP, metavar="SPEC",
                   help="every worker's loss of one batch: package.module:function or path/to/file.py:function "
                   "(default %(default)s; docs/ddp.md)")
    # Shorthands for the method parameters of a compressor with a warm-up (dgc), for the methods
    # that take them: given, they join --method-param (which wins); not given, the compressor's
    # DDP defaults hold (docs/codecs.md).
    p.add_argument("--density", type=float, help="density after the warm-up (dgc; default 0.001)")
    p.add_argument("--warmup", type=float, help="warm-up length in --warmup-unit (dgc; default 1 epoch)")
    p.add_argument("--warmup-unit", choices=("steps", "epochs"))
    p.add_argument("--collective-timeout", type=float, default=30.0,
                   help="seconds a rank may stay silent while every rank is alive")
    p.add_argument("--peer-return", type=float, default=120.0,
                   help="seconds a rank whose DDS lease expired (paused, starved, cut off) may take to come back")
    p.add_argument("--collective", choices=("auto", "ring", "naive"), default="auto",
                   help="dense allreduce schedule: ring (2(W-1)/W of the payload per rank), naive (the whole "
                   "vector to every peer), auto = naive when data is multicast, else ring")
    p.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=True,
                   help="the dense ring allreduce runs during backward (the same models; --no-overlap: after it)")
    p.add_argument("--summary-every", type=int, default=50)
    p.add_argument("--resume-from", help="run folder whose per-rank checkpoints to continue from")
    p.add_argument("--results-dir", default="results")
    p.add_argument("--run-id")
    p.add_argument("--domain-id", type=int, help="DDS domain (default: one that no other run or test on this machine holds, commlab.runs.claims)")
    return p.parse_args(argv)


def shorthand_params(a: argparse.Namespace) -> dict:
    """The method parameters --density, --warmup and --warmup-unit stand for, where given and the
    method takes them (a method without a warm-up has nothing they could set)."""
    given = {"density": a.density, "warmup_length": a.warmup, "warmup_unit": a.warmup_unit}
    try:
        cls = codec_class(a.method)[0]
    except CodecError:  # the config's check names the unknown method
        return {}
    return {k: v for k, v in given.items() if v is not None and cls.takes(k)}


def build_config(a: argparse.Namespace) -> dict:
    """The worker config every rank reads, validated through the workers' own schema."""
    if a.world < 1:
        raise ConfigError(f"--world must be >= 1, got {a.world}")
    domain = a.domain_id if a.domain_id is not None else hold("domain")
    cfg = {"run_id": a.run_id or new_run_id("ddp", f"{a.method}-w{a.world}"), "method": a.method,
           "method_params": {**shorthand_params(a), **codec_params(a.method_param)},
           "results_dir": str(Path(a.results_dir).resolve()), "link_profile": a.profile,
           "dds": {"domain_id": domain, "interface": "lo", "peers": ["127.0.0.1"], "multicast": a.multicast},
           "model": {"name": a.model, "params": codec_params(a.model_param, "model parameter")},
           "dataset": {"name": a.dataset, "train_subset": a.train_subset or None, "test_subset": a.test_subset},
           "training": {"epochs": a.epochs, "batch_size": a.batch_size, "lr": a.lr,
                        "collective": a.collective, "overlap": a.overlap},
           "seeds": {"run": a.seed, "data": a.data_seed},
           "collective_timeout_s": a.collective_timeout, "peer_return_s": a.peer_return, "summary_every": a.summary_every,
           "resume_from": str(Path(a.resume_from).resolve()) if a.resume_from else None,
           "train_step": resolve_spec_path(a.train_step)}
    return to_dict(from_dict(WorkerConfig, cfg))


def total_steps(cfg: dict, world: int) -> int:
    """The run's steps, from the official size of the (subset of the) training set, else its arrays."""
    n = dataset_spec(cfg["dataset"]["name"]).train_size or len(load_raw(cfg["dataset"]["name"]).train_y)
    if cfg["dataset"]["train_subset"]:
        n = min(n, cfg["dataset"]["train_subset"])
    return cfg["training"]["epochs"] * steps_per_epoch(n, world, cfg["training"]["batch_size"])


def run_local(cfg: dict, world: int) -> int:
    """Start WORLD workers; non-zero if any failed. After the first failure the others get the
    collective and return timeouts to report the lost rank themselves, then they are ended."""
    path = write_node_config(Path(cfg["results_dir"]) / cfg["run_id"], "worker", cfg)
    with NodeProcesses() as procs:
        ranks = [procs.start(node, path) for node in ddp_roster(world)]
        procs.wait_while(lambda: all(p.poll() in (None, 0) for p in ranks) and procs.running())
        procs.wait_while(procs.running, max(cfg["collective_timeout_s"], cfg["peer_return_s"]) + PEER_GRACE_S)
    return 1 if procs.report() else 0


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    return launch("commlab.ddp.run", lambda: plan_run(a), (RuntimeError,))


def plan_run(a: argparse.Namespace) -> Launch:
    """The run the flags ask for: the workers' config, backend, progress (rank 0's steps) and summary."""
    cfg, backend = build_config(a), choose_backend(a.backend)
    names = [node.name for node in ddp_roster(a.world)]

    def run(run_dir: Path) -> int:
        # Every message is authenticated; ranks are equals, so each holds the run key (one file).
        with run_keys(cfg["run_id"], names, trusted=set(names)) as key_files:
            keyed = with_key_file(cfg, key_files[names[0]])
            return run_nodes("commlab.ddp.run", backend, a.profile, run_dir, names,
                             local=lambda: run_local(keyed, a.world),
                             netns=lambda: run_ddp_netns([keyed] * a.world, a.profile),
                             docker=lambda: run_ddp([keyed] * a.world, a.profile, Path(cfg["results_dir"]),
                                                    swarm=backend == "swarm"))

    def after(run_dir: Path) -> None:
        if memory := peak_memory_line(run_dir):
            print(f"[run] {memory}", flush=True)
    # Every backend writes rank 0's steps-rank0.csv into the run folder on this host, one row per step.
    return Launch(cfg, f"{a.method}, world {a.world}, {a.epochs} epochs, backend {backend}, "
                       f"DDS domain {cfg['dds']['domain_id']}",
                  CsvProgress("steps-rank0.csv", total_steps(cfg, a.world), "step", numbered_from=0,
                              note_column="train_loss", note_label="loss"),
                  run, after)


if __name__ == "__main__":
    exit_now(main())
