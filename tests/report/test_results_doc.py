"""Generated result tables carry the header that says where their numbers come from: every file
under docs/results/ has it, and the writer produces it for a small table."""
from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from commlab.report.provenance import HEADER_FIELDS, header, machine
from commlab.report.results_doc import document

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
