"""Client sampling and availability traces (docs/scale.md): the seeded sampler, the trace reader
and generator, their config checks, and one multi-process run in which only the sampled clients train."""
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from commlab.config.schema import ConfigError, from_dict
from commlab.fl.config import ControllerConfig
from commlab.fl.messages import TrainCmd
from commlab.fl.run import build_configs, parse_args
from commlab.fl.sampling import (Availability, diurnal_trace, load_availability, per_round_count, sample_clients,
                                 select_round, write_trace)
from commlab.runs.roster import fl_roster
from commlab.runs.seeds import SeedTree
from commlab.testbed.node_procs import NodeProcess

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = [f"client-{i}" for i in range(10)]


def test_sampler_is_seeded_reproducible_and_order_free():
    picks = [sample_clients(CLIENTS, 3, SeedTree(7).sampling(r)) for r in range(1, 21)]
    assert picks == [sample_clients(list(reversed(CLIENTS)), 3, SeedTree(7).sampling(r)) for r in range(1, 21)]
    assert all(len(p) == len(set(p)) == 3 and p == sorted(p) and set(p) <= set(CLIENTS) for p in picks)
    assert len({tuple(p) for p in picks}) > 10  # rounds differ
    assert picks != [sample_clients(CLIENTS, 3, SeedTree(8).sampling(r)) for r in range(1, 21)]  # so do seeds
    assert sample_clients(CLIENTS[:2], 3, SeedTree(7).sampling(1)) == CLIENTS[:2]


def test_per_round_count_and_its_config_checks(tmp_path):
    assert per_round_count(None, 10) == 10 and per_round_count(3, 10) == 3
    assert per_round_count(0.25, 10) == 2 and per_round_count(0.01, 10) == 1 and per_round_count(1.0, 10) == 10
    cfg = controller(tmp_path, "--clients", "4", "--per-round", "0.5")
    assert from_dict(ControllerConfig, cfg).per_round() == 2
    for flags, message in [(["--per-round", "5"], "sampling.clients_per_round: must be in 1..4, got 5"),
                           (["--per-round", "1.5"], "sampling.clients_per_round: a fraction must be in (0, 1], got 1.5"),
                           (["--per-round", "2", "--min-clients", "3"],
                            "sampling.clients_per_round: 2 is below min_clients 3")]:
        with pytest.raises(ConfigError, match="^" + re.escape(message)):
            controller(tmp_path, "--clients", "4", *flags)


def test_unavailable_clients_are_never_selected():
    trace = Availability({"client-0": [(1, 5)], "client-1": [(3, 3), (8, 9)], "client-2": [(1, 10)],
                          "client-3": [(2, 10)]})  # client-4..9: no rows, never available
    for rnd in range(1, 12):
        on = {c for c, spans in trace.intervals.items() if any(a <= rnd <= b for a, b in spans)}
        chosen = select_round(rnd, CLIENTS, 2, SeedTree(), trace, 1, [].append)
        assert set(chosen) <= on and len(chosen) == min(2, len(on))


def test_too_few_available_is_one_line_and_uses_those():
    log: list[str] = []
    trace = Availability({"client-3": [(1, 1)]})
    assert select_round(1, CLIENTS, 4, SeedTree(), trace, 2, log.append) == ["client-3"]
    assert select_round(2, CLIENTS, 4, SeedTree(), trace, 2, log.append) == []
    assert log == ["round 1: only 1 client(s) available (client-3), fewer than min_clients=2: the round uses those",
                   "round 2: only 0 client(s) available (none), fewer than min_clients=2: the round uses those"]


@pytest.mark.parametrize("rows, message", [
    ("client,first,last\n", "row 1: header must be client_id,first_round,last_round"),
    ("client_id,first_round,last_round\nclient-0,1,2\nclient-9,1,2\n", "row 3: unknown client_id 'client-9'"),
    ("client_id,first_round,last_round\nclient-0,one,2\n", "row 2: first_round and last_round must be integers"),
    ("client_id,first_round,last_round\nclient-1,4,2\n", "row 2: need 1 <= first_round <= last_round, got 4, 2"),
    ("client_id,first_round,last_round\nclient-1,4\n", "row 2: expected 3 fields"),
])
def test_bad_trace_is_one_line_naming_file_and_row(tmp_path, rows, message):
    path = tmp_path / "trace.csv"
    path.write_text(rows)
    with pytest.raises(ConfigError) as e:
        load_availability(path, CLIENTS[:4])
    assert str(e.value).startswith(f"{path}: {message}") and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=re.escape(f"{path}: {message}")):  # the launcher stops on it too
        controller(tmp_path, "--clients", "4", "--availability", str(path))


def test_diurnal_trace_is_seeded_and_reads_back(tmp_path):
    rows = diurnal_trace(6, 30, period=10, on_fraction=0.3, seed=1)
    assert rows == diurnal_trace(6, 30, period=10, on_fraction=0.3, seed=1) != diurnal_trace(6, 30, 10, 0.3, seed=2)
    write_trace(tmp_path / "t.csv", rows)
    trace = load_availability(tmp_path / "t.csv", CLIENTS[:6])
    for c in CLIENTS[:6]:  # on 3 rounds in every full day of 10, each client at its own phase
        on = [r for r in range(1, 31) if trace.available(r, [c])]
        assert all(sum(1 for r in on if day * 10 < r <= day * 10 + 10) == 3 for day in range(3))


