"""Sixteen values at a time, for the compiled loops (jit.py) that LLVM does not vectorise on its
own: packing the selected values of a block (compaction) and its inverse, the masks that select
them, and the one-byte deltas of 16 increasing indices (varints, indices.py). A scalar loop that
packs values advances its count one value at a time, about a cycle a value; these emit LLVM's
target-independent vector operations (``llvm.experimental.vector.compress``,
``llvm.masked.expandload``, ``llvm.ctpop``, a vector compare), which an AVX-512 machine runs as
a few instructions per 16 values and other targets as equivalent scalar code, but for compress
and expand on AVX2 machines: there a permutation of each 8 lanes (lanes_avx2.py). No arithmetic
rounds (values are compared and moved, not computed) but ``scale_signed``'s one float32 product,
rounded as numpy's.

A mask is an integer whose bit j stands for lane j, the value at ``start + j``. Each operation
checks that its block lies within its arrays (IndexError otherwise: a branch that never goes the
other way); ``compress`` writes all 16 lanes of its destination, past the packed values, so a
destination has 16 spare slots after the last value packed into it.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.core.errors import TypingError
from numba.extending import intrinsic

from commlab.codecs import lanes_avx2
from commlab.codecs.jit import kernel

LANES = 16
BYTE_LANES = 64  # the byte masks that only count: one AVX-512 compare of 64 bytes
_I32, _I64 = ir.IntType(32), ir.IntType(64)
MASK = ir.VectorType(ir.IntType(1), LANES)


def vector_at(context, builder, array_type, array: ir.Value, start_type, start: ir.Value, width: int = LANES,
               span: ir.Value | None = None) -> tuple[ir.Value, ir.VectorType]:
    """``array[start:start + width]`` as a pointer to one vector, and the vector's type; IndexError
    unless ``array[start:start + span]`` (span: ``width`` unless given) lies within the array."""
    vector = ir.VectorType(context.get_value_type(array_type.dtype), width)
    values = context.make_array(array_type)(context, builder, array)
    first = context.cast(builder, start, start_type, types.int64)
    last = builder.add(first, ir.Constant(_I64, width) if span is None else span)
    outside = builder.or_(builder.icmp_signed("<", first, ir.Constant(_I64, 0)),
                          builder.icmp_signed(">", last, values.nitems))
    with builder.if_then(outside, likely=False):
        context.call_conv.return_user_exc(builder, IndexError, ("lanes: a block of values beyond its array",))
    return builder.bitcast(builder.gep(values.data, [first]), vector.as_pointer()), vector


def _mask_bits(context, builder, mask_type, mask: ir.Value) -> ir.Value:
    """A mask's low 16 bits, as an i32."""
    word = context.cast(builder, mask, mask_type, types.uint32)
    return builder.and_(word, ir.Constant(_I32, (1 << LANES) - 1))


def _lane_mask(context, builder, mask_type, mask: ir.Value) -> ir.Value:
    """A mask (any integer type numba inferred) as LLVM's vector of 16 booleans, from its low 16 bits."""
    word = context.cast(builder, mask, mask_type, types.uint32)
    return builder.bitcast(builder.trunc(word, ir.IntType(LANES)), MASK)


def splat(builder, scalar: ir.Value, vector: ir.VectorType) -> ir.Value:
    """``scalar`` in every lane of a ``vector``."""
    one = builder.insert_element(ir.Constant(vector, None), scalar, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, one, ir.Constant(ir.VectorType(_I32, vector.count), None))


def _intrinsic_function(builder, name: str, vector: ir.VectorType, arguments: list) -> ir.Function:
    """LLVM's intrinsic ``name`` for vectors of 16 of ``vector``'s elements (f32, i32, ...)."""
    element = vector.element
    suffix = "f32" if isinstance(element, ir.FloatType) else f"i{element.width}"
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, arguments), f"{name}.v16{suffix}")


