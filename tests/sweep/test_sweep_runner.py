"""The sweep runner with its cells' runs stood in for: resume without redoing finished cells,
failed cells recorded and skipped, interrupted cells rerun from a clean folder, cells at once."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from commlab.bench.children import Child, Outcome
from commlab.sweep.runner import INTERRUPTED, Paths, Runner, read_outcome
from commlab.sweep.spec import load

PLENTY = 1 << 40  # bytes of memory available


def sweep_file(tmp_path: Path) -> Path:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"grid": {"codec": ["fp32", "int8", "topk"]}, "seeds": [0, 1], "stop": {"rounds": 1}}))
    return path


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


class FakeRuns:
    """Stands in for the launcher: writes the run folder and log, ends as told per codec."""

    def __init__(self, fail: set[str] = frozenset(), interrupt_after: int | None = None, barrier=None):
        self.fail, self.interrupt_after, self.barrier = fail, interrupt_after, barrier
        self.started: list[str] = []
        self.domains: list[int] = []
        self.runner: Runner | None = None

    def __call__(self, argv, log: Path, stop, timeout_s) -> Outcome:
        run_id, codec = flag(argv, "--run-id"), flag(argv, "--codec")
        run_dir = Path(flag(argv, "--results-dir")) / run_id
        assert not run_dir.exists(), "a cell starts from a clean run folder"
        self.started.append(run_id)
        self.domains.append(int(flag(argv, "--domain-id")))
        if self.barrier is not None:
            self.barrier.wait()  # returns only once `parties` cells run at the same time
        run_dir.mkdir(parents=True)
        (run_dir / "rounds.csv").write_text("round\n1\n")
        log.write_text(f"$ launcher\n{'boom: the codec refused' if codec in self.fail else 'done'}\n")
        child = Child(run_id, argv, log, returncode=1 if codec in self.fail else 0)
        if self.interrupt_after is not None and len(self.started) >= self.interrupt_after:
            self.runner.interrupted.set()
            return Outcome([child], 0.1, stopped=stop())
        failures = [f"{run_id} exited 1: {child.last_line()} (log: {log})"] if child.failed else []
        return Outcome([child], 0.1, failures=failures)  # as commlab.bench.run_logged reports it


def run(sweep, root: Path, fake: FakeRuns, **kw) -> Runner:
    runner = Runner(sweep, root, memory=lambda: PLENTY, execute=fake, **{"jobs": 1, **kw})
    fake.runner = runner
    runner.run()
    return runner


def test_a_resumed_sweep_runs_only_the_cells_not_finished_and_the_interrupted_one_again(tmp_path):
    sweep = load(sweep_file(tmp_path))
    first = FakeRuns(interrupt_after=3)
    runner = run(sweep, tmp_path / "sw", first)
    assert len(first.started) == 3 and runner.counts == {"ok": 2, "failed": 0}
    interrupted = first.started[-1]
    assert read_outcome(Paths(tmp_path / "sw"), next(c for c in sweep.cells if c.run_id == interrupted)) is None
    second = FakeRuns()
    runner = run(sweep, tmp_path / "sw", second)
    assert second.started == [c.run_id for c in sweep.cells][2:]  # the interrupted one first, from a clean folder
    assert not set(second.started) & set(first.started[:2])
    assert runner.counts == {"ok": 6, "failed": 0}
    third = FakeRuns()
    run(sweep, tmp_path / "sw", third)
    assert third.started == []


def test_a_failed_cell_is_recorded_with_its_reason_and_the_sweep_goes_on(tmp_path):
    sweep = load(sweep_file(tmp_path))
    fake = FakeRuns(fail={"int8"})
    runner = run(sweep, tmp_path / "sw", fake)
    assert len(fake.started) == 6 and runner.counts == {"ok": 4, "failed": 2}
    failed = [read_outcome(Paths(tmp_path / "sw"), c) for c in sweep.cells if c.config["codec"] == "int8"]
    assert all(r["status"] == "failed" and "boom: the codec refused" in r["reason"] for r in failed)
    again = FakeRuns()
    assert run(sweep, tmp_path / "sw", again).counts == {"ok": 4, "failed": 2} and again.started == []
    retried = FakeRuns()
    assert run(sweep, tmp_path / "sw", retried, retry_failed=True).counts == {"ok": 6, "failed": 0}
    assert sorted(retried.started) == sorted(c.run_id for c in sweep.cells if c.config["codec"] == "int8")


def test_cells_run_at_once_up_to_jobs_each_with_its_own_dds_domain(tmp_path):
    sweep = load(sweep_file(tmp_path))
    fake = FakeRuns(barrier=threading.Barrier(2, timeout=60))
    runner = run(sweep, tmp_path / "sw", fake, jobs=2)
    assert runner.most_at_once == 2 and runner.counts["ok"] == 6
    assert all(a != b for a, b in zip(fake.domains[::2], fake.domains[1::2]))


def test_without_memory_for_a_second_cell_they_run_one_at_a_time(tmp_path):
    sweep = load(sweep_file(tmp_path))
    fake = FakeRuns()
    runner = Runner(sweep, tmp_path / "sw", jobs=4, memory=lambda: 1, execute=fake)
    fake.runner = runner
    runner.run()
    assert runner.most_at_once == 1 and runner.counts["ok"] == 6


@pytest.mark.parametrize("jobs", [1, 3])
def test_outcome_files_name_the_settings(tmp_path, jobs):
    sweep = load(sweep_file(tmp_path))
    run(sweep, tmp_path / "sw", FakeRuns(), jobs=jobs)
    record = json.loads(Paths(tmp_path / "sw").outcome(sweep.cells[0]).read_text())
    assert record["settings"] == sweep.cells[0].settings and record["status"] == "ok"
    assert INTERRUPTED not in json.dumps(record)
