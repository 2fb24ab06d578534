"""Per-rank checkpoint at each epoch end: model, optimizer and exchange state (the DGC memory
holds each rank's own residuals, so every rank saves its own file). Written atomically
(commlab.metrics.write_atomic), so a crash leaves the previous checkpoint intact."""
from __future__ import annotations

from pathlib import Path

import torch

from commlab.config_schema import ConfigError
from commlab.metrics import write_atomic


def save_checkpoint(path: Path, epoch: int, step: int, model: torch.nn.Module, exchange_state: dict) -> None:
    state = {"epoch": epoch, "step": step, "model": model.state_dict(), "exchange": exchange_state}
    write_atomic(path, lambda f: torch.save(state, f))


def load_checkpoint(path: Path) -> dict:
    if not path.exists():
        raise ConfigError(f"checkpoint not found: {path}")
    return torch.load(path, weights_only=True)
