"""benchmarks/bench_secagg.py, the parts that start no run: a row read back from a run folder."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd

from commlab.output.tables import COLUMNS

spec = importlib.util.spec_from_file_location("bench_secagg", Path(__file__).parents[2] / "benchmarks" / "bench_secagg.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def table(path: Path, kind: str, **values) -> None:
    """A table of `kind` with every column, 0 where `values` gives none."""
    pd.DataFrame({c: values.get(c, 0) for c in COLUMNS[kind]}, index=[0, 1]).to_csv(path, index=False)


def test_a_row_averages_the_clients_and_rounds_tables(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"kind": "fl", "status": "completed", "model": "mnist_cnn",
                                                   "dataset": "mnist", "link_profile": "lan", "codec": "int8",
                                                   "clients": 2, "rounds": 2}))
    table(run / "rounds.csv", "rounds", round=[1, 2], round_time_s=[2.0, 4.0], bytes_up=[8000, 12000],
          test_accuracy=[0.5, 0.75], participants="client-0;client-1", epsilon=[1.5, 2.5], n_participants=2,
          iface_bytes_up=[9000, 13000])
    for i, sent in enumerate(([1000, 3000], [2000, 2000])):
        table(run / f"clients-{i}.csv", "clients", round=[1, 2], client_id=f"client-{i}", bytes_up=sent)
    args = bench.parse_args(["--results-dir", str(tmp_path)])
    row = bench.row_of("int8", "secagg", "ok", args, "run")
    assert row == {"codec": "int8", "mode": "secagg", "status": "ok", "rounds": 2, "client_up_kB": 2.0,
                   "wire_up_kB": 5.5, "controller_in_kB": 10.0, "round_s": 3.0, "test_accuracy": 75.0, "epsilon": None}
    # A DP mode reports the epsilon after the last round.
    assert bench.row_of("int8", "secagg-dp", "ok", args, "run")["epsilon"] == 2.5


def test_secagg_rows_of_a_float_codec_are_not_run_and_ratios_are_per_codec():
    assert bench.refusal("fp32", "secagg-dp").startswith("not run: not a quantizer")
    assert bench.refusal("fp32", "dp") is None and bench.refusal("int8", "secagg") is None
    table = pd.DataFrame([{"codec": c, "mode": m, "client_up_kB": up, "round_s": t, "test_accuracy": acc}
                          for c, m, up, t, acc in [("fp32", "plain", 100.0, 2.0, 90.0), ("int8", "plain", 25.0, 1.0, 89.0),
                                                   ("int8", "secagg", 40.0, 3.0, 88.5)]])
    out = bench.with_ratios(table)
    assert out["client_up_x"].tolist() == [1.0, 1.0, 1.6] and out["round_x"].tolist() == [1.0, 1.0, 3.0]
    assert out["accuracy_pp"].tolist() == [0.0, 0.0, -0.5]


def test_flower_rows_run_with_flwr_and_compare_with_flower_fedavg():
    """Flower's rows (codec `flower`): its SecAgg+ against Flower FedAvg, not against a DDS run."""
    assert bench.refusal(bench.FLOWER, "secagg") is None  # flwr is a test dependency
    assert bench.parse_args(["--no-flower"]).flower is False and bench.parse_args([]).flower is True
    table = pd.DataFrame([{"codec": c, "mode": m, "client_up_kB": up, "round_s": t, "test_accuracy": acc}
                          for c, m, up, t, acc in [("int8", "plain", 25.0, 1.0, 89.0), ("flower", "plain", 100.0, 4.0, 90.0),
                                                   ("flower", "secagg", 250.0, 6.0, 90.5)]])
    out = bench.with_ratios(table)
    assert out["client_up_x"].tolist() == [1.0, 1.0, 2.5] and out["accuracy_pp"].tolist() == [0.0, 0.0, 0.5]
