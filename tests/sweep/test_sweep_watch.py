"""Stop conditions the runner watches in a running cell (a diverged run ends ok, a host short of
memory ends the cell failed), the sweep file's cap on cells at once, and seeds interleaved."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from commlab.bench.children import Child, Outcome
from commlab.output.tables import COLUMNS
from commlab.sweep.runner import Paths, Runner, read_outcome
from commlab.sweep.spec import SweepError, load
from commlab.sweep.watch import watcher

PLENTY = 1 << 40


def write_rounds(run_dir: Path, losses: list[str], partial: str = "") -> None:
    """rounds.csv with these test losses; `partial`: a row the controller is still writing."""
    header = COLUMNS["rounds"]
    rows = [",".join(loss if c == "test_loss" else "1" for c in header) for loss in losses]
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "rounds.csv").write_text("\n".join([",".join(header), *rows]) + "\n" + partial)


def test_a_run_whose_last_test_loss_passes_the_bound_or_is_nan_is_ended_as_diverged(tmp_path):
    check = watcher({"test_loss_above": 1000.0}, tmp_path / "run", lambda: 1e9)
    assert check() is None  # no rounds yet
    write_rounds(tmp_path / "run", ["2.3", "1.1"], partial="1,2,")
    assert check() is None
    write_rounds(tmp_path / "run", ["2.3", "5000"])
    ended = check()
    assert ended.reason == "diverged, stopped after round 2" and ended.ok
    write_rounds(tmp_path / "run", ["nan"])
    assert check().reason == "diverged, stopped after round 1"


def test_a_host_short_of_memory_ends_the_cell_as_failed(tmp_path):
    free = [900.0]
    check = watcher({"free_memory_below_mb": 400.0}, tmp_path, lambda: free[0])
    assert check() is None
    free[0] = 399.0
    ended = check()
    assert ended.reason == "stopped: host memory below 400 MB" and not ended.ok


class WatchedRuns:
    """Stands in for run_logged: each codec's run writes these test losses, polling `stop` after each
    round as run_logged does, and ends where `stop` says."""

    def __init__(self, losses: dict[str, list[str]]):
        self.losses = losses
        self.order: list[tuple[str, int]] = []

    def __call__(self, argv, log: Path, stop, timeout_s) -> Outcome:
        codec, seed = argv[argv.index("--codec") + 1], int(argv[argv.index("--seed") + 1])
        self.order.append((codec, seed))
        run_dir = Path(argv[argv.index("--results-dir") + 1]) / argv[argv.index("--run-id") + 1]
        log.write_text("$ launcher\n")
        done: list[str] = []
        for loss in self.losses[codec]:
            done.append(loss)
            write_rounds(run_dir, done)
            reason = stop()
            if reason is not None:
                return Outcome([Child(codec, argv, log, returncode=0, ended=True)], 0.1, stopped=reason)
        return Outcome([Child(codec, argv, log, returncode=0)], 0.1)


def test_the_runner_ends_a_diverged_cell_ok_and_records_why(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"cells": [{"codec": "fp32"}, {"codec": "int8"}], "stop": {"test_loss_above": 1000}}))
    sweep = load(path)
    runs = WatchedRuns({"fp32": ["2.0", "1.0", "0.5"], "int8": ["2.0", "3e4", "nan"]})
    counts = Runner(sweep, tmp_path / "sw", jobs=1, memory=lambda: PLENTY, execute=runs).run()
    assert counts == {"ok": 2, "failed": 0}
    fp32, int8 = (read_outcome(Paths(tmp_path / "sw"), c) for c in sweep.cells)
    assert fp32["ended"] == "ok" and fp32["status"] == "ok"
    assert int8["ended"] == "diverged, stopped after round 2" and int8["status"] == "ok"


def test_the_runner_fails_a_cell_ended_for_memory(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"cells": [{"codec": "fp32"}], "stop": {"free_memory_below_mb": 400}}))
    sweep = load(path)
    runs = WatchedRuns({"fp32": ["2.0", "1.0"]})
    short = iter([PLENTY, 100 * 2**20])  # enough to start the cell, then short while it runs
    counts = Runner(sweep, tmp_path / "sw", jobs=1, memory=lambda: next(short, 100 * 2**20), execute=runs).run()
    assert counts == {"ok": 0, "failed": 1}
    record = read_outcome(Paths(tmp_path / "sw"), sweep.cells[0])
    assert record["reason"] == record["ended"] == "stopped: host memory below 400 MB"


def test_interleaved_seeds_run_seed_by_seed_and_the_file_caps_cells_at_once(tmp_path):
    path = tmp_path / "i.json"
    path.write_text(json.dumps({"cells": [{"codec": "fp32"}, {"codec": "int8"}], "seeds": [0, 1],
                                "interleave_seeds": True, "jobs": 1}))
    sweep = load(path)
    assert [(c.config["codec"], c.seed, c.entry) for c in sweep.cells] == [
        ("fp32", 0, 0), ("int8", 0, 1), ("fp32", 1, 0), ("int8", 1, 1)]
    runner = Runner(sweep, tmp_path / "sw", jobs=4, memory=lambda: PLENTY, execute=WatchedRuns(
        {"fp32": ["1"], "int8": ["1"]}))
    assert runner.jobs == 1
    runner.run()
    assert runner.execute.order == [("fp32", 0), ("int8", 0), ("fp32", 1), ("int8", 1)]


@pytest.mark.parametrize("data, words", [
    ({"jobs": 0}, "jobs must be a whole number of cells, at least 1"),
    ({"interleave_seeds": "yes"}, "interleave_seeds must be true or false"),
    ({"stop": {"test_loss_above": -1}}, "stop.test_loss_above must be a positive number"),
])
def test_bad_runner_keys_are_refused_in_one_line(tmp_path, data, words):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SweepError) as e:
        load(path)
    assert words in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)
