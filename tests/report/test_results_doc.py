"""Generated result tables carry the header that says where their numbers come from: every file
under docs/results/ has it, and the writer produces it for a small table; a sweep benchmark's
table comes from its sweep file's cells."""
from __future__ import annotations

import csv
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

from commlab.bench.options import table_stem
from commlab.report import results_doc
from commlab.report.provenance import HEADER_FIELDS, header, machine
from commlab.report.results_doc import accuracy_gaps, document, matrix_gaps

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
PATTERNS = {"command": r"`[^`]+`", "commit": r"`[0-9a-f]{7,}(\+dirty)?`", "date": r"\d{4}-\d\d-\d\d \d\d:\d\d UTC",
            "machine": r"\d+ cores, .+, kernel \S+", "wall time": r"(\d+ min )?\d+ s"}


def assert_header(text: str) -> None:
    lines = text.splitlines()
    for field in HEADER_FIELDS:
        found = [line for line in lines if line.startswith(f"- {field}: ")]
        assert found, f"no '- {field}:' line"
        assert re.search(PATTERNS[field], found[0]), found[0]
    assert any(line.startswith("|---") for line in lines), "no table"


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.md")), ids=lambda p: p.name)
def test_every_generated_table_has_its_header(path: Path) -> None:
    assert_header(path.read_text())


def test_there_are_generated_tables() -> None:
    assert sorted(RESULTS.glob("*.md"))


def test_writer_produces_the_header() -> None:
    head = header("`python benchmarks/bench_codecs.py --reps 1`", "abc1234+dirty",
                  datetime(2026, 1, 2, 3, 4, tzinfo=timezone.utc), machine(), 125.4)
    text = document("Codecs", head, [{"codec": "int8", "wire_ratio": "0.25012"}],
                    {"codec": ("codec", ""), "wire_ratio": ("wire, x of fp32", ".4f")})
    assert_header(text)
    assert "- date: 2026-01-02 03:04 UTC" in text and "- wall time: 2 min 5 s" in text
    assert "| int8 | 0.2501 |" in text


def test_matrix_gaps_name_the_best_and_worst_compressor_and_the_gap_within_each_seed(tmp_path: Path) -> None:
    rows = [{"mode": "fl", "compressor": "fp32", "test_accuracy": "0.80", "status": "ok"},
            {"mode": "fl", "compressor": "signsgd", "test_accuracy": "0.7525", "status": "ok"},
            {"mode": "fl", "compressor": "centralized", "test_accuracy": "0.95", "status": "ok"},
            {"mode": "fl", "compressor": "dgc", "test_accuracy": "", "status": "failed"},  # every seed failed
            {"mode": "ddp", "compressor": "fp32", "test_accuracy": "0.70", "status": "ok"}]
    runs = [{"mode": "fl", "compressor": c, "seed": seed, "test_accuracy": acc, "status": status}
            for c, seed, acc, status in [("fp32", 0, "0.80", "ok"), ("signsgd", 0, "0.75", "ok"),
                                         ("fp32", 1, "0.81", "ok"), ("signsgd", 1, "0.70", "ok"),
                                         ("fp32", 2, "0.79", "ok"), ("signsgd", 2, "0.76", "ok"),
                                         ("dgc", 2, "0.10", "exit 1"),  # a failed run counts in no gap
                                         ("centralized", 1, "0.99", "ok")]]
    runs.append({"mode": "ddp", "compressor": "fp32", "seed": 0, "test_accuracy": "0.70", "status": "ok"})
    fl = ("- FL: best fp32 80.00 %, worst signsgd 75.25 % (median accuracy over seeds), best-to-worst gap 4.75 pp; "
          "within each seed (3 seeds): median 5.00 pp, min 3.00 pp, max 11.00 pp")
    ddp = ("- DDP: best fp32 70.00 %, worst fp32 70.00 % (median accuracy over seeds), best-to-worst gap 0.00 pp; "
           "within each seed (1 seed): median 0.00 pp, min 0.00 pp, max 0.00 pp")
    assert accuracy_gaps(rows, runs) == [fl, ddp]
    table_csv = tmp_path / "matrix.csv"
    for path, items in ((table_csv, rows), (tmp_path / "matrix-runs.csv", runs)):
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(items[0]))
            writer.writeheader()
            writer.writerows(items)
    assert matrix_gaps(table_csv) == [fl, ddp]
    text = document("Matrix", ["- command: `x`"], rows[:1], {"compressor": ("compressor", "")}, [fl, ddp])
    assert text.endswith(f"| fp32 |\n\n{fl}\n{ddp}\n")


