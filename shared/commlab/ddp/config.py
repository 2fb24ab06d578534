"""The worker config (experiments/worker.conf.json): typed, validated before anything runs.

Rank and world size are not in the file: they come from the environment (WORLD/RANK, or torchrun's
WORLD_SIZE/RANK), so every rank of a run reads the same config.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from commlab.config.schema import ConfigError, DdsNodeConfig, existing, load_config, positive
from commlab.config.train_step_spec import DEFAULT_TRAIN_STEP, check_train_step

DENSE = "dense"  # the allreduce reference (the fp32 codec's other name); every method is a registered codec
COLLECTIVES = ("auto", "ring", "naive")  # as commlab.dds.collectives.COLLECTIVES (validation needs no DDS)


@dataclass(frozen=True)
class TrainingSection:
    epochs: int = 2
    batch_size: int = 32            # per worker
    lr: float = 0.02
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 1e-4
    # Schedule of the dense allreduces (dense, PowerSGD's P and Q): "ring" sends 2(W-1)/W of the
    # payload per rank, "naive" (allgather and sum) (W-1)x unicast, 1x with data multicast; "auto":
    # naive with dds multicast "data", else ring (commlab.dds.collectives.Group.schedule).
    collective: str = "auto"
    # The dense fp32 ring allreduce runs during backward, fed each gradient as it is produced
    # (commlab.ddp.overlap); the same sums and models as after backward, less waiting.
    overlap: bool = True

    def check(self, where: str) -> None:
        positive(where, epochs=self.epochs, batch_size=self.batch_size, lr=self.lr)
        if self.collective not in COLLECTIVES:
            raise ConfigError(f"{where}collective: must be one of {', '.join(COLLECTIVES)}, got {self.collective!r}")
        if not 0 <= self.momentum < 1 or self.weight_decay < 0:
            raise ConfigError(f"{where}momentum/weight_decay: need 0 <= momentum < 1, weight_decay >= 0")
        if self.nesterov and self.momentum == 0:
            raise ConfigError(f"{where}nesterov: needs momentum > 0")


@dataclass(frozen=True)
class WorkerConfig(DdsNodeConfig):
    method: str                       # "dense" or any registered codec name ("dgc", "int8", "qsgd4", ...)
    # The compressor's parameters, its memory and schedule ones included, e.g. {"ratio": 0.05} or
    # {"density": 0.001, "warmup_length": 1.0}; defaults: the compressor's for DDP (docs/codecs.md).
    method_params: dict = field(default_factory=dict)
    training: TrainingSection = TrainingSection()
    barrier_timeout_s: float = 120.0  # all ranks must have joined by then
    collective_timeout_s: float = 30.0  # a rank silent for this long (every rank alive) is reported lost
    peer_return_s: float = 120.0      # a rank whose lease expired (paused, cut off) may come back until then
    summary_every: int = 50           # print a profile summary every N steps (rank 0)
    eval_batch_size: int = 1000
    threads: int = 1
    resume_from: str | None = None    # a run folder: continue after its checkpoint-rank<r>.pt
    train_step: str = DEFAULT_TRAIN_STEP  # "module:function" or "file.py:function": the loss of one batch

    def check(self, where: str) -> None:
        existing(where, "resume_from", self.resume_from)
        check_train_step(self.train_step, f"{where}train_step")
        positive(where, barrier_timeout_s=self.barrier_timeout_s, threads=self.threads,
                  collective_timeout_s=self.collective_timeout_s, peer_return_s=self.peer_return_s,
                  summary_every=self.summary_every,
                  eval_batch_size=self.eval_batch_size)
        from commlab.codecs import CodecError, build_compression
        from commlab.codecs.base import codec_class
        try:
            codec_class(self.method)
        except CodecError as e:
            raise ConfigError(f"{where}method: neither {DENSE} nor a registered codec: {e}") from None
        try:
            build_compression(self.method, self.method_params, layout=[], setting="ddp")
        except CodecError as e:
            raise ConfigError(f"{where}method_params: {e}") from None


def steps_per_epoch(train_size: int, world: int, batch_size: int) -> int:
    """Steps every rank runs per epoch: each step is a collective, so all run as many as the
    smallest IID shard allows (np.array_split parts: the smallest holds train_size // world) and
    the ragged tail is dropped. The worker trains by it; the launcher's progress bar counts by it."""
    return train_size // world // batch_size


def load_worker_config(path: str | Path) -> WorkerConfig:
    return load_config(WorkerConfig, path)


def world_and_rank(env: dict[str, str] | None = None) -> tuple[int, int]:
    """(world, rank) from WORLD/RANK or torchrun's WORLD_SIZE/RANK; ConfigError if absent or bad."""
    env = dict(os.environ) if env is None else env
    raw_world = env.get("WORLD", env.get("WORLD_SIZE"))
    raw_rank = env.get("RANK")
    if raw_world is None or raw_rank is None:
        raise ConfigError("set WORLD (or WORLD_SIZE) and RANK in the environment")
    try:
        world, rank = int(raw_world), int(raw_rank)
    except ValueError:
        raise ConfigError(f"WORLD={raw_world!r} and RANK={raw_rank!r} must be integers") from None
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"need WORLD >= 1 and 0 <= RANK < WORLD, got WORLD={world} RANK={rank}")
    return world, rank
