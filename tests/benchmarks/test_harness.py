"""The benchmark harness (commlab.bench): a tiny benchmark run end to end writes its table headed
by command and commit and its child's log; a failing child is reported in one line and ends its
set; a stop condition ends a run with its reason; --quick and the shared options; a table still
being written is read up to its last whole line; a run's final accuracy."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from commlab.bench import ROOT, BenchParser, run_logged
from commlab.output.tables import COLUMNS
from commlab.report.provenance import HEADER_FIELDS
from commlab.report.runs import Run, RunError, read_table

TINY = '''"""Tiny benchmark: one child run, one table."""
import sys

import pandas as pd

from commlab.bench import BenchParser, BenchRun

p = BenchParser(__doc__, "tiny", quick={"count": 1}, seeds=[0])
p.add_argument("--count", type=int, default=3)
a = p.parse_args()
with BenchRun(a, total=len(a.seeds)) as s:
    rows = []
    for seed in a.seeds:
        out = s.run([sys.executable, "-c", f"print('child of seed {seed}, count {a.count}')"], f"tiny-{seed}")
        rows.append({"seed": seed, "count": a.count, "status": out.status})
        s.step(f"seed {seed} {out.status}")
    s.write(pd.DataFrame(rows), {"seed": "seed", "count": "count", "status": "status"}, "Tiny")
'''


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


@pytest.mark.slow  # starts benchmark processes
def test_a_tiny_benchmark_writes_its_table_with_command_and_commit_and_the_childs_log(tmp_path):
    script = tmp_path / "bench_tiny.py"
    script.write_text(TINY)
    argv = [str(script), "--quick", "--seeds", "4", "5", "--results-dir", str(tmp_path / "out")]
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    md = (tmp_path / "out" / "bench" / "tiny-quick.md").read_text()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.strip()
    head = {line.split(": ", 1)[0][2:]: line.split(": ", 1)[1] for line in md.splitlines() if line.startswith("- ")}
    assert list(head) == list(HEADER_FIELDS)
    assert head["command"] == f"`python {' '.join(argv)}`"
    assert head["commit"].startswith(f"`{commit}")
    assert "| 4 | 1 | ok |" in md and "| 5 | 1 | ok |" in md  # --quick's count, the seeds given
    assert pd.read_csv(tmp_path / "out" / "bench" / "tiny-quick.csv")["status"].tolist() == ["ok", "ok"]
    log = (tmp_path / "out" / "tiny-4.log").read_text().splitlines()
    assert log[0].startswith("$ ") and log[1:] == ["child of seed 4, count 1"]
    assert md in done.stdout  # printed as written


@pytest.mark.slow  # starts benchmark processes
def test_a_failing_child_is_reported_in_one_line_and_ends_its_set(tmp_path, capsys):
    out = run_logged({"waiter": python("import time; time.sleep(120)"),
                      "crasher": python("import sys; print('loading'); print('bad frame'); sys.exit(3)")},
                     tmp_path / "pair.log", timeout_s=100)
    assert not out.ok and out.status == "exit 3"
    assert out.child("waiter").ended and not out.child("waiter").failed
    assert out.failures == [f"crasher exited 3: bad frame (log: {tmp_path / 'pair-crasher.log'})"]
    printed = [line for line in capsys.readouterr().out.splitlines() if "FAILED" in line]
    assert printed == [f"[bench] FAILED {out.failures[0]}"]
    with pytest.raises(SystemExit, match="^crasher exited 3: bad frame"):
        out.check()


@pytest.mark.slow  # starts benchmark processes
def test_a_stop_condition_ends_the_run_with_its_reason(tmp_path):
    flag = tmp_path / "reached"
    out = run_logged(python(f"import pathlib, time; pathlib.Path({str(flag)!r}).touch(); time.sleep(120)"),
                     tmp_path / "run.log", stop=lambda: "ok (stopped at target)" if flag.exists() else None,
                     poll_s=0.1)
    assert out.ok and out.status == "ok (stopped at target)" and out.children[0].ended
    assert out.children[0].name == "run" and out.failures == []


def test_quick_settings_yield_to_flags_given(tmp_path):
    p = BenchParser("Doc.\n\nMore.", "x", quick={"rounds": 1, "seeds": [7]}, seeds=[0, 1], profile="lan")
    p.add_argument("--rounds", type=int, default=10)
    a = p.parse_args(["--results-dir", str(tmp_path), "--quick", "--rounds", "4"])
    assert (a.rounds, a.seeds, a.profile, a.tables) == (4, [7], "lan", tmp_path / "bench" / "x-quick")
    assert p.parse_args(["--results-dir", str(tmp_path)]).rounds == 10  # quick left no default behind
    assert p.parse_args(["--smoke", "--results-dir", str(tmp_path)]).quick


def test_an_unknown_profile_is_one_line(tmp_path, capsys):
    p = BenchParser("Doc.", "x", quick={}, profile="lan")
    with pytest.raises(SystemExit):
        p.parse_args(["--profile", "56k", "--results-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--profile" in err and "'56k'" in err


def test_a_table_being_written_is_read_to_its_last_whole_line(tmp_path):
    columns = COLUMNS["epochs"]
    file = tmp_path / "epochs-rank0.csv"
    file.write_text(",".join(columns) + "\n" + "0,0,10,0.9,nan,1.5\n" + "1,0,20,0.")
    rows = read_table(file, columns, growing=True)
    assert rows["test_accuracy"].tolist() == [0.9] and rows["test_loss"].isna().all()  # a diverged model's loss
    with pytest.raises(RunError, match="truncated"):
        read_table(file, columns)


def test_final_accuracy_is_the_last_evaluated_one_and_rank_0s_for_ddp(tmp_path):
    fl = Run("fl", tmp_path, {"kind": "fl"}, {"rounds": pd.DataFrame({"test_accuracy": [0.5, 0.7, float("nan")]})})
    ddp = Run("ddp", tmp_path, {"kind": "ddp"},
              {"epochs": pd.DataFrame({"rank": [0, 0, 1, 1], "test_accuracy": [0.6, 0.8, 0.61, 0.79]})})
    assert (fl.final_accuracy, ddp.final_accuracy) == (0.7, 0.8)
