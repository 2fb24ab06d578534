"""Reading qsgdz's Rice streams (qsgdz.py writes them): the layouts of a frame, the compiled
decoders of its RICE and VALUES streams into the output vector, and the checks that refuse every
stream that does not describe the frame's values, each in one line (CodecError)."""
from __future__ import annotations

import numpy as np

from commlab.codecs import chunks, rice
from commlab.codecs.errors import CodecError
from commlab.codecs.jit import kernel
from commlab.codecs.qsgd import level_steps, read_norms

# The layouts of a qsgdz frame (its parameters say which).
RICE, DENSE, VALUES, MASKS = 0, 1, 2, 3
LAYOUTS = f"{RICE} (Rice runs), {DENSE} (dense), {VALUES} (Rice values) or {MASKS} (coded bitmap)"
MAX_VALUE_PARAMETER = 7  # levels are bytes: a larger k only adds zero bits to every code


# What _decode_levels returns when a stream does not describe the frame's values.
_PAST_END, _GAP_OVERRUNS, _LEVEL_ABOVE, _RUN_OVERRUNS = range(-4, 0)


@kernel
def _decode_levels(words: np.ndarray, end: int, nonzero: int, top: int, k_gap: int, k_run: int, k_level: int,
                   steps: np.ndarray, bucket: int, out: np.ndarray) -> int:
    """Scatter the non-zero values of qsgdz's stream (``end`` bits in ``words``, padded as
    rice.py's reader reads them; see QSGDZ) into ``out`` (zeros): each level * steps[its
    bucket], negated where its sign bit is set. (Writing the zeros between them here, 16 or 32
    to a store, took longer than numpy's zeroing of the whole vector first.) Returns the bits read, or one of the
    errors above. Every code is bounded by what is left (positions in ``out``, non-zero levels,
    levels up to ``top``): a forged stream ends the loop at once."""
    bits, held, at = rice.start(words, 0)
    run, bits, held, at = rice.get_code(words, bits, held, at, end, k_run, nonzero)
    if run < 0:
        return _PAST_END if run == rice.PAST_END else _RUN_OVERRUNS
    position, last, c, bucket_end = 0, out.size - 1, 0, bucket  # position: after the last value written
    for j in range(nonzero):
        gap, negative, bits, held, at = rice.get_code_and_bit(words, bits, held, at, end, k_gap, last - position,
                                                              True)
        if gap < 0:
            return _PAST_END if gap == rice.PAST_END else _GAP_OVERRUNS
        position += gap
        level = 1
        if run:
            run -= 1
        else:
            level, bits, held, at = rice.get_code(words, bits, held, at, end, k_level, top - 2)
            if level < 0:
                return _PAST_END if level == rice.PAST_END else _LEVEL_ABOVE
            level += 2
            run, bits, held, at = rice.get_code(words, bits, held, at, end, k_run, nonzero - 1 - j)
            if run < 0:
                return _PAST_END if run == rice.PAST_END else _RUN_OVERRUNS
        while position >= bucket_end:  # buckets passed since the last value: no division a value
            c, bucket_end = c + 1, bucket_end + bucket
        value = np.float32(level) * steps[c]
        out[position] = -value if negative else value
        position += 1
    return at if at <= end else _PAST_END


_DECODE_ERRORS = {_PAST_END: "level stream ends before its {nonzero} non-zero levels",
                  _GAP_OVERRUNS: "a run of zero levels overruns the {numel} values",
                  _LEVEL_ABOVE: "a level above the {levels} levels in the header",
                  _RUN_OVERRUNS: "a run of levels 1 overruns the {nonzero} non-zero levels"}


