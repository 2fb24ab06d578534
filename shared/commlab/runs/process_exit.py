"""A program's last step: its exit code, without the interpreter's teardown.

Python's finalization frees every object of every module one at a time; with torch, numba and
numpy loaded that takes seconds of CPU, with no system call in between, and a run's nodes all end
at once on a few cores, so it lengthened every run. When a node or launcher returns its code, its
DDS participant is closed, every results table flushed (each CSV row is flushed as it is written,
JSON files are written whole and renamed) and its writers closed, so nothing is left to do but
free memory, which the kernel does. It also keeps gloo's worker threads (held by torch's DDP module
after destroy_process_group) from aborting the teardown with `terminate called without an active
exception`, which turned a finished rank into exit -6.

    if __name__ == "__main__":
        exit_now(main(sys.argv[1:]))
"""
from __future__ import annotations

import os
import sys
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Flush standard output and error, then end the process with `code` at once."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