def _store_compressed(context, builder, values: ir.Value, mask_type, mask: ir.Value, target: ir.Value) -> None:
    """The lanes of ``values`` set in the mask, packed to the front of the 16 stored at ``target``.
    Packed as 32-bit integers whatever the element type (the same bits): LLVM's expansion of a
    compress of floats for a target without one (AVX2) aborts the process."""
    words = ir.VectorType(_I32, LANES)
    if lanes_avx2.wanted(context):
        lanes_avx2.store_compressed(builder, builder.bitcast(values, words), _mask_bits(context, builder, mask_type, mask),
                                    builder.bitcast(target, _I32.as_pointer()))
        return
    fn = _intrinsic_function(builder, "llvm.experimental.vector.compress", words, [words, MASK, words])
    lanes = _lane_mask(context, builder, mask_type, mask)
    packed = builder.call(fn, [builder.bitcast(values, words), lanes, ir.Constant(words, None)])
    builder.store(packed, builder.bitcast(target, words.as_pointer()), align=4)


def _compare(predicate: str, width: int, low_bits: int | None = None):
    """An intrinsic (array of unsigned integers, start, value) -> the mask of ``array[start + j]
    <predicate> value`` for j < ``width`` (uint32 for up to 32 lanes, else uint64); with
    ``low_bits``, of the keys' low ``low_bits`` bits only (the key and'ed in the register)."""
    result = types.uint32 if width <= 32 else types.uint64

    @intrinsic
    def compare(typingctx, keys, start, value):
        if not (isinstance(keys.dtype, types.Integer) and not keys.dtype.signed):
            raise TypingError(f"lanes: compares unsigned integers, not {keys.dtype}")
        if low_bits is not None and keys.dtype.bitwidth <= low_bits:
            raise TypingError(f"lanes: the low {low_bits} bits of keys wider than that, not {keys.dtype}")

        def codegen(context, builder, sig, args):
            pointer, vector = vector_at(context, builder, sig.args[0], args[0], sig.args[1], args[1], width)
            scalar = builder.trunc(context.cast(builder, args[2], sig.args[2], types.uint64), vector.element)
            loaded = builder.load(pointer, align=1)
            if low_bits is not None:
                loaded = builder.and_(loaded, ir.Constant(vector, (1 << low_bits) - 1))
            hits = builder.icmp_unsigned(predicate, loaded, splat(builder, scalar, vector))
            return builder.zext(builder.bitcast(hits, ir.IntType(width)), context.get_value_type(result))
        return result(keys, start, value), codegen
    return compare


# The 16 lanes whose (unsigned) key is below, equal to, at least or above the value.
below, equal, at_least, above = (_compare(predicate, LANES) for predicate in ("<", "==", ">=", ">"))
# The 64 bytes below or equal to the value.
below_64, equal_64 = (_compare(predicate, BYTE_LANES) for predicate in ("<", "=="))
# The 16 lanes whose key without its top bit is at least the value: of float32 bits, the
# magnitudes (top-k's keys) at least a mark, with no pass that writes the magnitudes out.
magnitude_at_least = _compare(">=", LANES, low_bits=31)


def _popcount(context, builder, mask_type, mask: ir.Value) -> ir.Value:
    ctpop = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I64, [_I64]), "llvm.ctpop.i64")
    return builder.call(ctpop, [context.cast(builder, mask, mask_type, types.uint64)])


@intrinsic
def popcount(typingctx, mask):
    """The number of set bits of a mask (int64)."""
    def codegen(context, builder, sig, args):
        return _popcount(context, builder, sig.args[0], args[0])
    return types.int64(mask), codegen


def _four_byte(*arrays) -> None:
    """Refuse, when a loop is compiled, arrays of elements other than 4 bytes: LLVM 20 splits a
    compress of 16 wider elements into two and the code it made crashed."""
    for array in arrays:
        if array.dtype.bitwidth != 32:
            raise TypingError(f"lanes: 16 lanes of 4-byte elements only, not {array.dtype}")


