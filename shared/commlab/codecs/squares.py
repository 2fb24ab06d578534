"""Sums of squares in a fixed order of 16 lanes, for qsgd's bucket norms inside its compiled
quantizing loop (each bucket read from memory once, its norm and levels from the copy in L1).

Without fastmath LLVM adds a float sum one value after the other (a chain of dependent adds, about
four cycles a value); numpy's einsum vectorises in an order of its own. Here the order is part of
the definition, so any target computes the same bits: lane j (0..15) sums the squares of values
j, j + 16, j + 32, ... in order, starting from 0 (a short last block counts as zeros, which add
nothing); then lanes j and j + 8 are added, then j and j + 4, j and j + 2, and lanes 0 and 1. Each
square and each sum rounds to the accumulating type (float32, or float64 for ``wide``), with no
fused multiply-add. The code is LLVM's target-independent vector operations on one 16-lane
vector (a masked load for the last block), one AVX-512 instruction each where the machine has it.
``reference_sum_squares`` is the definition in numpy, which the tests compare against."""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.core.errors import TypingError
from numba.extending import intrinsic

from commlab.codecs.lanes import LANES, MASK, splat, vector_at

_I32, _I64 = ir.IntType(32), ir.IntType(64)


def _halves(builder, acc: ir.Value) -> ir.Value:
    """The 16 lanes added in halves (j and j + 8, j and j + 4, ...), down to lane 0's scalar."""
    width = LANES
    while width > 1:
        width //= 2
        low = builder.shuffle_vector(acc, acc, ir.Constant(ir.VectorType(_I32, width), list(range(width))))
        high = builder.shuffle_vector(acc, acc, ir.Constant(ir.VectorType(_I32, width), list(range(width, 2 * width))))
        acc = builder.fadd(low, high)
    return builder.extract_element(acc, ir.Constant(_I32, 0))


def _sum_squares(wide: bool):
    """An intrinsic (float32 array, start, count) -> the sum of the squares of
    values[start:start + count] in 16 lanes (see above), float32 or, ``wide``, float64."""
    result = types.float64 if wide else types.float32

    @intrinsic
    def sum_squares(typingctx, values, start, count):
        if values.dtype != types.float32:
            raise TypingError(f"squares: sums float32 values, not {values.dtype}")

        def codegen(context, builder, sig, args):
            span = context.cast(builder, args[2], sig.args[2], types.int64)
            base, vector = vector_at(context, builder, sig.args[0], args[0], sig.args[1], args[1], span=span)
            element = context.get_value_type(result)
            lanes = ir.VectorType(element, LANES)
            acc = cgutils.alloca_once_value(builder, ir.Constant(lanes, None))
            scalars = builder.bitcast(base, vector.element.as_pointer())

            def add_squares(loaded: ir.Value) -> None:
                v = builder.fpext(loaded, lanes) if wide else loaded
                builder.store(builder.fadd(builder.load(acc), builder.fmul(v, v)), acc)

            whole = builder.lshr(span, ir.Constant(_I64, 4))
            with cgutils.for_range(builder, whole) as loop:
                at = builder.gep(scalars, [builder.mul(loop.index, ir.Constant(_I64, LANES))])
                add_squares(builder.load(builder.bitcast(at, vector.as_pointer()), align=4))
            done = builder.shl(whole, ir.Constant(_I64, 4))
            rest = builder.trunc(builder.sub(span, done), _I32)
            mask = builder.icmp_unsigned("<", ir.Constant(ir.VectorType(_I32, LANES), list(range(LANES))),
                                         splat(builder, rest, ir.VectorType(_I32, LANES)))
            masked_load = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vector, [vector.as_pointer(), _I32, MASK, vector]),
                "llvm.masked.load.v16f32.p0")
            tail = builder.bitcast(builder.gep(scalars, [done]), vector.as_pointer())
            add_squares(builder.call(masked_load, [tail, ir.Constant(_I32, 4), mask, ir.Constant(vector, None)]))
            return _halves(builder, builder.load(acc))
        return result(values, start, count), codegen
    return sum_squares


sum_squares, sum_squares_wide = _sum_squares(False), _sum_squares(True)


def reference_sum_squares(values: np.ndarray, dtype: type = np.float32) -> np.floating:
    """The definition in numpy: the squares in rows of 16 lanes (zero-padded), added row by row,
    then the lanes in halves."""
    rows = np.zeros(-(-values.size // LANES) * LANES, dtype)
    rows[: values.size] = values
    with np.errstate(over="ignore"):  # float32 squares and sums may overflow to inf, as in the loop
        squares = (rows * rows).reshape(-1, LANES)
        acc = np.zeros(LANES, dtype)
        for row in squares:
            acc = acc + row
        while acc.size > 1:
            acc = acc[: acc.size // 2] + acc[acc.size // 2 :]
    return acc[0]
