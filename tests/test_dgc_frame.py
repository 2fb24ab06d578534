"""The DGC wire frame: exact round trip, compact size, and defensive decoding of any bytes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from commlab.dgc.frame import FrameError, decode_frame, encode_frame

NUMELS = [5000, 300]


def sample_frame(seed: int = 0, fp16: bool = True) -> tuple[bytes, list, np.ndarray]:
    rng = np.random.default_rng(seed)
    sparse = []
    for numel, k in zip(NUMELS, (40, 0)):
        idx = np.sort(rng.choice(numel, size=k, replace=False)).astype(np.int64)
        sparse.append((idx, rng.standard_normal(k).astype(np.float32)))
    dense = rng.standard_normal(7).astype(np.float32)
    return encode_frame(sparse, NUMELS, dense, fp16), sparse, dense


@pytest.mark.parametrize("fp16", [True, False])
def test_round_trip(fp16):
    frame, sparse, dense = sample_frame(fp16=fp16)
    got, got_dense = decode_frame(frame, NUMELS, 7)
    for (i, v), (gi, gv) in zip(sparse, got):
        assert np.array_equal(i, gi)
        assert np.allclose(v, gv, atol=2e-3 if fp16 else 0)
    assert np.array_equal(dense, got_dense)


def test_frame_is_compact():
    frame, _, _ = sample_frame()
    # 40 fp16 values + 40 varint gaps (mean gap 125 -> <= 2 bytes) + headers + 7 dense floats
    assert len(frame) <= 12 + 2 * 9 + 40 * 2 + 40 * 2 + 28


def test_rejects_wrong_layout_and_garbage():
    frame, _, _ = sample_frame()
    with pytest.raises(FrameError, match="sparse tensors"):
        decode_frame(frame, NUMELS + [10], 7)
    with pytest.raises(FrameError, match="dense"):
        decode_frame(frame, NUMELS, 8)
    with pytest.raises(FrameError, match="magic"):
        decode_frame(b"XXXX" + frame[4:], NUMELS, 7)
    with pytest.raises(FrameError, match="shorter"):
        decode_frame(frame[:5], NUMELS, 7)
    with pytest.raises(FrameError):
        decode_frame(frame[:-1], NUMELS, 7)
    with pytest.raises(FrameError, match="out of range|fit"):
        decode_frame(frame, [100, 300], 7)
    nan = encode_frame([(np.array([1]), np.array([np.nan], np.float32)),
                        (np.zeros(0, np.int64), np.zeros(0, np.float32))], NUMELS, np.zeros(7, np.float32))
    with pytest.raises(FrameError, match="non-finite"):
        decode_frame(nan, NUMELS, 7)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_fuzz_decode_raises_frame_error_or_returns_valid(data):
    frame, _, _ = sample_frame(data.draw(st.integers(0, 5)), data.draw(st.booleans()))
    buf = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        pos = data.draw(st.integers(0, max(len(buf) - 1, 0)))
        if op == "flip" and buf:
            buf[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "cut":
            del buf[pos:pos + data.draw(st.integers(1, 8))]
        else:
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
    try:
        sparse, dense = decode_frame(bytes(buf), NUMELS, 7)
    except FrameError:
        return
    for (idx, vals), numel in zip(sparse, NUMELS):
        assert idx.size == vals.size and (idx.size == 0 or (idx[-1] < numel and np.all(np.diff(idx) > 0)))
        assert np.isfinite(vals).all()
    assert dense.shape == (7,)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_random_bytes(blob):
    try:
        decode_frame(blob, NUMELS, 7)
    except FrameError:
        pass
