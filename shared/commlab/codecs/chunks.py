"""Per-chunk views for the codecs that scale each run of C consecutive values on its own (minmax
chunks, qsgd buckets, signsgd and terngrad blocks): numpy works on every chunk at once through
2-D views, with no loop over chunks."""
from __future__ import annotations

import numpy as np


def count(numel: int, chunk: int) -> int:
    """Chunks of ``chunk`` values covering ``numel`` values; the last may be shorter."""
    return -(-numel // chunk)


def rows(x: np.ndarray, chunk: int) -> list[tuple[slice, np.ndarray]]:
    """2-D views of a flat array, with the chunks they hold: all whole chunks as one (k, chunk)
    view, then the ragged last chunk as a (1, rest) view. Never more than two."""
    whole = x.size // chunk
    out = [(slice(0, whole), x[: whole * chunk].reshape(whole, chunk))] if whole else []
    if whole * chunk < x.size:
        out.append((slice(whole, whole + 1), x[whole * chunk :].reshape(1, -1)))
    return out

