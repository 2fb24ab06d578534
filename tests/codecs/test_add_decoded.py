"""Codec.add_decoded: out += weight * decode(frame), bit for bit, validated as decode is; the
sparse int8 codec adds its kept values where they go (an aggregate or a replica decoded into)."""
import numpy as np
import pytest

from commlab.codecs import CodecError, build_compression, codec_of, get_codec


@pytest.mark.parametrize("name", ["int8_sparse", "int8", "fp16", "fp32"])
def test_adding_a_frame_is_adding_its_decoded_vector(name):
    rng = np.random.default_rng(5)
    codec, vec, out = get_codec(name), rng.standard_normal(5000).astype(np.float32), rng.standard_normal(5000).astype(np.float32)
    frame = codec.encode(vec)
    expected = out + np.float32(0.375) * codec.decode(frame, numel=vec.size)
    codec.add_decoded(frame, out, 0.375)
    assert out.tobytes() == expected.tobytes()
    assert type(codec_of(frame)) is type(codec)


def test_a_bad_frame_leaves_the_vector_as_it_was():
    codec, out = get_codec("int8_sparse"), np.ones(100, np.float32)
    frame = codec.encode(np.arange(100, dtype=np.float32))
    with pytest.raises(CodecError, match="frame truncated"):
        codec.add_decoded(frame[:-3], out, 1.0)
    with pytest.raises(CodecError, match="frame has 100 elements, expected 99"):
        codec.add_decoded(frame, out[:99], 1.0)
    assert (out == 1).all()


def test_error_feedback_takes_the_frame_out_of_the_vector_it_sent():
    """The residual made from the frame in place is the one made from its decoded form."""
    layout = [("w", (4000,))]
    by_frame, by_vector = build_compression("int8_sparse", {}, layout), build_compression("int8_sparse", {}, layout)
    for vec in np.random.default_rng(6).standard_normal((3, 4000)).astype(np.float32):
        frame = by_frame.encode(vec)
        sent_frame, sent = by_vector.compress(vec)
        by_vector.remember(sent, by_vector.codec.decode(sent_frame, numel=sent.size))
        assert frame == sent_frame
        assert by_frame.memory.residual.tobytes() == by_vector.memory.residual.tobytes()
