"""SecAgg+ rounds through real node processes (int8 on the shared field grid): the controller's
unmasked sum is bit for bit the sum of the levels the clients recorded, with client sampling, with
a client killed after sharing its keys or after sending its masked input, and with DP noise the
clients added (whose epsilon in rounds.csv is the accountant's)."""
from __future__ import annotations

import csv
import json
import signal
from pathlib import Path

import numpy as np
import pytest

from commlab.fl.secagg_client import LEVELS_DIR
from commlab.privacy.accountant import epsilon
from commlab.testbed.node_procs import start_fl

pytestmark = pytest.mark.slow
SECAGG = ("--secagg", "--secagg-record", "--codec", "int8", "--model-param", "hidden=16")


def recorded(run_dir: Path, rnd: int) -> tuple[np.ndarray, dict, dict[str, np.ndarray]]:
    """The controller's sum and its survivors, and every client's levels of round `rnd`."""
    levels = run_dir / LEVELS_DIR
    clients = {p.stem.split("-", 1)[1]: np.load(p) for p in levels.glob(f"r{rnd}-client-*.npy")}
    return np.load(levels / f"r{rnd}-sum.npy"), json.loads((levels / f"r{rnd}-sum.json").read_text()), clients


def plain_sum(levels: dict[str, np.ndarray], names: list[str], modulus: int) -> np.ndarray:
    return (sum(levels[c].astype(np.uint64) for c in names) % modulus).astype(np.uint32)


def rounds_rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "rounds.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("dp", [(), ("--dp-noise", "0.5", "--dp-delta", "1e-3")], ids=["plain", "dp"])
def test_sampled_secagg_rounds_sum_exactly_the_clients_levels(tmp_path, domain, dp):
    """With DP the recorded levels are the noised ones each client masked: the sum is theirs bit for
    bit, some leave 0..254 (the noise is on the grid), and epsilon is the accountant's for z 0.5 at
    sampling rate 3/4."""
    procs, _, run_dir = start_fl(tmp_path, domain, 2, clients=4, deadline=60.0,
                                 extra=(*SECAGG, "--per-round", "3", *dp))
    try:
        for p in procs.values():
            assert p.finish(timeout=600) == 0, p.text()
    finally:
        for p in procs.values():
            p.stop()
    rows = rounds_rows(run_dir)
    assert [r["n_participants"] for r in rows] == ["3", "3"]
    for rnd, row in enumerate(rows, start=1):
        total, meta, levels = recorded(run_dir, rnd)
        assert sorted(levels) == meta["survivors"] == row["participants"].split(";")  # the sampled three
        assert meta["dropped"] == []
        assert total.dtype == np.uint32 and int(total.max()) < meta["modulus"]
        assert np.array_equal(total, plain_sum(levels, meta["survivors"], meta["modulus"]))
        assert any(int(v.max()) > 254 for v in levels.values()) == bool(dp)
        if dp:
            assert float(row["epsilon"]) == pytest.approx(epsilon(0.5, 0.75, rnd, 1e-3), rel=1e-6)


@pytest.mark.parametrize("point, in_sum", [("secagg_before_masked", False), ("secagg_after_masked", True)])
def test_secagg_round_completes_with_a_client_killed_mid_protocol(tmp_path, domain, point, in_sum):
    """4 clients, 3 neighbours each, threshold 2: one client may drop at any step. Killed after its
    shares went out it is left out of the sum (its pairwise masks rebuilt from its key's shares and
    removed); killed after its masked input went out it is in the sum (its self mask rebuilt)."""
    procs, _, run_dir = start_fl(tmp_path, domain, 1, clients=4, deadline=60.0, extra=SECAGG,
                                 halt={"client-3": f"{point}@1"})
    try:
        procs["client-3"].wait_for(f"HALTED at {point}@1")
        procs["client-3"].proc.send_signal(signal.SIGKILL)
        assert procs["controller"].finish(timeout=600) == 0, procs["controller"].text()
    finally:
        for p in procs.values():
            p.stop()
    total, meta, levels = recorded(run_dir, 1)
    survivors = ["client-0", "client-1", "client-2"] + (["client-3"] if in_sum else [])
    assert (meta["survivors"], meta["dropped"]) == (survivors, [] if in_sum else ["client-3"])
    assert np.array_equal(total, plain_sum(levels, survivors, meta["modulus"]))
    assert rounds_rows(run_dir)[0]["participants"] == ";".join(survivors)
