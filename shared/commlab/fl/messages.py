"""The FL protocol between the controller and its clients. Each message is a plain dataclass the
DDS transport carries on the topic of its class name (commlab.dds.messages: the fields travel as
JSON meta, `payload` as chunked bytes). Controller and clients both import this module (and the
controller's node name from commlab.roster), never each other.

Round r: TrainCmd(r) -> one ClientUpdate(r) per client -> ModelBlob(r), the aggregated model.
After the last round the controller publishes Stop; a client ends on it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrainCmd:
    """Train round `round` from the model of round-1; valid only with epochs >= 1."""
    round: int
    epochs: int
    lr: float
    seed: int
    subset_size: int
    codec: str
    codec_params: dict[str, Any] = field(default_factory=dict)
    deadline_s: float = 60.0
    batch_size: int = 32
    run_id: str = ""

    def problem(self) -> str | None:
        """Why a client must not run this command, or None."""
        if self.epochs <= 0:
            return f"epochs must be >= 1, got {self.epochs} (a run ends with a Stop message)"
        return None


@dataclass
class ClientUpdate:
    round: int
    client_id: str
    num_samples: int
    payload: bytes = b""


@dataclass
class ModelBlob:
    round: int
    model_version: int
    payload: bytes = b""


@dataclass
class Stop:
    """The run `run_id` is over after round `last_round`; clients leave."""
    run_id: str
    last_round: int
    reason: str = "completed"
