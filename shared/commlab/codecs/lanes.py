"""Sixteen values at a time, for the compiled loops (jit.py) that LLVM does not vectorise on its
own: packing the selected values of a block (compaction) and its inverse, and the byte masks
that select them. A scalar loop that packs values advances its count one value at a time, about a
cycle a value; these emit LLVM's target-independent vector operations
(``llvm.experimental.vector.compress``, ``llvm.masked.expandload``, ``llvm.ctpop``, a vector
compare), which an AVX-512 machine runs as a few instructions per 16 values and any other target
as equivalent scalar code. No arithmetic rounds: the values are moved, not computed.

A mask is an integer whose bit j stands for lane j, the value at ``start + j``. Nothing here checks
bounds: the callers keep ``start + 16`` (``start + 64`` for the 64-byte masks) within the arrays
read, and ``compress`` writes all 16 lanes of its destination, past the packed values, so its
destination has 16 spare slots.
"""
from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

LANES = 16
_I32, _I64 = ir.IntType(32), ir.IntType(64)
_BITS = ir.IntType(LANES)
_MASK = ir.VectorType(ir.IntType(1), LANES)


def _vector_at(context, builder, array_type, array: ir.Value, start: ir.Value,
               width: int = LANES) -> tuple[ir.Value, ir.VectorType]:
    """``array[start:start + width]`` as a pointer to one vector, and the vector's type."""
    vector = ir.VectorType(context.get_value_type(array_type.dtype), width)
    data = context.make_array(array_type)(context, builder, array).data
    return builder.bitcast(builder.gep(data, [start]), vector.as_pointer()), vector


def _lane_mask(context, builder, mask_type, mask: ir.Value) -> ir.Value:
    """A mask (any integer type numba inferred) as LLVM's vector of 16 booleans, from its low 16 bits."""
    return builder.bitcast(builder.trunc(context.cast(builder, mask, mask_type, types.uint32), _BITS), _MASK)


def _byte_compare(predicate: str, width: int):
    """An intrinsic (bytes: uint8 array, start, value) -> the mask of ``bytes[start + j] <predicate>
    value`` for j < ``width`` (uint32 for 16 lanes, uint64 for 64)."""
    lane_bits, result = ir.IntType(width), types.uint32 if width <= 32 else types.uint64

    @intrinsic
    def compare(typingctx, keys, start, value):
        def codegen(context, builder, sig, args):
            pointer, vector = _vector_at(context, builder, sig.args[0], args[0], args[1], width)
            scalar = builder.trunc(context.cast(builder, args[2], sig.args[2], types.int64), vector.element)
            one = builder.insert_element(ir.Constant(vector, None), scalar, ir.Constant(_I32, 0))
            splat = builder.shuffle_vector(one, one, ir.Constant(ir.VectorType(_I32, width), None))
            hits = builder.icmp_unsigned(predicate, builder.load(pointer, align=1), splat)
            return builder.zext(builder.bitcast(hits, lane_bits), context.get_value_type(result))
        return result(keys, start, value), codegen
    return compare


below = _byte_compare("<", LANES)  # the 16 lanes whose byte is below the value
equal = _byte_compare("==", LANES)  # the 16 lanes whose byte is the value
# The same over 64 bytes, for loops that only count (one AVX-512 compare each).
BYTE_LANES = 64
below_64 = _byte_compare("<", BYTE_LANES)
equal_64 = _byte_compare("==", BYTE_LANES)


@intrinsic
def popcount(typingctx, mask):
    """The number of set bits of a mask (int64)."""
    def codegen(context, builder, sig, args):
        word = context.cast(builder, args[0], sig.args[0], types.uint64)
        ctpop = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I64, [_I64]), "llvm.ctpop.i64")
        return builder.call(ctpop, [word])
    return types.int64(mask), codegen


@intrinsic
def compress(typingctx, src, start, mask, dst, at):
    """dst[at:at + popcount(mask)] = the lanes of src[start:start + 16] set in ``mask``, in order;
    dst[at + popcount(mask):at + 16] is overwritten with unspecified values. src and dst: arrays
    of one 4-byte dtype."""
    def codegen(context, builder, sig, args):
        source, vector = _vector_at(context, builder, sig.args[0], args[0], args[1])
        target, _ = _vector_at(context, builder, sig.args[3], args[3], args[4])
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector, _MASK, vector]),
                                            f"llvm.experimental.vector.compress.v16{_suffix(vector)}")
        mask_lanes = _lane_mask(context, builder, sig.args[2], args[2])
        packed = builder.call(fn, [builder.load(source, align=4), mask_lanes, ir.Constant(vector, None)])
        builder.store(packed, target, align=4)
        return context.get_dummy_value()
    return types.void(src, start, mask, dst, at), codegen


@intrinsic
def expand(typingctx, src, at, mask, dst, start):
    """dst[start:start + 16] = in the lanes set in ``mask`` the values src[at:at + popcount(mask)],
    in order, 0 in the others; reads only those values of src. The inverse of ``compress``."""
    def codegen(context, builder, sig, args):
        source, vector = _vector_at(context, builder, sig.args[0], args[0], args[1])
        target, _ = _vector_at(context, builder, sig.args[3], args[3], args[4])
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [source.type, _MASK, vector]),
                                            f"llvm.masked.expandload.v16{_suffix(vector)}")
        mask_lanes = _lane_mask(context, builder, sig.args[2], args[2])
        spread = builder.call(fn, [source, mask_lanes, ir.Constant(vector, None)])
        builder.store(spread, target, align=4)
        return context.get_dummy_value()
    return types.void(src, at, mask, dst, start), codegen


def _suffix(vector: ir.VectorType) -> str:
    """LLVM's name of the vector's element type in an intrinsic's name: f32, i32."""
    return "f32" if isinstance(vector.element, ir.FloatType) else f"i{vector.element.width}"
