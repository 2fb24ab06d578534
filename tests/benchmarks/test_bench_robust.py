"""benchmarks/bench_robust.py, the pure parts: each rule's launcher flags, the pp columns per
setting and the verdict against the target (no runs)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pandas as pd

from commlab.fl.run import build_configs, parse_args
from commlab.sweep.benchmark import write_spec
from commlab.sweep.spec import load

spec = importlib.util.spec_from_file_location("bench_robust", Path(__file__).parents[2] / "benchmarks" / "bench_robust.py")
bench = importlib.util.module_from_spec(spec)
sys.modules["bench_robust"] = bench  # its dataclass looks its module up while the module loads
spec.loader.exec_module(bench)


def test_every_rule_builds_a_valid_config_for_every_setting(tmp_path):
    a = bench.parse_args(["--settings", *bench.SETTINGS, "--results-dir", str(tmp_path)])
    sweep = load(write_spec(bench.sweep_spec(a), tmp_path / "robust.json"))  # each cell through the launcher's parser
    assert len(sweep.cells) == len(bench.SETTINGS) * len(bench.RULES) * 2
    for cell in sweep.cells:
        name, rule, attacked = bench.jobs(a)[cell.entry]
        clients = bench.SETTINGS[name].clients
        controller, _ = build_configs(parse_args(cell.argv(tmp_path, 5)[3:]))  # raises ConfigError on a bad flag
        assert controller["expected_clients"] == clients and ("attack" in cell.config) == attacked
        if rule == "trimmed_mean":  # one value cut per side, also with 3 clients
            assert int(controller["strategy"]["trim_fraction"] * clients) >= 1
        if rule == "multi_krum":
            assert controller["strategy"]["keep"] == clients - 1


def test_deltas_and_verdict_per_setting():
    rows = [("3", "fedavg", "none", 0.90), ("3", "fedavg", "x", 0.10), ("3", "fltrust", "none", 0.92),
            ("3", "fltrust", "x", 0.86), ("3", "median", "x", 0.60), ("10", "fedavg", "none", 0.95),
            ("10", "krum", "x", 0.80), ("4", "fedavg", "none", 0.90), ("4", "median", "x", 0.92)]
    table = bench.with_deltas(pd.DataFrame(rows, columns=["setting", "rule", "attack", "test_accuracy"]))
    assert table["delta_vs_fedavg_pp"].round(6).tolist() == [0, -80, 2, -4, -30, 0, -15, 0, 2]
    assert table["delta_vs_own_clean_pp"].round(6).tolist()[:4] == [0, -80, 0, -6]
    assert bench.verdicts(table) == [
        "- 3: best under attack fltrust, 86.00 %, 4.00 pp below clean FedAvg (within the target of 5 pp)",
        "- 10: best under attack krum, 80.00 %, 15.00 pp below clean FedAvg (misses it by 10.00 pp of 5 pp)",
        "- 4: best under attack median, 92.00 %, 2.00 pp above clean FedAvg (within the target of 5 pp)"]
