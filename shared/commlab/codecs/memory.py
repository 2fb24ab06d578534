"""What a node remembers between the vectors it compresses (GRACE's Memory): the same three calls
around any codec, in FL uploads and DDP steps alike.

    x = memory.compensate(vec)         # vec plus what earlier steps held back
    frame = codec.encode(x)
    memory.update(x, codec.decode(frame))   # remember what the receivers did not get

NoMemory: lossless codecs. ErrorFeedback: the residual of a lossy codec is added to the next
vector (Seide et al. 2014; EF-SGD), so what a codec drops is delayed, not lost. DgcMemory: DGC's
momentum correction and local accumulation, momentum factor masking and local clipping (Lin et
al. 2018, sections 3.2-3.4); the optimizer then does plain SGD. Memories are per node and go into
its checkpoint (state_dict); codecs hold no memory.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

import numpy as np

from commlab.codecs.errors import CodecError

if TYPE_CHECKING:  # base imports this module
    from commlab.codecs.base import Codec


class Memory(Protocol):
    # True when momentum lives in the memory (DGC): the optimizer must not apply it again.
    applies_momentum: bool

    def compensate(self, vec: np.ndarray) -> np.ndarray: ...
    # compensate(), made where the memory's own state lies when it can be (no vector of the
    # model's size besides `vec`): the state is then consumed until update_from_frame follows.
    def compensate_in_place(self, vec: np.ndarray) -> np.ndarray: ...
    def update(self, compensated: np.ndarray, decoded: np.ndarray) -> None: ...
    # update() with the frame sent instead of its decoded form; `compensated` is the memory's own
    # to change (compensate made it for this frame): no decoded vector where a memory needs none.
    def update_from_frame(self, compensated: np.ndarray, frame: bytes, codec: Codec) -> None: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


class NoMemory:
    applies_momentum = False

    def compensate(self, vec: np.ndarray) -> np.ndarray:
        return np.asarray(vec, dtype=np.float32)

    def compensate_in_place(self, vec: np.ndarray) -> np.ndarray:
        return self.compensate(vec)

    def update(self, compensated: np.ndarray, decoded: np.ndarray) -> None:
        pass

    def update_from_frame(self, compensated: np.ndarray, frame: bytes, codec: Codec) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class ErrorFeedback:
    """The residual of a lossy codec, added to the next vector.

    `decay` and `clip` bound what is carried, for FL (defaults: the plain EF-SGD residual, as DDP
    uses it). An FL residual is a round old: the client's next round of local training starts
    from a model that already moved, and re-learns part of what the last frame dropped, so the
    whole residual on top of the new delta counts that part twice and can overshoot (FL
    powersgd2 with a whole first round: 98.0 % in rounds 8-9, then 93.9 % in round 10).
    decay: share of the residual carried (1: all). clip: the carried residual's norm is at most
    `clip` times the norm of the new vector (None: no bound), so it can never dominate it.
    """
    applies_momentum = False

    def __init__(self, decay: float = 1.0, clip: float | None = None) -> None:
        try:
            self.decay, self.clip = float(decay), None if clip is None else float(clip)
        except (TypeError, ValueError):
            raise CodecError(f"error feedback: decay and clip must be numbers, got {decay!r}, {clip!r}") from None
        if not 0.0 <= self.decay <= 1.0 or (self.clip is not None and not self.clip >= 0.0):
            raise CodecError(f"error feedback: need 0 <= decay <= 1 and clip >= 0 (or None), got {decay}, {clip}")
        self.residual: np.ndarray | None = None

    def compensate(self, vec: np.ndarray) -> np.ndarray:
        """Return a new vector: ``vec`` plus the residual carried from earlier steps (decayed,
        then clipped)."""
        vec = np.asarray(vec, dtype=np.float32)
        if self.residual is None:
            return vec.copy()
        self._check(vec)
        return self._carry(vec, self.residual.copy())

    def compensate_in_place(self, vec: np.ndarray) -> np.ndarray:
        """compensate(), made in the residual's own storage (the same float32 bits: each step is
        the same elementwise operation): the residual is gone until update_from_frame makes the
        next one from the vector returned. An encode that raises in between leaves no residual to
        go back to; a caller that must go back keeps a copy (state_dict) first."""
        vec = np.asarray(vec, dtype=np.float32)
        if self.residual is None:
            return vec.copy()
        self._check(vec)
        carried, self.residual = self.residual, None
        return self._carry(vec, carried)

    def _check(self, vec: np.ndarray) -> None:
        if self.residual.shape != vec.shape:
            raise CodecError(f"error feedback: residual has shape {self.residual.shape}, vector {vec.shape}")

    def _carry(self, vec: np.ndarray, carried: np.ndarray) -> np.ndarray:
        """vec plus `carried` (a residual the caller gives up), decayed then clipped, in `carried`."""
        if self.decay != 1.0:
            carried *= np.float32(self.decay)
        if self.clip is not None:
            norm, limit = float(np.linalg.norm(carried)), self.clip * float(np.linalg.norm(vec))
            if norm > limit:
                carried *= np.float32(limit / norm)
        carried += vec  # vec + carried: float addition is commutative, bit for bit
        return carried

    def update(self, compensated: np.ndarray, decoded: np.ndarray) -> None:
        """Record what was lost: the compensated input minus its decoded form."""
        self.residual = np.subtract(compensated, decoded, dtype=np.float32)

    def update_from_frame(self, compensated: np.ndarray, frame: bytes, codec: Codec) -> None:
        """update(), the frame's values taken out of `compensated` where it lies: the same float32
        differences, with no decoded vector and no new one (a sparse frame touches its kept values only)."""
        codec.add_decoded(frame, compensated, -1.0)
        self.residual = compensated

    def state_dict(self) -> dict:
        return {"residual": None if self.residual is None else self.residual.copy()}

    def load_state_dict(self, state: dict) -> None:
        residual = state["residual"]
        self.residual = None if residual is None else np.array(residual, dtype=np.float32)


class DgcMemory:
    """Momentum is applied before sparsification, so what stays local is the accumulated
    *velocity*, not the raw gradient. Masking zeroes the momentum of coordinates just sent, so
    stale momentum does not push them again; it applies only where `maskable` (the tensors DGC
    sparsifies: the dense ones are sent whole every step)."""
    applies_momentum = True

    def __init__(self, maskable: np.ndarray, momentum: float = 0.9, nesterov: bool = False, masking: bool = True,
                 clip_norm: float | None = None, world: int = 1) -> None:
        self.maskable = np.asarray(maskable, dtype=bool)
        self.momentum, self.nesterov, self.masking = momentum, nesterov, masking
        self.clip_norm, self.world = clip_norm, world
        self.momentums = np.zeros(self.maskable.size, np.float32)
        self.velocities = np.zeros(self.maskable.size, np.float32)

    def compensate(self, vec: np.ndarray) -> np.ndarray:
        grad = np.asarray(vec, dtype=np.float32)
        if grad.shape != self.velocities.shape:
            raise CodecError(f"dgc memory: vector has shape {grad.shape}, memory {self.velocities.shape}")
        if self.clip_norm is not None:
            # Local clipping (3.4): clip_norm is the threshold of vanilla clipping of the update,
            # here the *mean* of the `world` gradients. The paper clips each node's share G_k =
            # g_k / world of a sum at clip_norm / sqrt(world) (the sum of N noise-dominated shares
            # has about sqrt(N) times the norm of one); on the node's own mean gradient g_k, which
            # is what this memory gets, that is clip_norm * world / sqrt(world) = clip_norm *
            # sqrt(world). (Clipping g_k at clip_norm / sqrt(world) clipped world times harder.)
            norm, limit = float(np.linalg.norm(grad)), self.clip_norm * math.sqrt(self.world)
            if norm > limit:
                grad = grad * np.float32(limit / (norm + 1e-6))
        if self.nesterov:
            self.momentums += grad
            self.momentums *= self.momentum
            step = self.momentums + grad
        else:
            self.momentums *= self.momentum
            self.momentums += grad
            step = self.momentums
        self.velocities += step
        return self.velocities.copy()

    def compensate_in_place(self, vec: np.ndarray) -> np.ndarray:
        return self.compensate(vec)

    def update_from_frame(self, compensated: np.ndarray, frame: bytes, codec: Codec) -> None:
        self.update(compensated, codec.decode(frame, numel=compensated.size))

    def update(self, compensated: np.ndarray, decoded: np.ndarray) -> None:
        """Remove what was sent from the velocity (keeping any rounding error of the values)."""
        self.velocities -= decoded
        if self.masking:
            self.momentums[(decoded != 0) & self.maskable] = 0.0

    def state_dict(self) -> dict:
        return {"momentums": self.momentums.copy(), "velocities": self.velocities.copy(), "masking": self.masking}

    def load_state_dict(self, state: dict) -> None:
        for key in ("momentums", "velocities"):
            value = np.array(state[key], dtype=np.float32)
            if value.shape != self.velocities.shape:
                raise CodecError(f"dgc memory: saved {key} have shape {value.shape}, memory {self.velocities.shape}")
            setattr(self, key, value)
        self.masking = bool(state["masking"])
