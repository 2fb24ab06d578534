"""The error-feedback memory (ErrorFeedback): what a lossy codec leaves out is carried into the next
step, so nothing is lost over many steps or across a checkpoint; the residual stays bounded."""
from __future__ import annotations

import numpy as np
import pytest

from commlab.codecs import CodecError, ErrorFeedback, decode_any, get_codec
from commlab.codecs.compression import build_compression

# A numpy warning (overflow, invalid cast) inside a codec means a silently wrong vector.
pytestmark = pytest.mark.filterwarnings("error")


@pytest.mark.parametrize("name", ["int8", "int8_sparse", "fp32_sparse", "minmax4", "qsgd8", "signsgd", "terngrad", "randomk"])
def test_error_feedback_conserves_the_sum(name):
    rng = np.random.default_rng(5)
    codec, ef = get_codec(name), ErrorFeedback()
    inputs = [rng.standard_normal(1000).astype(np.float32) for _ in range(20)]
    sent = np.zeros(1000, np.float64)
    for step, vec in enumerate(inputs):
        x = ef.compensate(vec)
        decoded = decode_any(codec.encode(x))
        ef.update(x, decoded)
        sent += decoded
        if step == 9:  # a checkpoint/restore mid-way must not lose the residual
            restored = ErrorFeedback()
            restored.load_state_dict(ef.state_dict())
            ef = restored
    total = np.sum(inputs, axis=0, dtype=np.float64)
    np.testing.assert_allclose(sent + ef.residual, total, atol=1e-4)
    assert np.abs(ef.residual).max() > 0  # the codec really was lossy


def error_feedback_residual_ratios(name: str, rounds: int = 10) -> list[float]:
    """||residual|| / ||delta|| after each round of error feedback on a stream of CNN-like model
    deltas (N(0, 1e-3)) with five large outliers (0.5) at random places, as an FL client sends them."""
    rng = np.random.default_rng(11)
    comp = build_compression(name, {}, layout=[])
    ratios = []
    for _ in range(rounds):
        delta = (rng.standard_normal(200_000) * 1e-3).astype(np.float32)
        delta[rng.choice(delta.size, 5, replace=False)] = 0.5
        comp.encode(delta)
        ratios.append(float(np.linalg.norm(comp.memory.residual) / np.linalg.norm(delta)))
    return ratios


def test_minmax2_error_feedback_residual_stays_bounded():
    # With one min and scale for the whole vector the outliers set a step of about 0.17 for every
    # value, and the residual grew every round (1.8x to 22x the delta norm over 10 rounds); per
    # chunk only the outliers' own chunks get the coarse step.
    ratios = error_feedback_residual_ratios("minmax2")
    assert max(ratios) < 3, ratios


def test_error_feedback_rejects_shape_change():
    ef = ErrorFeedback()
    ef.update(np.ones(3, np.float32), np.zeros(3, np.float32))
    with pytest.raises(CodecError, match="residual has shape"):
        ef.compensate(np.ones(4, np.float32))
