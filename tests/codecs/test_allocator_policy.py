"""scratch.retain_freed_memory: a process that frees a large block keeps its pages for the next
one (the node programs' policy), where by default glibc returns them to the kernel."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

FREE_A_LARGE_BLOCK = """
import sys
from commlab.codecs import scratch
applied = scratch.retain_freed_memory() if sys.argv[1] == "retain" else None
def resident_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
block = b"x" * 64 * 2**20  # 64 MB, every page written
before = resident_mb()
del block
print(applied, before - resident_mb())
"""


def freed_mb(mode: str) -> tuple[str, float]:
    out = subprocess.run([sys.executable, "-c", FREE_A_LARGE_BLOCK, mode], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    return out[0], float(out[1])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc: Linux")
def test_freed_memory_stays_with_the_process_under_the_policy_only():
    applied, returned = freed_mb("retain")
    assert applied == "True" and returned < 8
    applied, returned = freed_mb("default")
    assert applied == "None" and returned > 56


def test_work_arrays_are_kept_for_the_next_call_unless_pooling_is_off():
    from commlab.codecs import scratch
    try:
        first = scratch.buffer("test.pool", 1000, "f4")
        assert scratch.buffer("test.pool", 500, "f4").ctypes.data == first.ctypes.data
        scratch.pool_buffers(False)  # an FL node: one encode a round
        fresh = scratch.buffer("test.pool", 1000, "f4")
        assert fresh.dtype == np.float32 and fresh.size == 1000
        assert not np.shares_memory(fresh, scratch.buffer("test.pool", 1000, "f4"))
    finally:
        scratch.pool_buffers(True)
        scratch.release_buffers()
