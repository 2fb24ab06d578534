"""The data-parallel worker loop: join, barrier, train with one gradient exchange per step,
evaluate together after each epoch, checkpoint, record everything under results/<run-id>/."""
from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch

from commlab.codecs import build_compression
from commlab.codecs.base import ALLGATHER, ALLREDUCE, LOWRANK
from commlab.config.builders import dds_settings
from commlab.config.schema import ConfigError, to_dict
from commlab.ddp.checkpoint import NO_RESUME, UNUSABLE, agree_on_resume_point, restore_checkpoint, save_checkpoint
from commlab.ddp.config import WorkerConfig
from commlab.ddp.dense import DenseAllreduce
from commlab.ddp.evaluate import distributed_evaluate
from commlab.ddp.frame_allgather import FrameAllgather
from commlab.ddp.lowrank import LowRankAllreduce
from commlab.ddp.profile import StepProfile
from commlab.ddp.setup import data_parallel_setup
from commlab.dds import DdsNode, Group
from commlab.models import flatten_params, layout_of, num_params, weights_digest
from commlab.config.train_step_spec import load_train_step
from commlab.models.train_step import TrainStep, batch_loss
from commlab.output.run_folder import CsvTable, RunWriter, backend_name, write_transport_totals
from commlab.output.tables import COLUMNS
from commlab.runs.fault_points import halt_at
from commlab.runs.roster import worker_name

GROUP = "ddp"


def log(rank: int, text: str) -> None:
    print(f"[worker {rank}] {text}", flush=True)


def run_worker(cfg: WorkerConfig, world: int, rank: int) -> None:
    """Train to the end or raise (PeerLost, BarrierTimeout, FrameError...); results stay readable."""
    tr = cfg.training
    cfg.dds.check_host()
    seeds = cfg.seeds.tree
    setup = data_parallel_setup(cfg.dataset, cfg.model, world, tr.batch_size, seeds, cfg.threads)
    data, shards, steps_per_epoch, model = setup.data, setup.shards, setup.steps_per_epoch, setup.model
    step_fn = load_train_step(cfg.train_step)  # already checked with the config
    out = Path(cfg.results_dir) / cfg.run_id
    writer = None
    if rank == 0:
        writer = RunWriter(cfg.results_dir, cfg.run_id, {
            "kind": "ddp", "backend": backend_name(cfg.dds.interface),
            "model": cfg.model.name, "dataset": cfg.dataset.name, "method": cfg.method,
            "multicast": dds_settings(cfg.dds).multicast, "link_profile": cfg.link_profile, "world": world,
            "epochs": tr.epochs, "config": to_dict(cfg),
            "seeds": seeds.manifest(world, ("batches", "codec")),
            "steps_per_epoch": steps_per_epoch, "status": "running"})
    out.mkdir(parents=True, exist_ok=True)
    steps = CsvTable(out / f"steps-rank{rank}.csv", COLUMNS["steps"])
    epochs = CsvTable(out / f"epochs-rank{rank}.csv", COLUMNS["epochs"])
    node, status = None, "failed"
    try:
        node = DdsNode(worker_name(rank), dds_settings(cfg.dds, num_params(model), world - 1))
        group = Group(node, GROUP, rank, world, cfg.collective_timeout_s, return_s=cfg.peer_return_s)
        exchange = build_exchange(cfg, group, model, steps_per_epoch)
        log(rank, f"{cfg.method}: {len(shards[rank])} samples, {steps_per_epoch} steps/epoch; waiting for "
                  f"{world} ranks")
        start_epoch, step, point, problem = 0, 0, NO_RESUME, None
        if cfg.resume_from is not None:
            try:  # a bad checkpoint still joins the barrier, so that every rank refuses at once
                point = restore_checkpoint(Path(cfg.resume_from) / f"checkpoint-rank{rank}.pt", model, exchange)
                start_epoch, step = point[0] + 1, point[1]
            except ConfigError as e:
                point, problem = UNUSABLE, e
        group.barrier(cfg.barrier_timeout_s)
        agree_on_resume_point(group, point, problem)
        if cfg.resume_from is not None:
            log(rank, f"resumed from {cfg.resume_from} after epoch {point[0]} (step {step})")
        profile = StepProfile(steps, cfg.summary_every, (lambda s: log(rank, s)) if rank == 0 else None)
        for epoch in range(start_epoch, tr.epochs):
            t_epoch = time.perf_counter()
            order = np.random.default_rng(seeds.batches(rank, epoch)).permutation(shards[rank])
            model.train()
            for b in range(steps_per_epoch):
                profile.record(train_step(model, exchange, node, data, order[b * tr.batch_size:(b + 1) * tr.batch_size],
                                          step, epoch, rank, step_fn))
                step += 1
            acc, loss = distributed_evaluate(model, data.test_x, data.test_y, group, f"eval/{epoch}",
                                             cfg.eval_batch_size)
            epochs.append({"epoch": epoch, "rank": rank, "step": step, "test_accuracy": acc, "test_loss": loss,
                           "epoch_time_s": time.perf_counter() - t_epoch})
            save_checkpoint(out / f"checkpoint-rank{rank}.pt", epoch, step, model, exchange.state_dict())
            log(rank, f"epoch {epoch}: test accuracy {100 * acc:.2f}% loss {loss:.4f} "
                      f"model {weights_digest(flatten_params(model))}")
        group.leave()  # a rank cut off near the end still gets what it missed
        status = "completed"
    finally:
        steps.close()
        epochs.close()
        if node is not None:
            write_transport_totals(cfg.results_dir, cfg.run_id, worker_name(rank), node.stats.snapshot())
            node.close()
        if writer is not None:
            writer.close(status)