@intrinsic
def compress(typingctx, src, start, mask, dst, at):
    """dst[at:at + popcount(mask)] = the lanes of src[start:start + 16] set in ``mask``, in order;
    dst[at + popcount(mask):at + 16] is overwritten with unspecified values. src and dst: arrays
    of one 4-byte dtype."""
    _four_byte(src, dst)

    def codegen(context, builder, sig, args):
        source, _ = vector_at(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        target, _ = vector_at(context, builder, sig.args[3], args[3], sig.args[4], args[4])
        _store_compressed(context, builder, builder.load(source, align=4), sig.args[2], args[2], target)
        return context.get_dummy_value()
    return types.void(src, start, mask, dst, at), codegen


@intrinsic
def compress_positions(typingctx, start, mask, dst, at):
    """``compress`` of the positions start..start + 15 (built in a register) into an int32 or uint32 array."""
    _four_byte(dst)

    def codegen(context, builder, sig, args):
        target, vector = vector_at(context, builder, sig.args[2], args[2], sig.args[3], args[3])
        first = builder.trunc(context.cast(builder, args[0], sig.args[0], types.int64), vector.element)
        ramp = builder.add(splat(builder, first, vector), ir.Constant(vector, list(range(LANES))))
        _store_compressed(context, builder, ramp, sig.args[1], args[1], target)
        return context.get_dummy_value()
    return types.void(start, mask, dst, at), codegen


@intrinsic
def expand(typingctx, src, at, mask, dst, start):
    """dst[start:start + 16] = in the lanes set in ``mask`` the values src[at:at + popcount(mask)],
    in order, 0 in the others; reads only those values of src. The inverse of ``compress``; src
    and dst: arrays of one 4-byte dtype."""
    _four_byte(src, dst)

    def codegen(context, builder, sig, args):
        count = _popcount(context, builder, sig.args[2], args[2])
        source, vector = vector_at(context, builder, sig.args[0], args[0], sig.args[1], args[1], span=count)
        target, _ = vector_at(context, builder, sig.args[3], args[3], sig.args[4], args[4])
        if lanes_avx2.wanted(context):
            words = lanes_avx2.load_expanded(builder, builder.bitcast(source, _I32.as_pointer()),
                                             _mask_bits(context, builder, sig.args[2], args[2]))
            builder.store(words, builder.bitcast(target, words.type.as_pointer()), align=4)
            return context.get_dummy_value()
        fn = _intrinsic_function(builder, "llvm.masked.expandload", vector, [source.type, MASK, vector])
        lanes = _lane_mask(context, builder, sig.args[2], args[2])
        spread = builder.call(fn, [source, lanes, ir.Constant(vector, None)])
        builder.store(spread, target, align=4)
        return context.get_dummy_value()
    return types.void(src, at, mask, dst, start), codegen


@intrinsic
def byte_deltas(typingctx, idx, start, out, at):
    """out[at:at + 16] = the low bytes of idx[start + j] - idx[start + j - 1] for j < 16 (start >= 1);
    returns the mask of the lanes whose difference is below 0x80 (unsigned): where it is all 16,
    those bytes are the one-byte varints of 16 increasing indices' deltas. idx: int32 or uint32;
    out: uint8."""
    _four_byte(idx)
    if out.dtype != types.uint8:
        raise TypingError(f"lanes: writes the deltas' bytes into uint8, not {out.dtype}")

    def codegen(context, builder, sig, args):
        current, vector = vector_at(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        before = builder.sub(context.cast(builder, args[1], sig.args[1], types.int64), ir.Constant(_I64, 1))
        previous, _ = vector_at(context, builder, sig.args[0], args[0], types.int64, before)
        deltas = builder.sub(builder.load(current, align=4), builder.load(previous, align=4))
        target, bytes_ = vector_at(context, builder, sig.args[2], args[2], sig.args[3], args[3])
        builder.store(builder.trunc(deltas, bytes_), target, align=1)
        small = builder.icmp_unsigned("<", deltas, ir.Constant(vector, [0x80] * LANES))
        return builder.zext(builder.bitcast(small, ir.IntType(LANES)), _I32)
    return types.uint32(idx, start, out, at), codegen


@intrinsic
def scale_signed(typingctx, levels, start, scale, mask, out):
    """out[start:start + 16] = float32(levels[start:start + 16]) * scale, negated (the sign bit
    flipped) in the lanes set in ``mask``: qsgd's decoded values from its byte levels, one
    product each. levels: uint8; out: float32."""
    if levels.dtype != types.uint8 or out.dtype != types.float32:
        raise TypingError(f"lanes: scales uint8 levels into float32, not {levels.dtype} into {out.dtype}")

    def codegen(context, builder, sig, args):
        source, _ = vector_at(context, builder, sig.args[0], args[0], sig.args[1], args[1])
        target, floats = vector_at(context, builder, sig.args[4], args[4], sig.args[1], args[1])
        words = ir.VectorType(_I32, LANES)
        factor = splat(builder, context.cast(builder, args[2], sig.args[2], types.float32), floats)
        product = builder.bitcast(builder.fmul(builder.uitofp(builder.load(source, align=1), floats), factor), words)
        flipped = builder.xor(product, ir.Constant(words, [1 << 31] * LANES))
        signed = builder.select(_lane_mask(context, builder, sig.args[3], args[3]), flipped, product)
        builder.store(builder.bitcast(signed, floats), target, align=4)
        return context.get_dummy_value()
    return types.void(levels, start, scale, mask, out), codegen


@intrinsic
def masked_signed(typingctx, scale, mask, negative, out, start):
    """out[start:start + 16] = ``scale`` (float32) in the lanes set in ``mask``, +0 in the others,
    the sign bit set in the lanes set in ``negative``: qsgdz's decoded values of level 1 from
    their bitmap's and sign bits' 16-bit masks, with no arithmetic."""
    if out.dtype != types.float32:
        raise TypingError(f"lanes: writes float32 values, not {out.dtype}")

    def codegen(context, builder, sig, args):
        target, floats = vector_at(context, builder, sig.args[3], args[3], sig.args[4], args[4])
        words = ir.VectorType(_I32, LANES)
        value = builder.bitcast(context.cast(builder, args[0], sig.args[0], types.float32), _I32)
        kept = builder.select(_lane_mask(context, builder, sig.args[1], args[1]), splat(builder, value, words),
                              ir.Constant(words, [0] * LANES))
        signed = builder.or_(kept, builder.select(_lane_mask(context, builder, sig.args[2], args[2]),
                                                  ir.Constant(words, [1 << 31] * LANES), ir.Constant(words, [0] * LANES)))
        builder.store(builder.bitcast(signed, floats), target, align=4)
        return context.get_dummy_value()
    return types.void(scale, mask, negative, out, start), codegen


# Whole vectors through per-block masks (uint16, one per 16 values; a partial last block in the
# low lanes of the last mask).

@kernel
def pack_blocks(masks: np.ndarray, vec: np.ndarray, out: np.ndarray) -> None:
    """The values in the lanes of ``masks``, in order, into ``out`` (16 longer than their count)."""
    whole, count = vec.size // LANES, 0
    for b in range(whole):
        compress(vec, b * LANES, masks[b], out, count)
        count += popcount(masks[b])
    if whole < masks.size:  # a partial last block: from a copy padded to 16
        last = np.zeros(LANES, vec.dtype)
        last[: vec.size - whole * LANES] = vec[whole * LANES:]
        compress(last, 0, masks[whole], out, count)


@kernel
def spread_blocks(masks: np.ndarray, values: np.ndarray, out: np.ndarray) -> None:
    """The whole of ``out``: the next of ``values`` in each lane of ``masks``, zero elsewhere."""
    whole, count = out.size // LANES, 0
    for b in range(whole):
        expand(values, count, masks[b], out, b * LANES)
        count += popcount(masks[b])
    if whole < masks.size:  # a partial last block: into a copy padded to 16
        last = np.zeros(LANES, out.dtype)
        expand(values, count, masks[whole], last, 0)
        out[whole * LANES:] = last[: out.size - whole * LANES]
