"""The sweep files under experiments/sweeps/ are the benchmarks' own: each equals the sweep the
benchmark builds from its default (or published) flags, with and without --quick, and every cell
passes its launcher's argument parser. So `make sweep SWEEP=experiments/sweeps/robust.json` runs
the runs `make bench-robust` would, into the same folder, and `make results` the published ones."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from commlab.report.results_doc import BENCHES
from commlab.sweep.spec import load

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

# sweep file stem -> (benchmark module, its flags)
SWEEP_FILES = {"adaptive": ("bench_adaptive", []), "fedbuff": ("bench_fedbuff", []), "robust": ("bench_robust", []),
               "matrix-fashion_mnist": ("bench_matrix", list(BENCHES["matrix-fashion_mnist"].args))}


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
@pytest.mark.parametrize("stem", list(SWEEP_FILES))
def test_the_committed_sweep_file_is_the_one_the_benchmark_builds(tmp_path, stem, quick):
    module, flags = SWEEP_FILES[stem]
    committed = ROOT / "experiments" / "sweeps" / f"{stem}{'-quick' if quick else ''}.json"
    written = tmp_path / "sweep.json"
    argv = [*flags, *(["--quick"] if quick else []), "--results-dir", str(tmp_path), "--write-sweep", str(written)]
    assert importlib.import_module(module).main(argv) == 0
    assert json.loads(written.read_text()) == json.loads(committed.read_text()), (
        f"{committed.relative_to(ROOT)} differs from the settings of benchmarks/{module}.py: write it anew with "
        f"`python benchmarks/{module}.py {' '.join(argv[:-4])} --write-sweep {committed.relative_to(ROOT)}`")
    assert load(committed).name == committed.stem  # its cells pass the launchers' parsers


def test_a_published_sweep_benchmark_runs_its_sweep_file_then_its_table():
    bench = BENCHES["matrix-fashion_mnist"]
    assert bench.sweep and bench.sweep_file("matrix-fashion_mnist", True).name == "matrix-fashion_mnist-quick.json"
    assert (ROOT / bench.sweep_file("matrix-fashion_mnist", False)).exists()
