"""lanes.py's compress and expand for a target with AVX2 and without AVX-512: LLVM expands its
generic compress and expand intrinsics there into a store or load per lane (randomk's decode took
three times its encode), where AVX2 has a permutation of 8 lanes (vpermd). Each half of the 16
lanes is permuted by indices looked up under its 8 mask bits: the source lane of each packed
value (compress) or of each selected lane (expand), 4 bits an index, in a 256-word table.
"""
from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils

_I8, _I32 = ir.IntType(8), ir.IntType(32)
_HALF = ir.VectorType(_I32, 8)
_HALF_MASK = ir.VectorType(ir.IntType(1), 8)


def wanted(context) -> bool:
    """Whether numba compiles for a CPU with AVX2 and without AVX-512 (the features it gives
    LLVM; NUMBA_CPU_FEATURES overrides the host's)."""
    features = getattr(context.codegen(), "_tm_features", "") or ""
    return "+avx2" in features and "+avx512f" not in features


def _packed_sources(byte: int) -> int:
    """Nibble j: the lane of the j-th set bit of ``byte`` (compress)."""
    lanes = [j for j in range(8) if byte >> j & 1]
    return sum(lane << 4 * j for j, lane in enumerate(lanes))


def _spread_sources(byte: int) -> int:
    """Nibble j: the count of set bits of ``byte`` below bit j, the packed value lane j takes (expand)."""
    return sum(bin(byte & ((1 << j) - 1)).count("1") << 4 * j for j in range(8))


_TABLES = {"commlab.lanes.packed_sources": _packed_sources, "commlab.lanes.spread_sources": _spread_sources}


def _indices(builder, table: str, byte: ir.Value) -> ir.Value:
    """The 8 lane indices of ``table`` under ``byte`` (an i32 of 0..255)."""
    module = builder.module
    data = module.globals.get(table)
    if data is None:
        words = ir.Constant(ir.ArrayType(_I32, 256), [ir.Constant(_I32, _TABLES[table](b)) for b in range(256)])
        data = cgutils.global_constant(module, table, words)
    word = builder.load(builder.gep(data, [ir.Constant(_I32, 0), byte]))
    shifted = builder.lshr(_splat(builder, word), ir.Constant(_HALF, [4 * j for j in range(8)]))
    return builder.and_(shifted, ir.Constant(_HALF, [15] * 8))


def _permute(builder, values: ir.Value, indices: ir.Value) -> ir.Value:
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_HALF, [_HALF, _HALF]), "llvm.x86.avx2.permd")
    return builder.call(fn, [values, indices])


def _halves(builder, word: ir.Value) -> tuple[ir.Value, ir.Value]:
    """The low and high bytes of a 16-bit mask (i32), as i32."""
    return builder.and_(word, ir.Constant(_I32, 255)), builder.and_(builder.lshr(word, ir.Constant(_I32, 8)),
                                                                     ir.Constant(_I32, 255))


def _popcount(builder, value: ir.Value) -> ir.Value:
    ctpop = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32, [_I32]), "llvm.ctpop.i32")
    return builder.call(ctpop, [value])


def store_compressed(builder, words: ir.Value, mask: ir.Value, target: ir.Value) -> None:
    """The lanes of ``words`` (16 x i32) set in ``mask`` (i32, 16 bits), packed to the front of
    the 16 stored at ``target`` (i32*): each half permuted and stored after the last's values."""
    low, high = _halves(builder, mask)
    for half, bits, at in ((range(8), low, ir.Constant(_I32, 0)), (range(8, 16), high, _popcount(builder, low))):
        lanes = builder.shuffle_vector(words, ir.Constant(words.type, None), ir.Constant(_HALF, list(half)))
        packed = _permute(builder, lanes, _indices(builder, "commlab.lanes.packed_sources", bits))
        builder.store(packed, builder.bitcast(builder.gep(target, [at]), _HALF.as_pointer()), align=4)


def load_expanded(builder, source: ir.Value, mask: ir.Value) -> ir.Value:
    """16 x i32: in the lanes set in ``mask`` (i32, 16 bits) the values from ``source`` (i32*)
    on, in order, 0 in the others. Each half loads only the values it takes (a masked load: the
    source may end right after them), then permutes them into place."""
    load = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(_HALF, [_HALF.as_pointer(), _I32, _HALF_MASK, _HALF]),
        "llvm.masked.load.v8i32.p0")
    low, high = _halves(builder, mask)
    halves, at = [], ir.Constant(_I32, 0)
    for bits in (low, high):
        count = _popcount(builder, bits)
        first = builder.icmp_unsigned("<", ir.Constant(_HALF, list(range(8))), _splat(builder, count))
        packed = builder.call(load, [builder.bitcast(builder.gep(source, [at]), _HALF.as_pointer()),
                                     ir.Constant(_I32, 4), first, ir.Constant(_HALF, [0] * 8)])
        spread = _permute(builder, packed, _indices(builder, "commlab.lanes.spread_sources", bits))
        chosen = builder.bitcast(builder.trunc(bits, _I8), _HALF_MASK)
        halves.append(builder.select(chosen, spread, ir.Constant(_HALF, [0] * 8)))
        at = count
    return builder.shuffle_vector(halves[0], halves[1], ir.Constant(ir.VectorType(_I32, 16), list(range(16))))


def _splat(builder, scalar: ir.Value) -> ir.Value:
    """``scalar`` in 8 lanes: lanes.splat's, which this module cannot import (lanes imports it)."""
    one = builder.insert_element(ir.Constant(_HALF, None), scalar, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, one, ir.Constant(_HALF, [0] * 8))