Exchange = DenseAllreduce | FrameAllgather | LowRankAllreduce
# How each kind of compressor crosses the network (Codec.exchange): summable frames round the
# allreduce, PowerSGD's two allreduces, any other frame by allgather.
EXCHANGES: dict[str, type[Exchange]] = {ALLREDUCE: DenseAllreduce, LOWRANK: LowRankAllreduce,
                                        ALLGATHER: FrameAllgather}


def build_exchange(cfg: WorkerConfig, group: Group, model: torch.nn.Module, steps_per_epoch: int) -> Exchange:
    """The worker's one resolution of its method: the compressor with its DDP memory and schedule
    (seeded by the rank's codec seed, and by the run's shared one for what every rank must share), in the exchange it
    declares (Codec.exchange)."""
    tr = cfg.training
    compression = build_compression(cfg.method, cfg.method_params, layout_of(model), setting="ddp",
                                    momentum=tr.momentum, nesterov=tr.nesterov, world=group.world,
                                    seed=cfg.seeds.tree.codec(group.rank), run_seed=cfg.seeds.tree.codec_shared)
    return EXCHANGES[compression.codec.exchange](group, model, tr, compression, steps_per_epoch)


def train_step(model: torch.nn.Module, exchange: Exchange, node: DdsNode, data,
               batch: np.ndarray, step: int, epoch: int, rank: int, loss_fn: TrainStep) -> dict:
    """Forward/backward (the batch's loss from loss_fn, the config's train_step), exchange, update;
    the steps.csv row of this step."""
    t0, cpu0 = time.perf_counter(), time.process_time()
    before = node.stats.snapshot()
    exchange.optimizer.zero_grad()
    loss = batch_loss(loss_fn, model, torch.from_numpy(data.train_x[batch]), torch.from_numpy(data.train_y[batch]))
    halt_at("before_exchange", step)  # before backward: the dense ring's exchange starts with it
    with exchange.backward(step) if isinstance(exchange, DenseAllreduce) else nullcontext():
        loss.backward()
    t1 = time.perf_counter()
    compress_s, decompress_s, density = exchange.exchange(step)
    t2 = time.perf_counter()
    exchange.optimizer.step()
    t3 = time.perf_counter()
    comm = node.stats.since(before)
    return {"step": step, "epoch": epoch, "rank": rank, "bytes_sent": comm["bytes_sent"],
            "bytes_received": comm["bytes_received"], "comm_time_s": comm["wait_s"],
            # compute: forward/backward and the optimizer update
            "compute_time_s": (t1 - t0) + (t3 - t2),
            "compress_time_s": compress_s, "decompress_time_s": decompress_s, "step_time_s": t3 - t0,
            "density": density, "train_loss": loss.item(), "cpu_time_s": time.process_time() - cpu0}
