"""Gradient/model codecs behind one interface, with a versioned wire format (see docs/codecs.md)."""
# Importing each codec module registers it.
from commlab.codecs import (dgc, fp32, int8, int8_sparse, minmax, powersgd, qsgd, randomk, signsgd,  # noqa: F401
                            terngrad, topk)
from commlab.codecs.base import Codec, decode_any, get_codec, names
from commlab.codecs.errors import CodecError
from commlab.codecs.memory import DgcMemory, ErrorFeedback, Memory, NoMemory

__all__ = ["Codec", "CodecError", "DgcMemory", "ErrorFeedback", "Memory", "NoMemory", "decode_any", "get_codec", "names"]
