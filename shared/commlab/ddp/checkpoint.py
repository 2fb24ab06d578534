"""Per-rank checkpoint at each epoch end: model, optimizer and exchange state (the DGC memory
holds each rank's own residuals, so every rank saves its own file). Written to a temporary file
and renamed, so a crash leaves the previous checkpoint intact."""
from __future__ import annotations

import os
from pathlib import Path

import torch

from commlab.config_schema import ConfigError


def save_checkpoint(path: Path, epoch: int, step: int, model: torch.nn.Module, exchange_state: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        torch.save({"epoch": epoch, "step": step, "model": model.state_dict(), "exchange": exchange_state}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict:
    if not path.exists():
        raise ConfigError(f"checkpoint not found: {path}")
    return torch.load(path, weights_only=True)
