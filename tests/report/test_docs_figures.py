"""No measured figure typed by hand into the README or docs prose: measured numbers live in the
generated tables under docs/results/ (make results) or in a benchmark's own table, each headed by
its command, commit and machine. What looks measured: a percentage with decimals ("97.42 %"), a
decimal ratio ("0.909x") and percentage points ("-0.6 pp"). Figures that are definitions (DGC's
warm-up schedule and default density, a link profile's loss, a target in points) are allowed by
the patterns below, and nothing else."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # not docs/results/: generated

MEASURED = re.compile(r"[-+]?\b\d+\.\d+ ?%"         # a percentage with decimals
                      r"|\b\d+\.\d+x\b"              # a decimal ratio
                      r"|[-+]?\b\d+(?:\.\d+)? ?pp\b")  # percentage points
DEFINITIONS = [
    re.compile(r"25 ?%(?: ->|,) 6\.25 ?%(?: ->|,) 1\.5625 ?%(?: ->|,) 0\.4 ?%"),  # DGC's warm-up stages
    re.compile(r"density\b[^.\n]{0,25}?0\.1 ?%"),   # DGC's default density
    re.compile(r"\b\d+(?:\.\d+)? ?% loss\b"),         # a link profile's packet loss
    re.compile(r"\btarget of \d+(?:\.\d+)? pp\b"),    # a goal a benchmark checks, not a result
]


def measured_figures(text: str) -> list[str]:
    """Each line of ``text`` holding a measured-looking figure, as "<line number>: <figures>",
    once the definitional patterns are taken out."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for allowed in DEFINITIONS:
            line = allowed.sub(" ", line)
        if figures := MEASURED.findall(line):
            found.append(f"{number}: {', '.join(figures)}")
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_carry_no_measured_figure_in_prose(doc: Path):
    found = measured_figures(doc.read_text())
    assert not found, (f"{doc.relative_to(ROOT)}: measured figures typed into prose (put them in a "
                       f"generated table and refer to it): " + "; ".join(found))


@pytest.mark.parametrize("text", [
    "joint reached 97 % in a median 70.0 s, 0.909x the baseline",
    "randomk at 30 % -1.0 / -2.1 pp",
    "FL powersgd2 98.31 / 98.57 / 98.43 % against fp32's",
    "the ring sends 1.378x the payload",
    "test accuracy after 2 epochs | **98.74%** |",
    "1.05 pp apart",
])
def test_a_measured_figure_is_found(text: str):
    assert measured_figures(text)


@pytest.mark.parametrize("text", [
    "The schedule is DGC's warm-up: 25 % -> 6.25 % -> 1.5625 % -> 0.4 % in equal stages",
    "rounds 1-4 at 25 %, 6.25 %, 1.5625 %, 0.4 %,",
    "the sampled-threshold top-k at `density` (default 0.1 %), fp16 values",
    "DGC warm-up (density 25% down to 0.1%)",
    "2 Mbit/s 40 ms 0.5% loss",
    "against the target of 5 pp below clean FedAvg",
    "a client sending -100x its update, paused 1x/5x/30x the lease",
    "ring bytes sent <= 1.1 x 2(W-1)/W x payload",
    "tested with 10 MB + 1.7 MB messages, at 50 % density",
])
def test_a_definition_is_not_taken_for_a_measurement(text: str):
    assert measured_figures(text) == []
