"""The centralized peer: one process trains on the union of the WORLD workers' IID shards with the
same budget as the DDP run (same steps per epoch, each step one batch of WORLD x batch_size samples,
so the same number of samples is seen), same model init, optimizer and test set: the accuracy
ceiling that dense allreduce (and FL on the same data) is measured against; beside FL (max_steps,
`--samples`) WORLD 1 with the clients' batch and lr and the FL run's number of samples. Nothing is sent; the
steps table is written anyway (zero bytes) so the report draws it beside the DDP runs."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from commlab.config.builders import build_dataset, build_node_model
from commlab.config.schema import ConfigError
from commlab.data import partition
from commlab.ddp.config import steps_per_epoch as epoch_steps
from commlab.models import evaluate
from commlab.config.train_step_spec import load_train_step
from commlab.models.train_step import batch_loss
from commlab.output.run_folder import CsvTable
from commlab.output.tables import COLUMNS
from commlab.peers.config import PeerConfig
from commlab.peers.manifest import peer_manifest


def run_centralized(cfg: PeerConfig) -> float:
    """Train to the end; the final test accuracy."""
    tr, world = cfg.training, cfg.world
    seeds = cfg.seeds.tree
    data = build_dataset(cfg.dataset, seeds.subset)
    union = np.sort(np.concatenate(partition(data.train_y, world, "iid", seed=seeds.partition)))
    steps_per_epoch = epoch_steps(len(data.train_y), world, tr.batch_size)
    if steps_per_epoch == 0:
        raise ConfigError(f"training.batch_size: {tr.batch_size} x world {world} exceeds the training set")
    batch_size = world * tr.batch_size
    model = build_node_model(cfg.model, seed=seeds.model_init, threads=cfg.threads, data=data)
    step_fn = load_train_step(cfg.train_step)
    optimizer = torch.optim.SGD(model.parameters(), lr=tr.lr, momentum=tr.momentum, nesterov=tr.nesterov,
                                weight_decay=tr.weight_decay)
    out = Path(cfg.results_dir) / cfg.run_id
    writer = peer_manifest(cfg, steps_per_epoch)
    steps = CsvTable(out / "steps-rank0.csv", COLUMNS["steps"])
    epochs = CsvTable(out / "epochs-rank0.csv", COLUMNS["epochs"])
    status, acc, step = "failed", float("nan"), 0
    budget = f", stops after step {cfg.max_steps} ({cfg.max_steps * batch_size} samples)" if cfg.max_steps else ""
    print(f"[centralized] {len(union)} samples (union of {world} shards), {steps_per_epoch} steps/epoch "
          f"of {batch_size}{budget}", flush=True)
    try:
        for epoch in range(tr.epochs):
            t_epoch = time.perf_counter()
            order = np.random.default_rng(seeds.batches(0, epoch)).permutation(union)  # one rank: rank 0's stream
            model.train()
            for b in range(steps_per_epoch):
                if cfg.max_steps and step >= cfg.max_steps:  # a sample budget ends inside an epoch
                    break
                batch = order[b * batch_size:(b + 1) * batch_size]
                t0, cpu0 = time.perf_counter(), time.process_time()
                optimizer.zero_grad()
                loss = batch_loss(step_fn, model, torch.from_numpy(data.train_x[batch]),
                                  torch.from_numpy(data.train_y[batch]))
                loss.backward()
                optimizer.step()
                t, cpu = time.perf_counter() - t0, time.process_time() - cpu0
                steps.append({"step": step, "epoch": epoch, "rank": 0, "bytes_sent": 0, "bytes_received": 0,
                              "comm_time_s": 0.0, "compute_time_s": t, "compress_time_s": 0.0,
                              "decompress_time_s": 0.0, "step_time_s": t, "density": 0.0,
                              "train_loss": loss.item(), "cpu_time_s": cpu})
                step += 1
            acc, test_loss = evaluate(model, data.test_x, data.test_y, cfg.eval_batch_size)
            epochs.append({"epoch": epoch, "rank": 0, "step": step, "test_accuracy": acc, "test_loss": test_loss,
                           "epoch_time_s": time.perf_counter() - t_epoch})
            print(f"[centralized] epoch {epoch}: test accuracy {100 * acc:.2f}% loss {test_loss:.4f}", flush=True)
            if cfg.max_steps and step >= cfg.max_steps:
                break
        status = "completed"
    finally:
        steps.close()
        epochs.close()
        writer.close(status)
    return acc
