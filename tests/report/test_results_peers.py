"""The published ResNet-18 peer table (`make results RESULTS=peers-resnet18`): its settings are
bench_peers' flags, every column it shows is one bench_peers writes, and the lines under it compare
DGC with dense ring and gloo PowerSGD, and dense ring with gloo none, from the CSV alone."""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

from commlab.report.results_doc import BENCHES, peer_ratios

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
bench_peers = pytest.importorskip("bench_peers")
common = pytest.importorskip("bench_peers_common")


def test_the_entry_is_bench_peers_with_resnet18_on_the_four_cases(tmp_path):
    bench = BENCHES["peers-resnet18"]
    a = common.parse_cases(bench_peers.parser(), [*bench.args, "--results-dir", str(tmp_path)], bench_peers.TABLE)
    assert (a.name, a.model, a.dataset, a.profile) == ("peers-resnet18", "resnet18", "synthetic:cifar10", "10mbit")
    assert a.cases == ["dds-dense-ring", "gloo-none", "dds-dgc", "gloo-powersgd"]
    assert a.skip < a.train_subset // (a.world * a.batch_size)  # steps left to measure after the warm-up
    assert set(bench.columns) <= set(bench_peers.TABLE.fields)


def write(path: Path, rows: list[dict]) -> Path:
    fields = bench_peers.TABLE.fields
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fields)
        w.writeheader()
        w.writerows([{f: r.get(f, "") for f in fields} for r in rows])
    return path


def test_peer_ratios_compare_dgc_and_dense_ring_with_their_references(tmp_path):
    table = write(tmp_path / "t.csv", [
        {"case": "dds-dense-ring", "bytes_sent_per_rank_step_after_warmup": 61_000_000, "step_time_s": 45.0},
        {"case": "gloo-none", "bytes_sent_per_rank_step_after_warmup": 62_000_000, "step_time_s": 50.0},
        {"case": "dds-dgc", "bytes_sent_per_rank_step_after_warmup": 100_000, "step_time_s": 1.0},
        {"case": "gloo-powersgd", "bytes_sent_per_rank_step_after_warmup": 400_000, "step_time_s": 4.0}])
    assert peer_ratios(table) == [
        "- DDS dgc after its warm-up sends 1/610 of DDS dense ring's bytes per step and rank",
        "- dds-dgc step time: 0.250 x gloo powersgd's (median step, steps after the warm-up)",
        "- dds-dense-ring step time: 0.900 x gloo's without a hook (median step, steps after the warm-up)"]


def test_peer_ratios_leave_out_what_did_not_run(tmp_path):
    table = write(tmp_path / "t.csv", [{"case": "dds-dgc", "bytes_sent_per_rank_step_after_warmup": 100_000,
                                        "step_time_s": 1.0},
                                       {"case": "gloo-powersgd", "status": "exit 1"}])
    assert peer_ratios(table) == []
