"""One place that turns a compressor name into what a node needs to compress a stream of vectors
(FL uploads, DDP gradients): the codec, its memory and its schedule, as the compressor's own hook
(Codec.build) makes them. Each node resolves a name once and keeps the Compression.

    comp = build_compression("dgc", {"density": 0.001}, layout, setting="ddp", momentum=0.9, world=3)
    comp.at_step(step, steps_per_epoch)      # the schedule: DGC's density warm-up, masking after it
    frame, sent = comp.compress(grad)        # memory.compensate -> codec.encode
    comp.remember(sent, own_decoded)         # memory.update with what the receivers decode

FL calls only ``comp.encode(delta)``, once per round: encode runs the schedule itself, one
epoch per call (a round trains about one local epoch), so DGC's FL warm-up follows the paper in
rounds: 25 %, 6.25 %, 1.5625 %, 0.4 % in rounds 1-4, then the final density. DDP calls at_step
with the global step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from commlab.codecs.base import Codec, Context, Layout, codec_class
from commlab.codecs.memory import Memory
from commlab.codecs.schedule import Schedule


@dataclass
class Compression:
    codec: Codec
    memory: Memory
    schedule: Schedule | None = None
    rounds: int = 0  # encode() calls so far: FL rounds this node has uploaded in

    def at_step(self, step: int, steps_per_epoch: int) -> None:
        """Run the schedule for global step `step` (nothing for a compressor without one)."""
        if self.schedule is not None:
            self.schedule.at_step(step, steps_per_epoch)

    def steady_from(self, steps_per_epoch: int) -> int:
        """The first step at the compressor's final setting: after DGC's warm-up, after
        PowerSGD's whole first steps; 0 for a compressor without a schedule."""
        return 0 if self.schedule is None else self.schedule.steady_from(steps_per_epoch)

    def encode(self, vec: np.ndarray) -> bytes:
        """The whole step for one sender (an FL round, one epoch of the schedule): compensate,
        encode, remember what the receiver decodes."""
        self.at_step(self.rounds, 1)
        self.rounds += 1
        sent = self.memory.compensate_in_place(vec)  # in the memory's own state: no vector more
        frame = self.codec.encode(sent)
        self.memory.update_from_frame(sent, frame, self.codec)  # `sent` is the memory's: the next state is made in it
        return frame

    def compress(self, vec: np.ndarray) -> tuple[bytes, np.ndarray]:
        """(frame, the compensated vector it encodes)."""
        sent = self.memory.compensate(vec)
        return self.codec.encode(sent), sent

    def remember(self, sent: np.ndarray, decoded: np.ndarray) -> None:
        self.memory.update(sent, decoded)

    def sent_share(self, decoded: np.ndarray) -> float:
        return self.codec.sent_share(decoded)

    def state_dict(self) -> dict:
        """The memory, and what a codec carries from step to step (DGC's sampling generator,
        PowerSGD's warm start), so a resumed run continues exactly."""
        return {"memory": self.memory.state_dict(), "codec": self.codec.state_dict(), "rounds": self.rounds}

    def load_state_dict(self, state: dict) -> None:
        self.memory.load_state_dict(state["memory"])
        self.rounds = int(state.get("rounds", 0))
        if state.get("codec") is not None:
            self.codec.load_state_dict(state["codec"])


def build_compression(name: str, params: dict[str, Any], layout: Layout, *, setting: str = "fl",
                      momentum: float = 0.0, nesterov: bool = False, world: int = 1, seed: int = 0,
                      run_seed: int = 0) -> Compression:
    """Compressor `name` with `params` (codec, memory and schedule parameters alike) as a node of
    `setting` ("fl" or "ddp") runs it; CodecError names a bad name or parameter. See Context for
    the rest."""
    cls, suffix_params = codec_class(name)
    context = Context(layout, setting, momentum, nesterov, world, seed, run_seed)
    return Compression(*cls.build({**suffix_params, **params}, context))