def test_the_published_matrix_runs_its_sweep_file_then_builds_its_table_from_those_cells(tmp_path, monkeypatch):
    ran: list[list[str]] = []

    def fake_run(argv, cwd):
        ran.append(argv[1:])
        stem = table_stem(cwd / "results", "matrix-fashion_mnist", True)
        stem.parent.mkdir(parents=True, exist_ok=True)
        stem.with_suffix(".csv").write_text("mode,compressor,test_accuracy\nfl,fp32,0.7\n")
        return subprocess.CompletedProcess(argv, 0)
    monkeypatch.setattr(results_doc.subprocess, "run", fake_run)
    monkeypatch.setattr(results_doc, "git_commit", lambda root: "0123456")
    bench = results_doc.BENCHES["matrix-fashion_mnist"]
    monkeypatch.setattr(results_doc, "BENCHES", {"matrix-fashion_mnist": results_doc.Bench(
        bench.title, bench.script, {"mode": ("mode", ""), "test_accuracy": ("test accuracy", ".2f")}, bench.args,
        sweep=True)})
    out = results_doc.run("matrix-fashion_mnist", True, tmp_path / "docs", tmp_path)
    assert ran == [["-m", "commlab.sweep", "experiments/sweeps/matrix-fashion_mnist-quick.json"],
                   ["benchmarks/bench_matrix.py", *bench.args, "--quick", "--resume"]]
    text = out.read_text()
    assert "`python -m commlab.sweep experiments/sweeps/matrix-fashion_mnist-quick.json` then `python " in text
    assert "| fl | 0.70 |" in text


def test_identical_rounds_counts_the_rounds_whose_models_match(tmp_path: Path) -> None:
    table_csv = tmp_path / "swarm-engines.csv"
    table_csv.write_text("round,compose_model,swarm_model,equal\n1,a,a,True\n2,b,c,False\n3,d,d,True\n")
    assert results_doc.identical_rounds(table_csv) == ["rounds with bit-identical models: 2/3"]


def test_fl_peer_ratios_give_the_medians_then_each_ratio_repeat_by_repeat(tmp_path: Path) -> None:
    table_csv = tmp_path / "peers-fl-lan.csv"
    table_csv.write_text("case,round_time_x_of_flower,overhead_x_of_flower,round_time_x_of_dds_fp32,overhead_x_of_dds_fp32\n"
                         "dds-fp32,0.575,1.062,1,1\ndds-int8_sparse,0.6,0.9,0.931,0.77\nflower,1,1,1.7,0.9\n")
    table_csv.with_suffix(".md").write_text("# title\n\nlan, 2 clients\n\n"
                                            "round_time_x_of_flower per repeat: dds-fp32 0.839 0.575\n\n| case |\n")
    assert results_doc.fl_peer_ratios(table_csv) == [
        "- dds-fp32 round time, x Flower's: 0.575 (median over the repeats)",
        "- dds-fp32 overhead, x Flower's: 1.062 (median over the repeats)",
        "- dds-int8_sparse round time, x DDS fp32's: 0.931 (median over the repeats)",
        "- dds-int8_sparse overhead, x DDS fp32's: 0.770 (median over the repeats)",
        "- round_time_x_of_flower per repeat: dds-fp32 0.839 0.575"]


def test_a_benchmark_with_a_figure_publishes_it_beside_its_table_with_its_notes(tmp_path, monkeypatch):
    def fake_run(argv, cwd):
        stem = table_stem(cwd / "results", "crossover", True)
        stem.parent.mkdir(parents=True, exist_ok=True)
        stem.with_suffix(".csv").write_text("mode,case\nfl,int8\n")
        stem.with_suffix(".svg").write_text("<svg>drawn</svg>")
        stem.with_name(stem.name + "-notes.md").write_text("FL: 2 clients\n\n- fl int8: pays off at 10mbit and below\n")
        return subprocess.CompletedProcess(argv, 0)
    monkeypatch.setattr(results_doc.subprocess, "run", fake_run)
    monkeypatch.setattr(results_doc, "git_commit", lambda root: "0123456")
    bench = results_doc.BENCHES["crossover"]
    monkeypatch.setattr(results_doc, "BENCHES", {"crossover": results_doc.Bench(
        bench.title, bench.script, {"mode": ("mode", ""), "case": ("case", "")}, summary=bench.summary,
        figure=bench.figure)})
    out = results_doc.run("crossover", True, tmp_path / "docs", tmp_path)
    assert (tmp_path / "docs" / "crossover.svg").read_text() == "<svg>drawn</svg>"
    assert out.read_text().endswith("| fl | int8 |\n\nFL: 2 clients\n\n- fl int8: pays off at 10mbit and below\n\n"
                                    f"![{bench.title}](crossover.svg)\n")
