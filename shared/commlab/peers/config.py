"""The peer config (results/<run-id>/configs/<node>.json): typed, validated before anything runs.

The model, data, shards, batches and training section are the DDS worker's (commlab.ddp.config),
so a peer run and a DDS run with the same values train on exactly the same samples in the same order.
"""
from __future__ import annotations

from dataclasses import dataclass

from commlab.config.schema import ConfigError, DatasetSection, ModelSection, SeedSection, load_config, positive
from commlab.ddp.config import TrainingSection
from commlab.config.train_step_spec import DEFAULT_TRAIN_STEP, check_train_step

KINDS = ("gloo", "centralized")
HOOKS = ("none", "fp16", "powersgd")  # torch ddp_comm_hooks: none (allreduce), fp16_compress_hook, powerSGD_hook


def check_hook(hook: str, where: str = "") -> None:
    if hook not in HOOKS:
        raise ConfigError(f"{where}hook: must be one of {', '.join(HOOKS)}, got {hook!r}")


@dataclass(frozen=True)
class PeerConfig:
    run_id: str
    results_dir: str
    kind: str                          # gloo | centralized
    world: int = 3                     # gloo: ranks; centralized: the world whose shards and budget it matches
    hook: str = "none"                 # gloo only
    powersgd_rank: int = 2             # PowerSGDState.matrix_approximation_rank
    start_iter: int = 2                # PowerSGDState.start_powerSGD_iter (torch needs >= 2)
    master_addr: str = "127.0.0.1"     # rank 0's address (its 198.19.x address in namespaces)
    master_port: int = 29500
    interface: str = "lo"              # GLOO_SOCKET_IFNAME, and whose byte counters are read
    # DDP bucket size in MiB, first bucket included (given explicitly, torch drops its 1 MiB first
    # bucket); 0: the model's whole gradient in one bucket, one allreduce per step like the DDS
    # exchange's one vector. With several buckets torch's powerSGD_hook over gloo issues bucket 0's
    # P allreduce from a future callback, racing bucket 1's allreduce; ranks then disagree on the
    # order and gloo aborts.
    bucket_cap_mb: float = 0.0
    link_profile: str = "lan"          # recorded in the manifest; shaping is applied by the testbed
    model: ModelSection = ModelSection()
    dataset: DatasetSection = DatasetSection()
    training: TrainingSection = TrainingSection()
    seeds: SeedSection = SeedSection()  # as the DDS worker's (commlab.runs.seeds)
    timeout_s: float = 300.0           # gloo process group timeout: a lost rank fails the others
    eval_batch_size: int = 1000
    threads: int = 1
    train_step: str = DEFAULT_TRAIN_STEP
    # centralized only: stop after this many steps (0: every step of training.epochs), a sample budget
    # (an FL run's rounds x clients x samples) that need not fill whole epochs; evaluated at the end.
    max_steps: int = 0

    def check(self, where: str) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"{where}kind: must be one of {', '.join(KINDS)}, got {self.kind!r}")
        check_hook(self.hook, where)
        positive(where, world=self.world, powersgd_rank=self.powersgd_rank,
                 timeout_s=self.timeout_s,
                 eval_batch_size=self.eval_batch_size, threads=self.threads)
        if self.bucket_cap_mb < 0:
            raise ConfigError(f"{where}bucket_cap_mb: must be >= 0 (0: one bucket), got {self.bucket_cap_mb}")
        if self.hook == "powersgd" and self.start_iter < 2:
            raise ConfigError(f"{where}start_iter: torch's PowerSGD needs >= 2 (error feedback, warm start), "
                              f"got {self.start_iter}")
        if self.max_steps < 0 or (self.max_steps and self.kind != "centralized"):
            raise ConfigError(f"{where}max_steps: >= 0 and for kind centralized only, got {self.max_steps}")
        if not 0 < self.master_port < 65536:
            raise ConfigError(f"{where}master_port: must be in 1..65535, got {self.master_port}")
        check_train_step(self.train_step, f"{where}train_step")

    @property
    def method(self) -> str:
        """The manifest's method: the series name beside the DDS methods in the report."""
        return f"gloo-{self.hook}" if self.kind == "gloo" else "centralized"


def load_peer_config(path: str) -> PeerConfig:
    return load_config(PeerConfig, path)
