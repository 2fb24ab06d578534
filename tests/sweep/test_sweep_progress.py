"""Progress across a sweep: under the sweep's bar (cells done, running, failed, ETA) a line per
running cell with its own progress, read from the rows its run folder holds."""
from __future__ import annotations

import json
from pathlib import Path

from commlab.sweep.cell_progress import cell_line
from commlab.sweep.runner import Runner
from commlab.sweep.spec import Cell, load


def test_a_cell_line_counts_the_whole_rows_of_its_table_against_its_flag(tmp_path):
    fl = Cell("fl", (("codec", "int8"), ("rounds", 3)), 1)
    assert cell_line(fl, "codec=int8", tmp_path / "none") == f"{fl.run_id} codec=int8, seed 1: round 0/3"
    (tmp_path / "fl").mkdir()
    (tmp_path / "fl" / "rounds.csv").write_text("round,test_accuracy\n1,0.5\n2,0.6\n3,0.")  # row 3 half written
    assert cell_line(fl, "codec=int8", tmp_path / "fl").endswith(": round 2/3")
    ddp = Cell("ddp", (("method", "dgc"),), 0)  # epochs left to the launcher's default
    (tmp_path / "ddp").mkdir()
    (tmp_path / "ddp" / "epochs-rank0.csv").write_text("epoch,rank\n0,0\n")
    assert cell_line(ddp, "method=dgc", tmp_path / "ddp") == f"{ddp.run_id} method=dgc, seed 0: epochs 1"


def test_the_runner_shows_its_running_cells_in_the_order_they_started(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"grid": {"codec": ["fp32", "int8"]}, "stop": {"rounds": 4}}))
    sweep = load(path)
    runner = Runner(sweep, tmp_path / "sw", jobs=2)
    runner.running = [sweep.cells[1], sweep.cells[0]]
    run_dir = tmp_path / "sw" / "runs" / sweep.cells[1].run_id
    run_dir.mkdir(parents=True)
    (run_dir / "rounds.csv").write_text("round\n1\n")
    assert runner.cell_lines() == [f"{sweep.cells[1].run_id} codec=int8, seed 0: round 1/4",
                                   f"{sweep.cells[0].run_id} codec=fp32, seed 0: round 0/4"]
    assert runner._note() == "ok 0, running 2, failed 0"
