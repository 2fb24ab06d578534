"""fp16 and bf16: round to nearest even as torch converts (the reference), error bounds, exact
frame sizes at half of fp32's, refusals, untrusted frames; built without memory and exchanged by
allreduce in both settings."""
from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from commlab.codecs import CodecError, NoMemory, build_compression, decode_any, get_codec, wire
from commlab.codecs.base import ALLREDUCE
from commlab.codecs.fp16 import from_fp16, to_fp16
from frame_mutations import mutated

pytestmark = pytest.mark.filterwarnings("error")  # a numpy warning in a codec is a silently wrong vector

FP16_MAX = 65504.0
# (codec, torch's dtype: the reference conversion, relative error bound, absolute bound among subnormals)
HALVES = {"fp16": (torch.float16, 2.0**-11, 2.0**-25), "bf16": (torch.bfloat16, 2.0**-8, 2.0**-134)}


def finite_vectors(limit: float) -> st.SearchStrategy[np.ndarray]:
    values = st.floats(-limit, limit, allow_nan=False, allow_infinity=False, allow_subnormal=True, width=32)
    return arrays(np.float32, st.integers(0, 300), elements=values)


def reference(name: str, vec: np.ndarray) -> np.ndarray:
    return torch.from_numpy(vec).to(HALVES[name][0]).float().numpy()


@pytest.mark.parametrize("name, limit", [("fp16", FP16_MAX), ("bf16", float(np.float32(3e38)))])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_round_trip_is_torchs_conversion_within_the_bound(name, limit, data):
    vec = data.draw(finite_vectors(limit))
    frame = get_codec(name).encode(vec)
    out = decode_any(frame, numel=vec.size)
    assert out.dtype == np.float32 and out.tobytes() == reference(name, vec).tobytes()
    _, rel, small = HALVES[name]
    assert (np.abs(out.astype(np.float64) - vec) <= np.maximum(rel * np.abs(vec.astype(np.float64)), small)).all()
    assert len(frame) == get_codec(name).wire_size(vec.size) == wire.HEADER.size + 2 * vec.size
    assert decode_any(get_codec(name).encode(out)).tobytes() == out.tobytes()  # already representable: exact


@pytest.mark.parametrize("name, x, rounded", [
    ("fp16", 1 + 2**-11, 1.0), ("fp16", 1 + 3 * 2**-11, 1 + 2**-9),  # ties to the even significand
    ("fp16", 65519.0, FP16_MAX), ("fp16", 2**-24 * 0.75, 2**-24),     # below the boundary; subnormal
    ("bf16", 1 + 2**-8, 1.0), ("bf16", 1 + 3 * 2**-8, 1 + 2**-6),
    ("bf16", -(1 + 2**-8 + 2**-20), -(1 + 2**-7)),
    ("bf16", 1.25 * 2**-133, 2**-133), ("bf16", 1.5 * 2**-133, 2**-132),  # float32 subnormals: ulp 2**-133
])
def test_rounding_to_nearest_even(name, x, rounded):
    assert decode_any(get_codec(name).encode(np.array([x], np.float32)))[0] == np.float32(rounded)


def test_every_finite_fp16_word_decodes_as_numpy_and_encodes_back_to_itself():
    words = np.arange(1 << 16, dtype=np.uint16)
    words = words[(words & 0x7C00) != 0x7C00]  # Inf and NaN have no place in a frame
    values = from_fp16(words)
    assert values.tobytes() == words.view(np.float16).astype(np.float32).tobytes()
    assert to_fp16(values).tobytes() == words.tobytes()


@pytest.mark.parametrize("name, bad", [("fp16", np.nan), ("fp16", np.inf), ("fp16", 65520.0), ("fp16", -1e6),
                                       ("bf16", np.nan), ("bf16", -np.inf), ("bf16", np.finfo(np.float32).max)])
def test_values_without_a_finite_half_are_refused(name, bad):
    with pytest.raises(CodecError, match=f"^{name}: values must"):
        get_codec(name).encode(np.array([1.0, bad], np.float32))


@pytest.mark.parametrize("name", HALVES)
def test_half_the_bytes_of_fp32_and_built_to_be_summed_without_memory(name):
    numel = 1_663_370  # the MNIST CNN
    assert (get_codec(name).wire_size(numel) - wire.HEADER.size) / (get_codec("fp32").wire_size(numel) - wire.HEADER.size) == 0.5
    for setting in ("fl", "ddp"):
        comp = build_compression(name, {}, [("w", (10, 10))], setting=setting, seed=3)
        assert comp.codec.exchange == ALLREDUCE and isinstance(comp.memory, NoMemory) and comp.schedule is None
    with pytest.raises(CodecError, match="unknown parameters"):
        get_codec(name, levels=4)


def frame_of(name: str, numel: int, payload: bytes, params: bytes = b"") -> bytes:
    codec_id = get_codec(name).codec_id
    return wire.HEADER.pack(wire.MAGIC, wire.VERSION, codec_id, wire.DTYPE_FLOAT32, len(params), numel,
                            len(payload)) + params + payload


@pytest.mark.parametrize("name", HALVES)
def test_malformed_frames_are_one_line_codec_errors(name):
    codec, good = get_codec(name), get_codec(name).encode(np.arange(4, dtype=np.float32))
    nan = {"fp16": 0x7E00, "bf16": 0x7FC0}[name]
    inf = {"fp16": 0xFC00, "bf16": 0xFF80}[name]
    cases = [
        (good[:-1], "truncated"), (good + b"\0", "oversized"),
        (frame_of(name, 4, good[wire.HEADER.size:-2]), f"{name}: payload 6 bytes, 4 elements need 8"),
        (frame_of(name, 2, struct.pack("<HH", 0x3C00, nan)), f"{name}: frame holds Inf or NaN"),
        (frame_of(name, 1, struct.pack("<H", inf)), f"{name}: frame holds Inf or NaN"),
        (frame_of(name, 1, struct.pack("<H", 0), params=b"\1"), "1 parameter bytes, expected 0"),
        (get_codec("fp32").encode(np.ones(4, np.float32)), "carries codec id 1"),
    ]
    for frame, message in cases:
        with pytest.raises(CodecError, match=message):
            codec.decode(frame)
    with pytest.raises(CodecError, match="frame has 4 elements, expected 5"):
        codec.decode(good, numel=5)


@pytest.mark.parametrize("name", HALVES)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_mutated_frames_decode_to_finite_values_or_raise_codec_error(name, data):
    frame = mutated(data, get_codec(name).encode(np.linspace(-3, 3, 40, dtype=np.float32)))
    try:
        out = decode_any(frame, max_numel=1 << 12)
    except CodecError:
        return
    assert out.dtype == np.float32 and np.isfinite(out).all()