@pytest.mark.slow
def test_trace_command_writes_the_seeded_trace(tmp_path):
    write_trace(tmp_path / "t.csv", diurnal_trace(6, 30, period=10, on_fraction=0.3, seed=1))
    assert subprocess.run([sys.executable, "-m", "commlab.fl.sampling", "--clients", "6", "--rounds", "30",
                           "--period", "10", "--on-fraction", "0.3", "--seed", "1", "--out", str(tmp_path / "c.csv")],
                          check=True, capture_output=True).returncode == 0
    assert (tmp_path / "c.csv").read_text() == (tmp_path / "t.csv").read_text()


def test_train_cmd_names_its_clients():
    cmd = TrainCmd(round=1, epochs=1, lr=0.1, subset_size=10, codec="fp32", clients="client-0;client-2")
    assert cmd.problem() is None and cmd.names("client-2") and not cmd.names("client-1")
    assert TrainCmd(round=1, epochs=1, lr=0.1, subset_size=10, codec="fp32").names("client-1")
    for bad in ("client-0;client-0", "client-0;", ";", " client-1"):
        cmd.clients = bad
        assert "clients must be distinct" in cmd.problem()


def controller(tmp_path: Path, *argv: str) -> dict:
    cfg, _ = build_configs(parse_args(["--results-dir", str(tmp_path / "results"), "--run-id", "s",
                                       "--domain-id", "5", *argv]))
    return cfg


@pytest.mark.slow
def test_run_trains_only_the_sampled_clients(tmp_path, domain):
    rounds, seed = 3, 0
    ctl, cls = build_configs(parse_args([
        "--codec", "int8_sparse", "--clients", "4", "--per-round", "2", "--rounds", str(rounds), "--deadline", "60",
        "--samples-per-round", "128", "--batch-size", "32", "--train-subset", "2000", "--test-subset", "300",
        "--seed", str(seed), "--results-dir", str(tmp_path / "results"), "--run-id", "sampled",
        "--domain-id", str(domain)]))
    run_to_completion(tmp_path, [ctl, *cls])
    run_dir = tmp_path / "results" / "sampled"
    with open(run_dir / "rounds.csv") as f:
        rows = list(csv.DictReader(f))
    ids = [f"client-{i}" for i in range(4)]
    expected = [sample_clients(ids, 2, SeedTree(seed).sampling(rnd)) for rnd in range(1, rounds + 1)]
    assert [r["participants"].split(";") for r in rows] == expected
    for i, name in enumerate(ids):  # a client trains (one row) exactly in the rounds it was sampled for
        with open(run_dir / f"clients-{i}.csv") as f:
            trained = [int(r["round"]) for r in csv.DictReader(f)]
        assert trained == [rnd for rnd in range(1, rounds + 1) if name in expected[rnd - 1]]
        skipped = re.findall(r"round (\d+): not selected", log_of(tmp_path, name))
        assert [int(r) for r in skipped] == [rnd for rnd in range(1, rounds + 1) if name not in expected[rnd - 1]]


def test_stop_section_reasons():
    from commlab.fl.config import StopSection
    assert StopSection().reason(1.0, 1e9) is None
    assert StopSection(accuracy=0.97).reason(0.9699, 1e9) is None
    assert "reached the target 0.97" in StopSection(accuracy=0.97).reason(0.97, 0.0)
    assert "reached the budget 60 s" in StopSection(round_time_budget_s=60).reason(0.0, 60.0)


@pytest.mark.slow
def test_run_ends_early_at_its_round_time_budget(tmp_path, domain):
    """--round-time-budget: the controller ends after the round that used it up; clients leave on
    the Stop naming that round, and the manifest says why."""
    ctl, cls = build_configs(parse_args([
        "--codec", "int8", "--clients", "2", "--rounds", "5", "--deadline", "60", "--samples-per-round", "64",
        "--batch-size", "32", "--train-subset", "1000", "--test-subset", "200", "--round-time-budget", "0.001",
        "--results-dir", str(tmp_path / "results"), "--run-id", "early", "--domain-id", str(domain)]))
    run_to_completion(tmp_path, [ctl, *cls])
    run_dir = tmp_path / "results" / "early"
    with open(run_dir / "rounds.csv") as f:
        assert [r["round"] for r in csv.DictReader(f)] == ["1"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["stopped_after_round"] == 1
    assert "reached the budget" in manifest["stop_reason"]
    assert "run over after round 1" in log_of(tmp_path, "client-0")


def run_to_completion(tmp_path: Path, cfgs: list[dict]) -> None:
    """Controller first, then the clients, as node processes (output in <name>.log); every one
    must exit 0 (its log in the failure message)."""
    procs = {}
    try:
        for node, cfg in zip(fl_roster(len(cfgs) - 1), cfgs):
            path = tmp_path / f"{node.name}.json"
            path.write_text(json.dumps(cfg))
            procs[node.name] = NodeProcess(tmp_path, node.name, [sys.executable, str(ROOT / "nodes" / node.script), str(path)])
        assert procs["controller"].finish(300) == 0, log_of(tmp_path, "controller")
        for name, p in procs.items():
            assert p.finish(120) == 0, log_of(tmp_path, name)
    finally:
        for p in procs.values():
            p.stop()


def log_of(tmp_path: Path, name: str) -> str:
    return (tmp_path / f"{name}.log").read_text()
