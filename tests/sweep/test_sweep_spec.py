"""Sweep files: expansion into cells, run ids as hashes of the settings, one-line refusals."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from commlab.sweep.spec import Cell, SweepError, load


def write(tmp_path: Path, data: dict, name: str = "s.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


BASE = {"fixed": {"clients": 2, "samples_per_round": 64}, "grid": {"codec": ["fp32", "int8"], "profile": ["lan", "10mbit"]},
        "seeds": [0, 1], "stop": {"rounds": 2}}


def test_grid_times_cells_times_seeds_over_the_fixed_flags(tmp_path):
    sweep = load(write(tmp_path, {**BASE, "cells": [{"strategy": "median"}, {"strategy": "fedavg", "per-round": 1}]}))
    assert len(sweep.cells) == 2 * 2 * 2 * 2 and sweep.name == "s"
    flags = dict(sweep.cells[0].flags)
    assert flags["samples-per-round"] == 64 and flags["rounds"] == 2 and flags["backend"] == "local"
    assert {c.config["strategy"] for c in sweep.cells} == {"median", "fedavg"}
    assert sum(c.config.get("per-round") == 1 for c in sweep.cells) == 8
    argv = sweep.cells[0].argv(Path("/r"), 7)
    assert argv[argv.index("--domain-id") + 1] == "7" and argv[argv.index("--run-id") + 1] == sweep.cells[0].run_id


def test_run_id_is_a_hash_of_the_settings_not_of_how_the_file_is_written(tmp_path):
    a = load(write(tmp_path, BASE, "a.json"))
    reordered = {"stop": {"rounds": 2}, "seeds": [0, 1], "grid": {"profile": ["lan", "10mbit"], "codec": ["fp32", "int8"]},
                 "fixed": {"samples-per-round": 64, "clients": 2}}
    b = load(write(tmp_path, reordered, "b.json"))
    assert {c.run_id for c in a.cells} == {c.run_id for c in b.cells}
    ids = [c.run_id for c in a.cells]
    assert len(set(ids)) == len(ids)  # seed, codec and profile each change the id
    more_rounds = load(write(tmp_path, {**BASE, "stop": {"rounds": 3}}, "c.json"))
    assert not {c.run_id for c in a.cells} & {c.run_id for c in more_rounds.cells}


def test_a_cell_run_id_changes_with_any_flag_value():
    one = Cell("fl", (("clients", 2), ("codec", "int8")), 0)
    assert one.run_id == Cell("fl", (("clients", 2), ("codec", "int8")), 0).run_id
    assert one.run_id != Cell("fl", (("clients", 3), ("codec", "int8")), 0).run_id
    assert one.run_id != Cell("ddp", (("clients", 2), ("codec", "int8")), 0).run_id
    assert one.run_id.startswith("fl-")


def test_repeats_are_seeds_from_zero(tmp_path):
    sweep = load(write(tmp_path, {"grid": {"codec": ["fp32"]}, "repeats": 3}))
    assert [c.seed for c in sweep.cells] == [0, 1, 2]


@pytest.mark.parametrize("data, words", [
    ({"grid": {"codec": ["fp32"]}, "rounds": 3}, "unknown keys ['rounds']"),
    ({"fixed": {"seed": 3}}, "seed is set by the sweep itself"),
    ({"cells": [{"launcher": "mpi"}]}, "launcher 'mpi' is not one of"),
    ({"grid": {"codec": []}}, "non-empty lists"),
    ({"stop": {"loss": 0.1}}, "unknown stop metric ['loss']"),
    ({"stop": {"rounds": 0}}, "stop.rounds must be a positive number"),
    ({"seeds": [1, 1]}, "seeds repeat a seed"),
    ({"cells": [{"codec": "int8"}, {"codec": "int8"}]}, "two cells have the same settings"),
    ({"fixed": {"codec": {"name": "int8"}}}, "is not a flag value"),
    ({"grid": {"no-such-flag": [1]}}, "unrecognized arguments: --no-such-flag 1"),
    ({"launcher": "ddp", "stop": {"accuracy": 0.9}}, "unrecognized arguments: --stop-accuracy 0.9"),
    ({"target_accuracy": 97}, "target_accuracy must be a fraction"),
])
def test_a_sweep_file_that_cannot_run_is_refused_in_one_line_naming_the_problem(tmp_path, data, words):
    with pytest.raises(SweepError) as e:
        load(write(tmp_path, data))
    assert words in str(e.value) and "\n" not in str(e.value) and str(tmp_path) in str(e.value)


def test_unreadable_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(SweepError, match="not valid JSON"):
        load(bad)
    with pytest.raises(SweepError, match="cannot read"):
        load(tmp_path / "missing.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(SweepError, match="expected an object"):
        load(tmp_path / "list.json")
