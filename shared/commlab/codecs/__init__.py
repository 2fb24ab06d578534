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



def warm(name: str | None = None, params: dict | None = None) -> None:
    """Load the compiled loops (jit.py) of codec `name` (with `params`), or of every codec, compiling
    them into numba's cache where they are not there yet: one small frame encoded, decoded and
    added back by a throwaway codec (a node's own compressors and their draws are not touched).
    The node images run it for every codec when they are built, so that no node spends its first
    frames compiling (seconds per codec); an FL client runs it for the codec a command names, so
    that loading them does not add to the peak of its first model-sized frame."""
    vec = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    layout = [("warm", (100, 100))]
    codecs = ([cls.create({}, layout) for cls in set(base._BY_ID.values())] if name is None
              else [build_compression(name, params or {}, layout).codec])
    for codec in codecs:
        frame = codec.encode(vec)
        codec.decode(frame)
        codec.add_decoded(frame, vec.copy(), -1.0)


__all__ = ["Codec", "CodecError", "Compression", "DgcMemory", "ErrorFeedback", "Memory", "NoMemory",
           "build_compression", "codec_of", "decode_any", "get_codec", "names", "warm"]
