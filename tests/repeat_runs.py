"""`--repeat N` (make test-repeat): run every selected test N times and report, per test, how many
runs passed, so a flaky test shows up as "17/20" instead of as one random red CI run."""
from __future__ import annotations

import re
from collections import defaultdict

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--repeat", type=int, default=1, metavar="N",
                     help="run each selected test N times and print per-test pass counts")


@pytest.fixture
def repeat_run(request: pytest.FixtureRequest) -> int:
    return request.param


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    n = metafunc.config.getoption("repeat")
    if n > 1:
        metafunc.fixturenames.append("repeat_run")
        metafunc.parametrize("repeat_run", range(n), indirect=True, ids=[f"run{i + 1}of{n}" for i in range(n)])


def base_test_id(nodeid: str) -> str:
    """The test's id without the repeat parameter (kept apart from its other parameters)."""
    name, bracket, params = nodeid.partition("[")
    if not bracket:
        return nodeid
    kept = [p for p in params.rstrip("]").split("-") if not re.fullmatch(r"run\d+of\d+", p)]
    return name + (f"[{'-'.join(kept)}]" if kept else "")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    n = config.getoption("repeat")
    if n <= 1:
        return
    runs: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for outcome in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(outcome, []):
            if getattr(report, "when", "call") == "call" or outcome in ("error", "skipped"):
                runs[base_test_id(report.nodeid)][outcome] += 1
    terminalreporter.section(f"test-repeat: {n} runs per test")
    flaky = 0
    for test, counts in sorted(runs.items()):
        bad = counts["failed"] + counts["error"]
        flaky += bad > 0
        note = f", {bad} FAILED" if bad else ""
        skipped = f", {counts['skipped']} skipped" if counts["skipped"] else ""
        terminalreporter.write_line(f"{counts['passed']}/{n} passed{note}{skipped}  {test}")
    terminalreporter.write_line(f"test-repeat: {len(runs)} tests, {flaky} with failures")
