"""Gradient/model codecs behind one interface, with a versioned wire format (see docs/codecs.md).

Every module of this package is imported here, so a compressor registers itself by existing:
adding one is one file (a registered Codec subclass) plus its tests.
"""
import importlib
import multiprocessing
import os
import pkgutil
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from commlab.codecs import base
from commlab.codecs.base import Codec, codec_of, decode_any, get_codec, names
from commlab.codecs.compression import Compression, build_compression
from commlab.codecs.errors import CodecError
from commlab.codecs.memory import DgcMemory, ErrorFeedback, Memory, NoMemory

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")



def warm(jobs: int | None = None) -> None:
    """Compile every codec's loops into numba's cache (jit.py): one small frame of each codec
    encoded and decoded, in `jobs` processes at once (default: one a core; each compile runs on one
    core, and the slowest codecs take tens of seconds). The node images run it when they are built,
    and the test session before its first test that starts nodes, so that no node spends its first
    frames compiling."""
    ids = sorted({cls.codec_id for cls in base._BY_ID.values()})
    jobs = min(len(ids), jobs or os.cpu_count() or 1)
    if jobs == 1:
        for codec_id in ids:
            _warm_one(codec_id)
        return
    # spawn: the caller may have threads (a fork would copy their locks); numba writes each cache
    # file under a temporary name and renames it, so processes compiling one loop at once agree
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_warm_one, ids))


def _warm_one(codec_id: int) -> None:
    vec = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    codec = base._BY_ID[codec_id].create({}, [("warm", (100, 100))])
    codec.decode(codec.encode(vec))


__all__ = ["Codec", "CodecError", "Compression", "DgcMemory", "ErrorFeedback", "Memory", "NoMemory",
           "build_compression", "codec_of", "decode_any", "get_codec", "names", "warm"]
