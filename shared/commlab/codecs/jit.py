"""The decorator of the codecs' compiled inner loops (numba, nopython mode).

cache=True: the first process on a machine compiles each loop (about a second each) and stores the
machine code beside the module, or in the user's cache directory where that is read-only; later
processes load it. numba tells a cached loop's version by its own file only, so a loop that inlines
a helper from another file (lanes, rice, draws) kept the machine code of the old helper after that
file changed: the cache lives in a directory named by a digest of this package's sources
(``cache_directory``), and a checkout whose codecs changed compiles afresh. nogil=True: encoders run in threads (FL clients, DDP's exchange) and a compiled
loop holds no Python state. error_model numpy: a division by zero gives inf or NaN, as in
numpy, instead of a check in every loop. The loops are written over scalars, one pass each, so that LLVM
vectorises them; reductions numpy already vectorises (max, min) stay numpy's. No fastmath unless a
loop asks for it: every other loop rounds as numpy's float32 arithmetic does, so frames are
bit-identical to the references. The few that reassociate sums (``@kernel(fastmath={"reassoc"})``:
PowerSGD's products, signsgd's means where they are sure) say in their docstrings what that changes.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numba
import numpy as np
from numba.core import config
from numba.misc.appdirs import AppDirs


def cache_directory(package: Path, chosen: str | None) -> Path:
    """The directory of the compiled loops of ``package``'s sources as they are: under ``chosen``
    (NUMBA_CACHE_DIR) if given, else beside the modules (__pycache__) where that is writable, else
    under the user's cache directory; named by a digest of every module's name and bytes."""
    digest = hashlib.sha256()
    for path in sorted(package.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    name = f"commlab-codecs-{digest.hexdigest()[:16]}"
    if chosen:
        return Path(chosen) / name
    beside = package / "__pycache__"
    if os.access(beside if beside.exists() else package, os.W_OK):
        return beside / name
    return Path(AppDirs(appname="numba", appauthor=False).user_cache_dir) / name


config.CACHE_DIR = str(cache_directory(Path(__file__).parent, config.CACHE_DIR))


def kernel(fn=None, **options):
    """numba.njit with the options above (plus any given: ``@kernel(inline="always")``)."""
    jit = numba.njit(cache=True, nogil=True, error_model="numpy", **options)
    return jit if fn is None else jit(fn)


@kernel
def _first(values: np.ndarray) -> float:
    return values[0]


def warm_up() -> None:
    """Start numba's compiler (LLVM) once, as part of setting a node up: the first compiled loop a
    process runs costs it tens of MB and a second or so, even when the machine code is cached,
    which would otherwise land on the node's first frame."""
    _first(np.zeros(1, np.float32))
