"""Logical clients: processes hosting several clients each (config `procs`, docs/scale.md).

Real node processes: the hosts train exactly the clients each round samples, each with its own
table and memory file, and speak only for their own clients; the clients' state lives in the
hosts, so a controller restart ends the run with the same model as a run without one.
"""
from __future__ import annotations

import re
import signal
import sys

import pytest

from commlab.fl.checkpoint import load_checkpoint
from commlab.fl.sampling import sample_clients
from commlab.runs.seeds import SeedTree
from commlab.runs.launch import NODES_DIR
from commlab.runs.roster import client_name
from commlab.testbed.node_procs import NodeProcess, start_fl
from test_fl_faults import rounds_rows

pytestmark = pytest.mark.slow


def finish(procs: dict[str, NodeProcess]) -> None:
    try:
        for name, p in procs.items():
            assert p.finish() == 0, p.text()
    finally:
        for p in procs.values():
            p.stop()


def test_hosts_train_the_sampled_clients_each_with_its_own_table_and_memory(tmp_path, domain):
    clients, rounds, per_round = 6, 2, 4
    procs, _, run_dir = start_fl(tmp_path, domain, rounds, clients=clients,
                                  extra=("--procs", "2", "--per-round", str(per_round)))
    assert sorted(procs) == ["clients-0", "clients-1", "controller"]
    # Each client's memory is a file of its host while the run lasts (removed once it is over).
    procs["controller"].wait_for(r"round 1/2 ")
    files = {p.name for p in (run_dir / "client-memory").glob("clients-*/client-*.state")}
    finish(procs)
    assert not list((run_dir / "client-memory").glob("clients-*/*"))
    names = [client_name(i) for i in range(clients)]
    samples = [sample_clients(names, per_round, SeedTree().sampling(r)) for r in range(1, rounds + 1)]  # run seed 0
    assert [r["participants"] for r in rounds_rows(run_dir)] == [";".join(sorted(s)) for s in samples]
    for i, name in enumerate(names):
        host = f"clients-{i % 2}"  # round robin
        with open(run_dir / f"clients-{i}.csv") as f:
            trained = [int(line.split(",")[0]) for line in f.readlines()[1:]]
        assert trained == [r for r in range(1, rounds + 1) if name in samples[r - 1]]
        for r in trained:
            assert re.search(rf"{name} round {r}: sent \d+ B update", procs[host].text())
        if 1 in trained or not trained:  # (a round-2 client may or may not have been written by then)
            assert (f"client-{i}.state" in files) == bool(trained)


def test_logical_clients_keep_their_state_across_a_controller_restart(tmp_path, domain):
    rounds, flags = 3, ("--procs", "2")
    (tmp_path / "clean").mkdir()
    clean, _, clean_dir = start_fl(tmp_path / "clean", domain, rounds, clients=4, extra=flags, run_id="clean")
    finish(clean)
    (tmp_path / "restart").mkdir()
    procs, paths, run_dir = start_fl(tmp_path / "restart", domain, rounds, clients=4, extra=flags,
                                      halt={"controller": "after_round@1"}, run_id="restart")
    try:
        ctl = procs["controller"]
        ctl.wait_for(r"HALTED at after_round@1")
        ctl.proc.send_signal(signal.SIGKILL)
        ctl.proc.wait()
        cfg = paths["controller"].read_text().replace('"init_path": null',
                                                      f'"init_path": "{run_dir / "checkpoints"}"')
        paths["controller"].write_text(cfg)
        procs["controller-2"] = NodeProcess(tmp_path / "restart", "controller-2",
                                     [sys.executable, str(NODES_DIR / "controller.py"), str(paths["controller"])])
        del procs["controller"]
        finish(procs)
    finally:
        for p in procs.values():
            p.stop()
    # The hosts outlived the controller with every client's memory: the same model as without the restart.
    final = load_checkpoint(run_dir / "checkpoints").weights
    assert load_checkpoint(clean_dir / "checkpoints").round == rounds
    assert (final == load_checkpoint(clean_dir / "checkpoints").weights).all()
