"""bench_peers_fl --repeats without running anything (the runs' rows made up here):
the cases alternate their order from one repeat to the next, every run has its own run id, each
ratio in the table is the median of the repeats' own ratios, and --repeats below 1 is one line."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
bench = pytest.importorskip("bench_peers_fl")

# round_time_s of (dds-fp32, flower) in repeats 1, 2, 3: DDS slower, as fast, faster
TIMES = [(3.0, 1.5), (2.0, 2.0), (1.0, 2.0)]


class FakeRuns:
    """Stands in for running the cases: records (cases in order, label), each case a row of TIMES."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], str]] = []

    def __call__(self, cases: list[str], label: str) -> list[dict]:
        times = dict(zip(("dds-fp32", "flower"), TIMES[len(self.calls)]))
        self.calls.append((list(cases), label))
        return [{"case": c, "run_id": f"stamp-{label}-{c}", "status": "ok", "run_wall_s": 10.0,
                 "round_time_s": times[c], "overhead_s": times[c] / 10, "test_accuracy": 0.5,
                 "bytes_from": "CommStats / lo"} for c in cases]


def table(tmp_path: Path, *extra: str) -> tuple[dict[str, dict], str, FakeRuns]:
    """The rows by case and the settings line of --only dds-fp32,flower with `extra` flags."""
    a = bench.parse_cases(bench.parser(), ["--results-dir", str(tmp_path), "--only", "dds-fp32,flower", *extra],
                          bench.TABLE)
    runs = FakeRuns()
    rows, notes = bench.run_repeats(a, bench.TABLE, runs)
    return {r["case"]: r for r in rows}, notes, runs


def test_repeats_alternate_the_order_and_each_run_has_its_own_id(tmp_path):
    rows, _, runs = table(tmp_path, "--repeats", "3")
    assert [cases for cases, _ in runs.calls] == [["dds-fp32", "flower"], ["flower", "dds-fp32"],
                                                   ["dds-fp32", "flower"]]
    ids = [rows[case]["run_id"].split() for case in ("dds-fp32", "flower")]
    assert [len(i) for i in ids] == [3, 3] and len(set(ids[0] + ids[1])) == 6


def test_a_ratio_is_the_median_of_the_repeats_ratios(tmp_path):
    """Per repeat 2.0, 1.0 and 0.5: the median 1.0; the other columns are medians over the repeats."""
    rows, notes, _ = table(tmp_path, "--repeats", "3")
    dds = rows["dds-fp32"]
    assert dds["round_time_x_of_flower"] == 1.0 and dds["overhead_x_of_flower"] == 1.0
    assert (dds["round_time_s"], dds["overhead_s"], dds["run_wall_s"]) == (2.0, 0.2, 10.0)
    assert dds["bytes_from"] == "CommStats / lo" and dds["status"] == "ok"
    assert rows["flower"]["round_time_x_of_dds_fp32"] == 1.0
    assert "round_time_x_of_flower per repeat: dds-fp32 2 1 0.5\n" in notes
    assert "round_time_x_of_dds_fp32 per repeat: flower 0.5 1 2\n" in notes
    assert "each case ran 3 times" in notes


def test_two_repeats_take_the_mean_of_the_two_ratios(tmp_path):
    rows, _, _ = table(tmp_path, "--repeats", "2")
    assert rows["dds-fp32"]["round_time_x_of_flower"] == 1.5  # (3.0 / 1.5 + 2.0 / 2.0) / 2


def test_one_repeat_is_one_run_each_as_before(tmp_path):
    rows, notes, runs = table(tmp_path)
    assert runs.calls == [(["dds-fp32", "flower"], "bench-peers-fl")]
    assert rows["dds-fp32"]["run_id"] == "stamp-bench-peers-fl-dds-fp32"
    assert rows["dds-fp32"]["round_time_x_of_flower"] == 2.0 and "per repeat" not in notes


def test_a_failed_repeat_is_named_in_the_status():
    rows = [{"case": "flower", "run_id": "a", "status": "ok", "round_time_s": 1.0},
            {"case": "flower", "run_id": "b", "status": "exit 1; no tables (RunError)"},
            {"case": "flower", "run_id": "c", "status": "ok", "round_time_s": 3.0}]
    row = bench.median_row("flower", rows)
    assert row["status"] == "repeat 2: exit 1; no tables (RunError)"
    assert row["round_time_s"] == 2.0 and row["run_id"] == "a b c"


def test_repeats_below_one_are_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--results-dir", str(tmp_path), "--repeats", "0"])
    assert e.value.code == 2 and not (tmp_path / "bench").exists()
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("--repeats 0: need at least 1")
