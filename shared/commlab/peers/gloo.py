"""The gloo peer: torch.nn.parallel.DistributedDataParallel over gloo, one worker per node, with one
of torch's DDP communication hooks, trained exactly as a DDS worker (commlab.ddp.train): same model
init, IID shard of this rank, batch order, optimizer and evaluation, so accuracy at equal steps is
comparable. Bytes per step come from the interface counters (commlab.peers.iface).

    hook        what goes over the wire per step (gloo ring allreduce)
    none        every gradient bucket in fp32 (torch's default allreduce: the reference)
    fp16        every bucket cast to fp16, allreduced, cast back (fp16_compress_hook)
    powersgd    start_iter dense steps, then P and Q of rank r per matrix (powerSGD_hook)
"""
from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

from commlab.ddp.setup import data_parallel_setup
from commlab.models import evaluate
from commlab.config.train_step_spec import load_train_step
from commlab.models.train_step import batch_loss
from commlab.output.run_folder import CsvTable
from commlab.output.tables import COLUMNS
from commlab.peers.config import PeerConfig
from commlab.peers.iface import IfaceCounters
from commlab.peers.manifest import peer_manifest


def log(rank: int, text: str) -> None:
    print(f"[gloo {rank}] {text}", flush=True)


def register_hook(ddp: DistributedDataParallel, cfg: PeerConfig):
    """Install cfg.hook on the DDP model; returns the hook's state (PowerSGDState) or None."""
    if cfg.hook == "fp16":
        ddp.register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)
    elif cfg.hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=cfg.powersgd_rank,
                                            start_powerSGD_iter=cfg.start_iter, random_seed=cfg.seeds.tree.codec_shared)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return state
    return None


def one_bucket_mb(model: torch.nn.Module) -> float:
    """A DDP bucket size (MiB) that holds the model's whole gradient: one allreduce per step."""
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return grad_bytes / 2**20 + 1.0


def density(cfg: PeerConfig, state, before: tuple[int, int]) -> float:
    """Share of the fp32 gradient's bytes this step put on the wire (before headers)."""
    if cfg.hook == "fp16":
        return 0.5
    if state is None or state.total_numel_before_compression == before[0]:
        return 1.0  # none, or a PowerSGD step before start_iter
    return ((state.total_numel_after_compression - before[1])
            / (state.total_numel_before_compression - before[0]))


def evaluate_together(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, rank: int, world: int,
                      batch_size: int) -> tuple[float, float]:
    """As commlab.ddp.evaluate: each rank scores its slice of the test set, one allreduce of
    (correct, count, loss sum) gives every rank the global accuracy and mean loss."""
    shard = np.array_split(np.arange(len(y)), world)[rank]
    correct, loss_sum = 0.0, 0.0
    if shard.size:
        acc, loss = evaluate(model, x[shard], y[shard], batch_size)
        correct, loss_sum = float(round(acc * shard.size)), loss * shard.size
    model.train()
    t = torch.tensor([correct, float(shard.size), loss_sum], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t[0] / t[1]), float(t[2] / t[1])


def leave(store: dist.TCPStore, rank: int, world: int, timeout_s: float) -> None:
    """End the group in order: all ranks done (barrier), each tears its group down, then tells the store;
    rank 0, whose process hosts the store, exits only after every rank did. Without it a rank still
    tearing down when rank 0 was gone could abort (`terminate called without an active exception`)."""
    dist.barrier()
    dist.destroy_process_group()
    store.add("left", 1)
    if rank == 0:
        deadline = time.monotonic() + timeout_s
        while store.add("left", 0) < world:
            if time.monotonic() > deadline:
                raise RuntimeError(f"gloo: not every rank left within {timeout_s:g} s")
            time.sleep(0.05)


