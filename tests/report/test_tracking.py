"""Experiment tracking: TensorBoard events and an MLflow file store written from a run's CSVs hold
every number of those CSVs, read back with TensorBoard's and MLflow's own readers."""
from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest
# Imported here, at collection: importing mlflow runs `uname -p` (platform.platform()), a process
# the unit-test guard would refuse inside a test.
from mlflow.tracking import MlflowClient
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.util import tensor_util

from commlab.report import tracking
from commlab.report.export import main as export_main
from commlab.report.tracking import TABLES, TensorBoardExport, TrackingError, export_tensorboard, live_tensorboard
from commlab.output.tables import TEXT
from commlab.testbed.backend import run_nodes

FIXTURE = Path(__file__).parents[1] / "fixtures" / "results"
FL, DDP = "20250101-100000-fl-fp32-101", "20250101-120000-ddp-dense-301"
TRUNCATED = "20250101-130000-ddp-dgc-truncated"


def copy_runs(tmp_path: Path, *runs: str) -> Path:
    for run in runs:
        shutil.copytree(FIXTURE / run, tmp_path / run)
    return tmp_path


def events(folder: Path) -> dict[str, dict[int, list[float]]]:
    """tag -> step -> the values TensorBoard reads from the event files in `folder`."""
    acc = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    acc.Reload()
    out: dict[str, dict[int, list[float]]] = {}
    for tag in acc.Tags()["tensors"]:
        if not tag.startswith("_hparams_"):
            for e in acc.Tensors(tag):
                out.setdefault(tag, {}).setdefault(e.step, []).append(tensor_util.make_ndarray(e.tensor_proto).item())
    return out


def csv_values(run: Path) -> list[tuple[str, str, int, float]]:
    """(sub-run, tag, step, value) of every numeric cell of the run's metrics CSVs."""
    out = []
    for path in tracking.metric_files(run):
        table = path.stem.split("-", 1)[0]
        step, key = TABLES[table]
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                source = "" if key is None else (f"rank{row[key]}" if key == "rank" else row[key])
                out += [(source, f"{table}/{c}", int(row[step]), float(v)) for c, v in row.items()
                        if c not in (step, key) and c not in TEXT and v != ""]
    return out


@pytest.mark.parametrize("run", [FL, DDP])
def test_events_hold_every_csv_value(tmp_path, run):
    run_dir = copy_runs(tmp_path, run) / run
    expected = csv_values(run_dir)
    assert export_tensorboard(run_dir) == len(expected) > 100
    read = {source: events(run_dir / "tensorboard" / source) for source in {s for s, *_ in expected}}
    for source, tag, step, value in expected:
        assert read[source][tag][step] == [value], (source, tag, step)  # float64: the CSV's very number
    assert sum(len(v) for r in read.values() for steps in r.values() for v in steps.values()) == len(expected)
    subruns = ["client0", "client1", "client2"] if run == FL else ["rank0", "rank1"]
    assert sorted(p.name for p in (run_dir / "tensorboard").iterdir() if p.is_dir()) == subruns


def test_hparams_are_the_manifest_settings(tmp_path):
    run_dir = copy_runs(tmp_path, FL) / FL
    export_tensorboard(run_dir)
    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    content = acc.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    hp = {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in start.hparams.items()}
    assert hp["codec"] == "fp32" and hp["clients"] == 3 and hp["config.rounds"] == 5 and hp["model"] == "mnist_cnn"
    assert start.group_name == FL and "status" not in hp and "run_id" not in hp
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    assert "rounds/test_accuracy" in [m.name.tag for m in experiment.metric_infos]


def test_growing_csv_is_exported_row_by_row_once(tmp_path):
    run_dir = copy_runs(tmp_path, FL) / FL
    rounds = run_dir / "rounds.csv"
    lines = rounds.read_text().splitlines(keepends=True)
    rounds.write_text("".join(lines[:3]) + lines[3][:10])  # header, rounds 1-2, round 3 half written
    export = TensorBoardExport(run_dir)
    export.update()
    rounds.write_text("".join(lines))
    export.close()
    steps = events(run_dir / "tensorboard")["rounds/bytes_up"]
    assert {s: len(v) for s, v in steps.items()} == {1: 1, 2: 1, 3: 1, 4: 1, 5: 1}


