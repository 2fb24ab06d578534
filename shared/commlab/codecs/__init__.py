"""Gradient/model codecs behind one interface, with a versioned wire format (see docs/codecs.md).

Every module of this package is imported here, so a compressor registers itself by existing:
adding one is one file (a registered Codec subclass) plus its tests.
"""
import importlib
import pkgutil

import numpy as np

from commlab.codecs import base
from commlab.codecs.base import Codec, codec_of, decode_any, get_codec, names
from commlab.codecs.compression import Compression, build_compression
from commlab.codecs.errors import CodecError
from commlab.codecs.memory import DgcMemory, ErrorFeedback, Memory, NoMemory

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")



def warm() -> None:
    """Compile every codec's loops into numba's cache (jit.py): one small frame of each codec
    encoded and decoded. The node images run it when they are built, so that no node spends its
    first frames compiling (seconds per codec)."""
    vec = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    for cls in set(base._BY_ID.values()):
        codec = cls.create({}, [("warm", (100, 100))])
        codec.decode(codec.encode(vec))


__all__ = ["Codec", "CodecError", "Compression", "DgcMemory", "ErrorFeedback", "Memory", "NoMemory",
           "build_compression", "codec_of", "decode_any", "get_codec", "names", "warm"]
