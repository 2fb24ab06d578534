"""Error feedback: remember what a lossy codec dropped and add it back before the next encode
(Seide et al. 2014; the "memory" of GRACE and DGC). Works with any codec.

    ef = ErrorFeedback()
    x = ef.compensate(update)          # update + residual
    frame = codec.encode(x)
    ef.update(x, codec.decode(frame))  # residual = x - what the receiver will see
"""
from __future__ import annotations

import numpy as np

from commlab.codecs.errors import CodecError


class ErrorFeedback:
    def __init__(self) -> None:
        self.residual: np.ndarray | None = None

    def compensate(self, vec: np.ndarray) -> np.ndarray:
        """Return a new vector: ``vec`` plus the residual carried from earlier steps."""
        vec = np.asarray(vec, dtype=np.float32)
        if self.residual is None:
            return vec.copy()
        if self.residual.shape != vec.shape:
            raise CodecError(f"error feedback: residual has shape {self.residual.shape}, vector {vec.shape}")
        return vec + self.residual

    def update(self, sent_input: np.ndarray, decoded: np.ndarray) -> None:
        """Record what was lost: the compensated input minus its decoded form."""
        self.residual = np.subtract(sent_input, decoded, dtype=np.float32)

    def state_dict(self) -> dict:
        return {"residual": None if self.residual is None else self.residual.copy()}

    def load_state_dict(self, state: dict) -> None:
        residual = state["residual"]
        self.residual = None if residual is None else np.array(residual, dtype=np.float32)
