"""Gradient/model codecs behind one interface, with a versioned wire format (see docs/codecs.md)."""
# Importing each codec module registers it.
from commlab.codecs import fp32, int8, int8_sparse, minmax, qsgd, randomk, signsgd, terngrad, topk  # noqa: F401
from commlab.codecs.base import Codec, decode_any, get_codec, names
from commlab.codecs.error_feedback import ErrorFeedback
from commlab.codecs.errors import CodecError

__all__ = ["Codec", "CodecError", "ErrorFeedback", "decode_any", "get_codec", "names"]
