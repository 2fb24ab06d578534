"""Gradient/model codecs behind one interface, with a versioned wire format (see docs/codecs.md).

Every module of this package is imported here, so a compressor registers itself by existing:
adding one is one file (a registered Codec subclass) plus its tests.
"""
import importlib
import pkgutil

from commlab.codecs.base import Codec, decode_any, get_codec, names
from commlab.codecs.compression import Compression, build_compression
from commlab.codecs.errors import CodecError
from commlab.codecs.memory import DgcMemory, ErrorFeedback, Memory, NoMemory

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Codec", "CodecError", "Compression", "DgcMemory", "ErrorFeedback", "Memory", "NoMemory",
           "build_compression", "decode_any", "get_codec", "names"]
