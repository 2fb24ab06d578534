"""Bit gather and scatter of 64-bit words for the compiled loops: ``pext`` packs the bits of a
word under a mask to its low bits, ``pdep`` spreads low bits over a mask's set bits (qsgdz's
MASKS frames: the sign bits of a word's non-zero levels, packed and spread back). One BMI2
instruction each where the target has it (the features numba compiles for), else a loop over the
mask's set bits with the same result.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

_I64 = ir.IntType(64)
_ONE = np.uint64(1)


def _bmi2(context) -> bool:
    return "+bmi2" in (getattr(context.codegen(), "_tm_features", "") or "")


def _pext_loop(value, mask):
    out, bit = np.uint64(0), np.uint64(0)
    while mask:
        lowest = mask & (~mask + _ONE)
        if value & lowest:
            out |= _ONE << bit
        bit += _ONE
        mask ^= lowest
    return out


def _pdep_loop(value, mask):
    out, bit = np.uint64(0), np.uint64(0)
    while mask:
        lowest = mask & (~mask + _ONE)
        if (value >> bit) & _ONE:
            out |= lowest
        bit += _ONE
        mask ^= lowest
    return out


def _bit_intrinsic(instruction: str, loop):
    @intrinsic
    def operation(typingctx, value, mask):
        sig = types.uint64(types.uint64, types.uint64)

        def codegen(context, builder, signature, args):
            value_, mask_ = (context.cast(builder, a, t, types.uint64) for a, t in zip(args, signature.args))
            if _bmi2(context):
                fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I64, [_I64, _I64]),
                                                    f"llvm.x86.bmi.{instruction}.64")
                return builder.call(fn, [value_, mask_])
            return context.compile_internal(builder, loop, sig, [value_, mask_])
        return types.uint64(value, mask), codegen
    return operation


pext = _bit_intrinsic("pext", _pext_loop)
pdep = _bit_intrinsic("pdep", _pdep_loop)
