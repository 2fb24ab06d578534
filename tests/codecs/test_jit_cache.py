"""jit.py's cache directory: named by the codecs' sources, so that a loop inlining a helper from
another module is compiled afresh when that module changes (numba checks the loop's own file only)."""
from __future__ import annotations

from pathlib import Path

import numba

from commlab.codecs import jit


def test_the_cache_directory_follows_every_source_of_the_package(tmp_path):
    package = tmp_path / "codecs"
    package.mkdir()
    (package / "loops.py").write_text("def loop(): return helper()\n")
    (package / "helpers.py").write_text("def helper(): return 1\n")
    first = jit.cache_directory(package, str(tmp_path / "chosen"))
    assert first.parent == tmp_path / "chosen"
    assert jit.cache_directory(package, str(tmp_path / "chosen")) == first
    (package / "helpers.py").write_text("def helper(): return 2\n")  # the loop's file is unchanged
    assert jit.cache_directory(package, str(tmp_path / "chosen")) != first
    assert jit.cache_directory(package, None).parent == package / "__pycache__"  # beside, writable


def test_numba_caches_the_codecs_loops_under_it():
    package = Path(jit.__file__).parent
    assert Path(numba.config.CACHE_DIR).name == jit.cache_directory(package, None).name
