"""What both node programs share: config errors -> exit 2, clean SIGTERM, failures -> exit 1.

Everything that can be wrong with the input (config keys and types, missing files, unknown
model/dataset/codec names, an unreadable checkpoint) is reported as ConfigError before any
training starts or any result file is written.
"""
from __future__ import annotations

import sys
import traceback
from typing import Callable, Sequence, TypeVar

import numpy as np

from commlab.codecs import Codec, CodecError, build_compression
from commlab.codecs.jit import warm_up
from commlab.codecs.scratch import pool_buffers, release_buffers
from commlab.config.schema import ConfigError
from commlab.fl.config import CodecSection

T = TypeVar("T")
EXIT_CONFIG = 2
EXIT_FAILED = 1


def as_config_error(what: str, build: Callable[[], T]) -> T:
    """Run build(); turn the library's bad-input errors into a ConfigError naming `what`."""
    from commlab.data import DatasetError
    try:
        return build()
    except (ValueError, KeyError, TypeError, DatasetError, FileNotFoundError) as e:
        raise ConfigError(f"{what}: {e}") from None


def build_codec(section: CodecSection, layout: list[tuple[str, tuple[int, ...]]], where: str = "codec",
                seed: int = 0) -> Codec:
    """The controller's one resolution of a codec section: the codec as build_compression makes it
    for the model's `layout` (every parameter checked, memory and schedule ones included); a bad name or
    parameter is a ConfigError. The controller keeps no memory: the uplink codec only decodes,
    and the downlink's residual is `weights - replica` (broadcast.py)."""
    try:
        return build_compression(section.name, section.params, layout, seed=seed).codec
    except CodecError as e:
        raise ConfigError(f"{where}: {e}") from None


def warm_up_codecs(sections: Sequence[CodecSection], layout: list[tuple[str, tuple[int, ...]]]) -> None:
    """Encode, decode and add one model-sized vector with each codec, built afresh (the run's
    codecs and their state are not touched), as part of setting a node up: the first call of a
    compiled loop in a process loads its machine code from numba's cache (about 0.1 s a codec), or
    compiles it when the codecs' sources changed (seconds), which would otherwise land on the first
    round. Run before the node's barrier, a compile stores the cache before any peer encodes."""
    warm_up()
    numel = sum(int(np.prod(shape)) for _, shape in layout)
    vec = np.random.default_rng(0).standard_normal(numel, dtype=np.float32)
    for section in sections:
        codec = build_codec(section, layout)
        frame = codec.encode(vec)
        codec.decode(frame, numel=numel)
        codec.add_decoded(frame, np.zeros(numel, np.float32), 1.0)
    release_buffers()  # the codecs' work arrays: not part of the node's idle memory


def log_to(prefix: str) -> Callable[[str], None]:
    def log(msg: str) -> None:
        print(f"[{prefix}] {msg}", flush=True)
    return log


def main(prog: str, run: Callable[[str], None], expected: tuple[type[Exception], ...],
         argv: list[str] | None = None) -> int:
    """Run `run(config_path)`; exit 2 for bad config/input, 1 for a failed run, 0 otherwise.
    `expected` failures (timeouts, lost peers) get one line; anything else its traceback."""
    from commlab.dds import exit_cleanly_on_sigterm
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(f"usage: {prog} CONFIG.json", file=sys.stderr)
        return EXIT_CONFIG
    exit_cleanly_on_sigterm()
    # glibc's own policy, not retain_freed_memory: an FL node measuring memory exactly hands freed
    # memory back at every phase boundary anyway (output.memory_watch), and within an encode the
    # heap reused the freed work arrays poorly (twice their live size at the peak). One encode a
    # round: a codec's work arrays live as long as their step.
    pool_buffers(False)
    try:
        run(argv[0])
    except ConfigError as e:
        print(f"{prog}: config error: {e}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    except expected as e:
        print(f"{prog}: failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    except Exception:
        traceback.print_exc()
        return EXIT_FAILED
    return 0