@pytest.mark.parametrize("edit, problem", [
    (lambda t: t.replace("1330824", "lots", 1), "line 2, column bytes_up: 'lots' is not a number"),
    (lambda t: t.replace("2.864808,", "", 1), "line 2 has 10 fields, header has 11"),
    (lambda t: t[:-1], "truncated (last line has no newline)"),
    (lambda t: t.replace("round,", "r,", 1), "header lacks column 'round'"),
])
def test_bad_rounds_csv_is_named(tmp_path, edit, problem):
    run_dir = copy_runs(tmp_path, FL) / FL
    rounds = run_dir / "rounds.csv"
    rounds.write_text(edit(rounds.read_text()))
    with pytest.raises(TrackingError, match=re.escape(f"rounds.csv: {problem}")):
        export_tensorboard(run_dir)
    assert not (run_dir / "tensorboard").exists()


def test_client_id_that_is_not_a_folder_name_is_refused(tmp_path):
    run_dir = copy_runs(tmp_path, FL) / FL
    path = run_dir / "clients-client0.csv"
    path.write_text(path.read_text().replace(",client0,", ",../../x,", 1))
    with pytest.raises(TrackingError, match=r"line 2, column client_id: '../../x' is not a client id"):
        export_tensorboard(run_dir)
    assert not (tmp_path / "x").exists()


def test_export_command_names_a_broken_run_and_exports_the_others(tmp_path, capsys):
    results = copy_runs(tmp_path, FL, TRUNCATED)
    assert export_main(["tensorboard", "--results", str(results)]) == 1
    out, err = capsys.readouterr()
    assert f"{FL}: 150 scalars" in out and err.count("\n") == 1 and "truncated" in err and TRUNCATED in err


def test_launcher_follows_the_run_into_events(tmp_path, capsys):
    """run_nodes (every launcher's) exports whatever the nodes wrote, on every backend."""
    run_dir = tmp_path / FL

    def nodes() -> int:  # the controller and clients of a run, as files
        shutil.copytree(FIXTURE / FL, run_dir)
        return 0
    assert run_nodes("p", "local", "lan", run_dir, ["controller"], local=nodes, netns=None, docker=None) == 0
    assert f"TensorBoard: {len(csv_values(run_dir))} scalars in {run_dir / 'tensorboard'}" in capsys.readouterr().out
    assert events(run_dir / "tensorboard" / "client1")["clients/comm_time_s"][1] == [0.037167]


def test_without_tensorboard_the_run_goes_on_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tracking, "tensorboard_installed", lambda: False)
    with live_tensorboard(copy_runs(tmp_path, FL) / FL):
        pass
    assert capsys.readouterr().out.strip() == ("[run] no TensorBoard events: package tensorboard not installed "
                                               "(pip install -e '.[tracking]')")
    assert not (tmp_path / FL / "tensorboard").exists()


def test_mlflow_store_lists_the_runs_with_params_and_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads file stores only when told
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    results, store = copy_runs(tmp_path, FL, DDP), tmp_path / "mlruns"
    for _ in range(2):  # exporting again replaces the runs
        assert export_main(["mlflow", "--results", str(results), "--store", str(store)]) == 0
    client = MlflowClient(tracking_uri=store.as_uri())
    runs = {r.info.run_name: r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])}
    assert sorted(runs) == [FL, DDP]
    fl, ddp = runs[FL], runs[DDP]
    assert fl.data.params["codec"] == "fp32" and ddp.data.params["method"] == "dense"
    assert fl.info.status == "FINISHED" and fl.data.tags["commlab.run_id"] == FL
    manifest = json.loads((results / FL / "manifest.json").read_text())
    assert fl.data.params["config.seed"] == str(manifest["config"]["seed"])
    for run in (fl, ddp):
        expected = {}
        for source, tag, step, value in csv_values(results / run.info.run_name):
            table, column = tag.split("/")
            expected.setdefault(f"{table}/{source}/{column}" if source else tag, {})[step] = value
        assert set(run.data.metrics) == set(expected)
        for key, values in expected.items():
            assert {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)} == values, key
