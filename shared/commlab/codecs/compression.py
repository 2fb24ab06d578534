"""One place that turns a compressor name into what a node needs to compress a stream of vectors
(FL uploads, DDP gradients): the codec, its memory and its schedule.

    comp = build_compression("dgc", {"density": 0.001}, layout, momentum=0.9, world=3)
    comp.at_step(step, steps_per_epoch)      # schedule: DGC's density warm-up, masking after it
    frame, sent = comp.compress(grad)        # memory.compensate -> codec.encode
    comp.remember(sent, own_decoded)         # memory.update with what the receivers decode

FL calls only ``comp.encode(delta)``, once per round: encode applies the schedule itself, one
epoch per call (a round trains about one local epoch), so DGC's default warm-up follows the
paper in rounds: 25 %, 6.25 %, 1.5625 %, 0.4 % in rounds 1-4, then the final density. DDP passes
its warm-up explicitly (ddp/config.py) and calls at_step with the global step.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np

from commlab.codecs.base import Codec, RandomCodec, codec_class, get_codec
from commlab.codecs.dgc import Dgc
from commlab.codecs.errors import CodecError
from commlab.codecs.memory import DgcMemory, ErrorFeedback, Memory, NoMemory
from commlab.codecs.powersgd import PowerSgd
from commlab.codecs.schedule import PAPER_STAGES, Warmup

MASKING = ("after_warmup", "always", "never")
# DGC parameters that belong to its memory and schedule rather than to the codec.
# The warm-up defaults are FL's (one encode per round, about one epoch): the paper's 4 epochs.
DGC_MEMORY_PARAMS = {"warmup_length": 4.0, "warmup_unit": "epochs", "warmup_stages": PAPER_STAGES,
                     "momentum_masking": "after_warmup", "clip_norm": None}
# PowerSGD parameters that belong to its error feedback (ErrorFeedback's decay and clip). Only FL
# builds PowerSGD here (DDP's ddp/lowrank.py keeps the plain residual, one step old), so these are
# FL's defaults. A round-old residual overshoots: the next round's training re-learns part of what
# the frame dropped. Carried at half its size and at most the new delta's norm, after the codec's
# two whole rounds (start_iter), FL powersgd2 after 10 rounds, seeds 0/1/2, is within 0.33-0.40 pp
# of fp32 (rank 2 from round 1 with the clipped residual: 0.66-1.26 pp below; docs/codecs.md).
POWERSGD_MEMORY_PARAMS = {"residual_decay": 0.5, "residual_clip": 1.0}


@dataclass
class Compression:
    codec: Codec
    memory: Memory
    schedule: Warmup | None = None
    masking_after_warmup: bool = False
    rounds: int = 0  # encode() calls so far: FL rounds this node has uploaded in

    def at_step(self, step: int, steps_per_epoch: int) -> None:
        """Set the codec's scheduled parameters (and DGC's masking) for global step `step`."""
        self.codec.at_step(step)
        if self.schedule is not None:
            self.codec.density = self.schedule.density(step, steps_per_epoch)
            if self.masking_after_warmup:
                self.memory.masking = self.schedule.done(step, steps_per_epoch)

    def encode(self, vec: np.ndarray) -> bytes:
        """The whole step for one sender (an FL round, one epoch of the schedule): compensate,
        encode, remember what the receiver decodes."""
        self.at_step(self.rounds, 1)
        self.rounds += 1
        frame, sent = self.compress(vec)
        if not isinstance(self.memory, NoMemory):
            self.remember(sent, self.codec.decode(frame, numel=sent.size))
        return frame

    def compress(self, vec: np.ndarray) -> tuple[bytes, np.ndarray]:
        """(frame, the compensated vector it encodes)."""
        sent = self.memory.compensate(vec)
        return self.codec.encode(sent), sent

    def remember(self, sent: np.ndarray, decoded: np.ndarray) -> None:
        self.memory.update(sent, decoded)

    def sent_share(self, decoded: np.ndarray) -> float:
        """Share of the coordinates the codec may drop that this frame carries (DGC: of the
        sparsified tensors only, the dense ones always travel)."""
        region = getattr(self.codec, "maskable", None)
        if region is not None and region.any():
            return float(np.count_nonzero(decoded[region])) / int(region.sum())
        return float(np.count_nonzero(decoded)) / max(decoded.size, 1)

    def state_dict(self) -> dict:
        """The memory, and what a codec carries from step to step (DGC's sampling generator,
        PowerSGD's warm start), so a resumed run continues exactly."""
        codec_state = self.codec.state_dict() if hasattr(self.codec, "state_dict") else None
        return {"memory": self.memory.state_dict(), "codec": codec_state, "rounds": self.rounds}

    def load_state_dict(self, state: dict) -> None:
        self.memory.load_state_dict(state["memory"])
        self.rounds = int(state.get("rounds", 0))
        if state.get("codec") is not None:
            self.codec.load_state_dict(state["codec"])


def build_compression(name: str, params: dict[str, Any], layout: list[tuple[str, tuple[int, ...]]], *,
                      momentum: float = 0.0, nesterov: bool = False, world: int = 1, seed: int = 0) -> Compression:
    """Codec `name` with `params`, plus its memory: DGC's (momentum correction with `momentum`,
    masking, clipping, warm-up), error feedback for any other biased lossy codec, none for
    lossless and for unbiased ones (see Codec.unbiased)."""
    if name != Dgc.name:
        ef_params = POWERSGD_MEMORY_PARAMS if issubclass(codec_class(name)[0], PowerSgd) else {}
        ef = {k: params.get(k, default) for k, default in ef_params.items()}
        codec_params = {k: v for k, v in params.items() if k not in ef_params}
        cls = codec_class(name)[0]
        if issubclass(cls, RandomCodec) and cls.seeded_by_node:
            codec_params.setdefault("seed", seed)
        codec = get_codec(name, layout=layout, **codec_params)
        if not codec.lossy or codec.unbiased:
            return Compression(codec, NoMemory())
        return Compression(codec, ErrorFeedback(ef.get("residual_decay", 1.0), ef.get("residual_clip")))
    mem = {k: params.get(k, default) for k, default in DGC_MEMORY_PARAMS.items()}
    codec_params = {k: v for k, v in params.items() if k not in DGC_MEMORY_PARAMS}
    unknown = set(codec_params) - set(inspect.signature(Dgc.__init__).parameters)
    if unknown:
        raise CodecError(f"dgc: unknown parameters {sorted(unknown)}")
    if mem["momentum_masking"] not in MASKING:
        raise CodecError(f"dgc: momentum_masking must be one of {', '.join(MASKING)}, got {mem['momentum_masking']!r}")
    codec_params.setdefault("seed", seed)
    codec = get_codec(name, layout=layout, **codec_params)
    try:
        schedule = Warmup(codec.density, tuple(mem["warmup_stages"]), mem["warmup_length"], mem["warmup_unit"])
    except ValueError as e:
        raise CodecError(f"dgc: {e}") from None
    memory = DgcMemory(codec.maskable, momentum, nesterov,
                       masking=mem["momentum_masking"] == "always", clip_norm=mem["clip_norm"], world=world)
    return Compression(codec, memory, schedule, masking_after_warmup=mem["momentum_masking"] == "after_warmup")
