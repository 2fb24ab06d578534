"""Bandwidth traces: parsing, the rate of a node at a time, the record of rates set, and a short
FL run on a trace in network namespaces (root) whose rounds.csv carries the rate that was set."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from commlab.links.trace import RATES_FILE, LinkRates, append_rates, load_trace
from commlab.links.profiles import link_for, trace_path
from commlab.links.spec import LinkError

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


def test_a_node_takes_its_own_rows_over_the_star_and_keeps_a_rate_until_the_next(tmp_path):
    trace = load_trace(write(tmp_path, "time_s,node,rate\n0,*,10mbit\n0,client-1,2mbit\n5,*,1000000\n"
                                       "7,client-1,500kbit\n"))
    assert trace.rate_at("client-0", 0) == 10e6 and trace.rate_at("client-1", 0) == 2e6
    assert trace.rate_at("client-0", 6) == 1e6
    assert trace.rate_at("client-1", 6) == 1e6  # the later '*' row wins over its own earlier one
    assert trace.rate_at("client-1", 99) == 500e3
    assert trace.change_times() == [5.0, 7.0]
    assert link_for(f"trace:{tmp_path / 'trace.csv'}", "client-1").rate_bps == 2e6
    assert link_for(f"trace:{tmp_path / 'trace.csv'}-loss1", "client-0").loss_pct == 1.0


@pytest.mark.parametrize("text, problem", [
    ("t,node,rate\n0,*,1mbit\n", "header must be time_s,node,rate"),
    ("time_s,node,rate\n0,*,fast\n", "line 2: rate 'fast'"),
    ("time_s,node,rate\n0,*,-5\n", "line 2: rate '-5'"),
    ("time_s,node,rate\n0,*,1mbit\n5,*\n", "line 3: expected 3 fields"),
    ("time_s,node,rate\n5,*,1mbit\n2,*,1mbit\n", "line 3: time_s '2' must be >= 0 and not decrease"),
    ("time_s,node,rate\n", "no rows"),
])
def test_bad_trace_files_are_one_line_naming_the_line(tmp_path, text, problem):
    with pytest.raises(LinkError, match=problem):
        load_trace(write(tmp_path, text))


def test_a_node_without_a_rate_at_zero_is_named(tmp_path):
    with pytest.raises(LinkError, match="no rate for client-0 at 0 s"):
        link_for(f"trace:{write(tmp_path, 'time_s,node,rate' + chr(10) + '0,client-1,1mbit' + chr(10))}", "client-0")


def test_a_trace_profile_names_its_file_with_or_without_loss_and_fixed_rates_none():
    assert trace_path("trace:experiments/traces/cellular.csv") == Path("experiments/traces/cellular.csv")
    assert trace_path("trace:/tmp/t.csv-loss5") == Path("/tmp/t.csv")
    assert trace_path("10mbit-loss5") is None and trace_path("lan") is None and trace_path("hetero4") is None


def test_missing_trace_file_is_named(tmp_path):
    with pytest.raises(LinkError, match="trace file .*nope.csv"):
        link_for(f"trace:{tmp_path / 'nope.csv'}", "client-0")


def test_shipped_traces_load_and_cover_every_node():
    for name in ("diurnal", "cellular"):
        trace = load_trace(REPO / "netem" / "traces" / f"{name}.csv")
        for node in ("controller", "client-0", "client-3", "worker-1"):
            assert trace.rate_at(node, 0) > 0
        assert len({trace.rate_at("client-0", t) for t in trace.change_times()}) > 5


def test_link_rates_follow_the_last_row_of_each_node(tmp_path):
    path = tmp_path / RATES_FILE
    rates = LinkRates(path)
    assert rates.rate_of("client-0") is None
    append_rates(path, 0.0, {"client-0": 10e6, "client-1": 5e6})
    assert rates.rate_of("client-0") == 10e6
    append_rates(path, 3.0, {"client-0": 1e6})
    assert rates.rate_of("client-0") == 1e6 and rates.rate_of("client-1") == 5e6
    with open(path, newline="") as f:
        assert next(csv.reader(f)) == ["time_unix_s", "trace_s", "node", "rate_bps"]


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces and tc need root")
def test_fl_run_on_a_trace_records_the_rate_each_client_had(tmp_path, domain):
    """The trace drops client-1 from 20 to 4 Mbit/s half a second after the nodes start: before
    any node has loaded torch, so every round's row carries the new rate."""
    trace = write(tmp_path, "time_s,node,rate\n0,*,20mbit\n0.5,client-1,4mbit\n")
    run = subprocess.run([sys.executable, "-m", "commlab.fl.run", "--codec", "int8_sparse", "--clients", "2",
                          "--rounds", "2", "--samples-per-round", "128", "--train-subset", "2000",
                          "--test-subset", "300", "--backend", "local", "--profile", f"trace:{trace}",
                          "--results-dir", str(tmp_path / "results"), "--run-id", "trace",
                          "--domain-id", str(domain)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    run_dir = tmp_path / "results" / "trace"
    with open(run_dir / RATES_FILE, newline="") as f:
        set_rates = [(r["node"], float(r["rate_bps"]), float(r["trace_s"])) for r in csv.DictReader(f)]
    assert ("client-1", 20e6, 0.0) in set_rates and ("client-1", 4e6, 0.5) in set_rates
    with open(run_dir / "rounds.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["client_rates_bps"] for r in rows] == ["client-0=20000000;client-1=4000000"] * 2
