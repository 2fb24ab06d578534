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


@pytest.mark.parametrize("decay, clip", [(1.0, None), (0.7, None), (1.0, 0.1), (0.5, 0.3)])
def test_compensating_in_place_gives_the_same_bits_in_the_residuals_storage(decay, clip):
    """compensate_in_place: the vector compensate() makes, bit for bit, in the residual's own
    array (no second model-sized vector); the residual is consumed until the next update."""
    rng = np.random.default_rng(3)
    vec, residual = rng.standard_normal(500).astype(np.float32), rng.standard_normal(500).astype(np.float32)
    copied, in_place = ErrorFeedback(decay, clip), ErrorFeedback(decay, clip)
    copied.residual, in_place.residual = residual.copy(), residual.copy()
    storage = in_place.residual
    expected = copied.compensate(vec)
    assert np.array_equal(copied.residual, residual)  # compensate() leaves the residual alone
    got = in_place.compensate_in_place(vec)
    assert got is storage and in_place.residual is None
    assert got.tobytes() == expected.tobytes()


def test_compression_encode_sends_the_frames_of_compress_and_remember():
    """Compression.encode (compensating in place) sends, step after step, the frames of the
    copying path: compress, then remember what the receiver decodes."""
    rng = np.random.default_rng(4)
    layout = [("w", (400,))]
    in_place, copying = build_compression("int8_sparse", {}, layout), build_compression("int8_sparse", {}, layout)
    for _ in range(4):
        vec = rng.standard_normal(400).astype(np.float32)
        frame, sent = copying.compress(vec)
        copying.remember(sent, decode_any(frame))
        assert in_place.encode(vec) == frame
