"""The peer benchmarks' smoke runs (`benchmarks/bench_peers.py --smoke`, `bench_peers_fl.py --smoke`:
every case on loopback, 2 ranks or clients, small subsets), each made once a session into a
temporary results folder (conftest's fixtures `peers_ddp_smoke`, `peers_fl_smoke`).
tests/benchmarks/test_bench_peers_smoke.py checks their tables; their runs are also the 2-rank int8
and powersgd2 DDS runs that tests/ddp/test_ddp.py checks and the Flower runs (legacy and
deployment transports) that tests/peers/test_peers_flower.py checks, so none of those is run twice."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


class Bench:
    def __init__(self, results: Path, table: pd.DataFrame, stdout: str):
        self.results, self.table, self.stdout = results, table, stdout

    def run_dir(self, case: str) -> Path:
        return self.results / self.table.loc[case, "run_id"]

    def output(self, case: str) -> str:
        """What the case's launcher printed (commlab.bench logs it beside the run folder)."""
        return self.results.joinpath(f"{self.table.loc[case, 'run_id']}.log").read_text()


def run_bench(tmp: Path, script: str) -> Bench:
    out_csv = tmp / "bench" / "table-quick.csv"
    log = tmp / "bench.log"
    with open(log, "w") as f:
        code = subprocess.run([sys.executable, f"benchmarks/{script}", "--smoke", "--profile", "lan",
                               "--results-dir", str(tmp), "--name", "table"],
                              cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=840).returncode
    text = log.read_text()
    assert code == 0, text[-4000:]
    assert out_csv.exists(), text[-4000:]
    return Bench(tmp, pd.read_csv(out_csv).set_index("case"), text)