@kernel
def _decode_values(words: np.ndarray, end: int, top: int, k: int, steps: np.ndarray, bucket: int,
                   out: np.ndarray) -> tuple[int, int]:
    """Write the values of qsgdz's VALUES stream (``end`` bits in ``words``, padded as rice.py's
    reader reads them; see QSGDZ) to ``out``, every one: level * steps[its bucket], negated where
    its sign bit is set. Returns (the bits read, or _PAST_END or _LEVEL_ABOVE, the non-zero
    levels read); each code is bounded by ``top`` before its quotient is shifted."""
    bits, held, at = rice.start(words, 0)
    nonzero = 0
    for c in range(steps.size):
        step = steps[c]
        for i in range(c * bucket, min(c * bucket + bucket, out.size)):
            level, negative, bits, held, at = rice.get_code_and_bit(words, bits, held, at, end, k, top, False)
            if level < 0:
                return (_PAST_END if level == rice.PAST_END else _LEVEL_ABOVE), nonzero
            nonzero += level != 0
            value = np.float32(level) * step
            out[i] = -value if negative else value
    return (at if at <= end else _PAST_END), nonzero


_VALUES_ERRORS = {_PAST_END: "level stream ends before its {numel} values", _LEVEL_ABOVE: _DECODE_ERRORS[_LEVEL_ABOVE]}


def decode_stream(name: str, numel: int, levels: int, bucket: int, layout: int, nonzero: int, parameters: list,
                  payload: memoryview) -> np.ndarray:
    """The vector of a RICE or VALUES payload, validated (a frame of another layout: CodecError)."""
    if layout not in (RICE, VALUES):
        raise CodecError(f"{name}: layout {layout}, not {LAYOUTS}")
    norm_len = 4 * chunks.count(numel, bucket)
    if len(payload) < norm_len:
        raise CodecError(f"{name}: payload {len(payload)} bytes, shorter than {numel} values' "
                         f"{norm_len} bytes of bucket norms")
    if nonzero > numel:
        raise CodecError(f"{name}: {nonzero} non-zero levels for only {numel} values")
    _check_rice_parameters(name, layout, parameters)
    norms = read_norms(name, payload, norm_len)
    stream = np.frombuffer(payload, np.uint8, offset=norm_len)
    words, bits, steps = rice.padded_words(stream), 8 * stream.size, level_steps(norms, levels)
    if layout == RICE:
        out = np.zeros(numel, np.float32)
        end, errors = _decode_levels(words, bits, nonzero, levels, *parameters, steps, bucket, out), _DECODE_ERRORS
    else:
        out = np.empty(numel, np.float32)  # every value is written
        end, found = _decode_values(words, bits, levels, parameters[2], steps, bucket, out)
        errors = _VALUES_ERRORS
        if end >= 0 and found != nonzero:
            raise CodecError(f"{name}: level stream has {found} non-zero levels, the header {nonzero}")
    if end < 0:
        raise CodecError(f"{name}: " + errors[end].format(nonzero=nonzero, numel=numel, levels=levels))
    check_stream_end(name, stream, end)
    return out


def check_stream_end(name: str, stream: np.ndarray, end: int) -> None:
    """That a stream's codes, ``end`` bits, fill its bytes, with zero padding bits."""
    if stream.size != -(-end // 8):
        raise CodecError(f"{name}: level stream of {stream.size} bytes, its codes end in byte {-(-end // 8)}")
    if end % 8 and stream[-1] >> (end % 8):
        raise CodecError(f"{name}: level stream has non-zero padding bits")


def _check_rice_parameters(name: str, layout: int, parameters: list) -> None:
    if layout == VALUES:
        if parameters[0] or parameters[1]:
            raise CodecError(f"{name}: per-value frame with k_gap, k_run {tuple(parameters[:2])}, not zeros")
        if parameters[2] > MAX_VALUE_PARAMETER:
            raise CodecError(f"{name}: per-value Rice parameter {parameters[2]} above {MAX_VALUE_PARAMETER}")
    elif max(parameters) > rice.MAX_PARAMETER:
        raise CodecError(f"{name}: Rice parameters {parameters} above {rice.MAX_PARAMETER}")
