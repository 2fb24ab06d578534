"""The manifest of a peer run: the DDS workers' fields (kind "ddp", method, world, epochs, config,
seeds), so `make plots` puts gloo and centralized runs beside the DDS runs."""
from __future__ import annotations

import os

from commlab.config.schema import to_dict
from commlab.output.run_folder import RunWriter
from commlab.peers.config import PeerConfig


def peer_manifest(cfg: PeerConfig, steps_per_epoch: int) -> RunWriter:
    tr = cfg.training
    bytes_from = ("none: one process, nothing sent" if cfg.kind == "centralized" else
                  f"/sys/class/net/{cfg.interface}/statistics tx_bytes/rx_bytes"
                  + (" (loopback: shared by every process of the host, an upper bound)"
                     if cfg.interface == "lo" else ""))
    return RunWriter(cfg.results_dir, cfg.run_id, {
        "kind": "ddp", "peer": cfg.kind, "backend": os.environ.get("COMMLAB_BACKEND", "local"),
        "model": cfg.model.name, "dataset": cfg.dataset.name, "method": cfg.method,
        "link_profile": cfg.link_profile, "world": cfg.world,
        "processes": 1 if cfg.kind == "centralized" else cfg.world,
        "epochs": tr.epochs, "config": to_dict(cfg), "bytes_measured": bytes_from,
        "seeds": {"model": tr.seed, "shards": tr.seed, "batches": tr.seed, "subset": cfg.dataset.subset_seed},
        "steps_per_epoch": steps_per_epoch, "status": "running"})