def run_gloo(cfg: PeerConfig, rank: int) -> None:
    """Train to the end or raise (RuntimeError from gloo when a peer is lost); tables stay readable."""
    world, tr = cfg.world, cfg.training
    counters = IfaceCounters(cfg.interface)
    seeds = cfg.seeds.tree
    setup = data_parallel_setup(cfg.dataset, cfg.model, world, tr.batch_size, seeds, cfg.threads)
    data, shards, steps_per_epoch, model = setup.data, setup.shards, setup.steps_per_epoch, setup.model
    step_fn = load_train_step(cfg.train_step)
    out = Path(cfg.results_dir) / cfg.run_id
    writer = peer_manifest(cfg, steps_per_epoch) if rank == 0 else None
    out.mkdir(parents=True, exist_ok=True)
    steps = CsvTable(out / f"steps-rank{rank}.csv", COLUMNS["steps"])
    epochs = CsvTable(out / f"epochs-rank{rank}.csv", COLUMNS["epochs"])
    status = "failed"
    try:
        os.environ["GLOO_SOCKET_IFNAME"] = cfg.interface
        log(rank, f"{cfg.method}: {len(shards[rank])} samples, {steps_per_epoch} steps/epoch; joining "
                  f"{cfg.master_addr}:{cfg.master_port} on {cfg.interface}")
        # The store init_method tcp:// would make, kept here: rank 0 hosts it, so it must leave last (leave())
        store = dist.TCPStore(cfg.master_addr, cfg.master_port, world, is_master=rank == 0,
                              timeout=timedelta(seconds=cfg.timeout_s))
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=cfg.timeout_s))
        ddp = DistributedDataParallel(model, bucket_cap_mb=cfg.bucket_cap_mb or one_bucket_mb(model))
        state = register_hook(ddp, cfg)
        optimizer = torch.optim.SGD(model.parameters(), lr=tr.lr, momentum=tr.momentum, nesterov=tr.nesterov,
                                    weight_decay=tr.weight_decay)
        step = 0
        for epoch in range(tr.epochs):
            t_epoch = time.perf_counter()
            order = np.random.default_rng(seeds.batches(rank, epoch)).permutation(shards[rank])
            model.train()
            for b in range(steps_per_epoch):
                batch = order[b * tr.batch_size:(b + 1) * tr.batch_size]
                numel = (state.total_numel_before_compression, state.total_numel_after_compression) if state else (0, 0)
                before = counters.read()
                t0, cpu0 = time.perf_counter(), time.process_time()
                optimizer.zero_grad()
                loss = batch_loss(step_fn, ddp, torch.from_numpy(data.train_x[batch]),
                                  torch.from_numpy(data.train_y[batch]))
                t1 = time.perf_counter()
                loss.backward()  # DDP allreduces the buckets (through the hook) during the backward pass
                t2 = time.perf_counter()
                optimizer.step()
                t3, cpu = time.perf_counter(), time.process_time() - cpu0
                sent, received = counters.since(before)
                steps.append({"step": step, "epoch": epoch, "rank": rank, "bytes_sent": sent,
                              "bytes_received": received,
                              # backward with the overlapped allreduce: gloo does not separate them
                              "comm_time_s": t2 - t1, "compute_time_s": (t1 - t0) + (t3 - t2),
                              "compress_time_s": 0.0, "decompress_time_s": 0.0, "step_time_s": t3 - t0,
                              "density": density(cfg, state, numel), "train_loss": loss.item(),
                              "cpu_time_s": cpu})
                if rank == 0 and (step + 1) % 10 == 0:
                    log(rank, f"step {step + 1}: {t3 - t0:.3f} s, {sent} B sent, loss {loss.item():.4f}")
                step += 1
            acc, loss_mean = evaluate_together(model, data.test_x, data.test_y, rank, world, cfg.eval_batch_size)
            epochs.append({"epoch": epoch, "rank": rank, "step": step, "test_accuracy": acc, "test_loss": loss_mean,
                           "epoch_time_s": time.perf_counter() - t_epoch})
            log(rank, f"epoch {epoch}: test accuracy {100 * acc:.2f}% loss {loss_mean:.4f}")
        leave(store, rank, world, cfg.timeout_s)
        status = "completed"
    finally:
        steps.close()
        epochs.close()
        if dist.is_initialized():
            dist.destroy_process_group()
        if writer is not None:
            writer.close(status)
