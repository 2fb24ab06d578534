"""The report over results/: numbers equal the metrics files, figures are drawn, settings groups
are kept apart, broken runs are skipped with a reason, and no runs gives the how-to message."""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from statistics import mean

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from commlab.report import build
from commlab.report.__main__ import main
from commlab.report.figures import ADAPTIVE_FIGURES, DDP_FIGURES, FL_FIGURES, adaptive_figures

FIXTURE = Path(__file__).parents[1] / "fixtures" / "results"
FL_LAN = "fl-mnist_cnn-mnist-lan-c3-r5-local"
FL_DOCKER = "fl-mnist_cnn-mnist-1mbit-c3-r5-docker"
DDP = "ddp-mnist_cnn-mnist-lan-w2-e2-local"
BROKEN = ["20250101-130000-ddp-dgc-truncated", "20250101-140000-fl-int8-badmanifest",
          "20250101-150000-fl-int8-nomanifest"]


def rows(run: str, pattern: str) -> list[dict]:
    out = []
    for f in sorted((FIXTURE / run).glob(pattern)):
        with open(f, newline="") as fh:
            out += list(csv.DictReader(fh))
    return out


def col(rs: list[dict], name: str) -> list[float]:
    return [float(r[name]) for r in rs]


@pytest.fixture
def text_only(monkeypatch) -> None:
    """The report's tables and text without its per-group figures, for tests of groups, skips and
    summaries: the figures are drawn and checked once, by test_every_figure_is_written_and_not_blank
    here and by tests/report/test_figures.py."""
    monkeypatch.setattr(build, "group_figures", lambda runs, settings, target: {})


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, pd.DataFrame, str]:
    out = tmp_path_factory.mktemp("report")
    assert main(["--results", str(FIXTURE), "--out", str(out), "--target-accuracy", "0.97"]) == 0
    summary = pd.read_csv(out / "summary.csv").set_index("run_id")
    return out, summary, (out / "report.md").read_text()


def test_fl_numbers_equal_metrics_files(report):
    _, summary, _ = report
    fp32, sparse = "20250101-100000-fl-fp32-101", "20250101-101000-fl-int8_sparse-102"
    for run in (fp32, sparse):
        rounds, clients = rows(run, "rounds.csv"), rows(run, "clients*.csv")
        s = summary.loc[run]
        assert s["units"] == len(rounds) == 5
        assert s["bytes_up_per_unit"] == pytest.approx(mean(col(rounds, "bytes_up")))
        assert s["bytes_down_per_unit"] == pytest.approx(mean(col(rounds, "bytes_down")))
        assert s["comm_time_mean_s"] == pytest.approx(mean(col(clients, "comm_time_s")))
        assert s["comm_time_max_s"] == pytest.approx(max(col(clients, "comm_time_s")))
        assert s["unit_time_mean_s"] == pytest.approx(mean(col(rounds, "round_time_s")))
        assert s["final_accuracy"] == pytest.approx(float(rounds[-1]["test_accuracy"]))
    # The int8_sparse run lost client2 in round 4: 14 client rows, not 15.
    assert len(rows(sparse, "clients*.csv")) == 14
    x_of_fp32 = mean(col(rows(sparse, "rounds.csv"), "bytes_up")) / mean(col(rows(fp32, "rounds.csv"), "bytes_up"))
    assert summary.loc[sparse, "bytes_up_x_of_fp32"] == pytest.approx(x_of_fp32)
    assert summary.loc[fp32, "bytes_up_x_of_fp32"] == pytest.approx(1.0)
    # Time to target: sum of round times up to the first round at or above 0.97.
    rounds = rows(fp32, "rounds.csv")
    first = next(i for i, r in enumerate(rounds) if float(r["test_accuracy"]) >= 0.97)
    assert summary.loc[fp32, "time_to_target_s"] == pytest.approx(sum(col(rounds[:first + 1], "round_time_s")))
    assert summary.loc[fp32, "target_reached_at"] == float(rounds[first]["round"])
    assert np.isnan(summary.loc[sparse, "time_to_target_s"])  # never reached 0.97


def test_ddp_numbers_equal_metrics_files(report):
    _, summary, _ = report
    dense, dgc = "20250101-120000-ddp-dense-301", "20250101-121000-ddp-dgc-302"
    for run in (dense, dgc):
        steps, epochs = rows(run, "steps-rank*.csv"), rows(run, "epochs-rank*.csv")
        s = summary.loc[run]
        assert s["units"] == len({r["step"] for r in steps}) == 40
        assert s["bytes_up_per_unit"] == pytest.approx(mean(col(steps, "bytes_sent")))
        assert s["comm_time_mean_s"] == pytest.approx(mean(col(steps, "comm_time_s")))
        assert s["comm_time_max_s"] == pytest.approx(max(col(steps, "comm_time_s")))
        slowest = {}
        for r in steps:  # a synchronous step lasts as long as its slowest rank
            slowest[r["step"]] = max(slowest.get(r["step"], 0.0), float(r["step_time_s"]))
        assert s["unit_time_mean_s"] == pytest.approx(mean(slowest.values()))
        last = max(int(r["epoch"]) for r in epochs)
        assert s["final_accuracy"] == pytest.approx(
            mean(float(r["test_accuracy"]) for r in epochs if int(r["epoch"]) == last))
    x_of_fp32 = (mean(col(rows(dgc, "steps-rank*.csv"), "bytes_sent"))
                 / mean(col(rows(dense, "steps-rank*.csv"), "bytes_sent")))
    assert summary.loc[dgc, "bytes_up_x_of_fp32"] == pytest.approx(x_of_fp32)
    assert x_of_fp32 < 0.2  # DGC sends far less than dense


def last_epoch_bytes(run: str) -> float:
    steps = rows(run, "steps-rank*.csv")
    last = max(int(r["epoch"]) for r in steps)
    return mean(float(r["bytes_sent"]) for r in steps if int(r["epoch"]) == last)


def test_ddp_last_epoch_leaves_out_the_dgc_warmup(report):
    _, summary, text = report
    dense, dgc = "20250101-120000-ddp-dense-301", "20250101-121000-ddp-dgc-302"
    for run in (dense, dgc):
        assert summary.loc[run, "bytes_up_per_unit_last_epoch"] == pytest.approx(last_epoch_bytes(run))
    x_of_fp32 = last_epoch_bytes(dgc) / last_epoch_bytes(dense)
    assert summary.loc[dgc, "bytes_up_x_of_fp32_last_epoch"] == pytest.approx(x_of_fp32)
    assert summary.loc[dense, "bytes_up_x_of_fp32_last_epoch"] == pytest.approx(1.0)
    # The fixture's warm-up (density 25% down to 0.1%) mostly falls in epoch 0.
    assert x_of_fp32 < summary.loc[dgc, "bytes_up_x_of_fp32"] / 3
    ddp_table = text.split(f"## {DDP}")[1].split("##")[0]
    assert ("| bytes up per step, incl. warm-up | x of fp32 | bytes up per step, last epoch only "
            "| x of fp32, last epoch only |") in ddp_table
    assert f"| {x_of_fp32:.4g} |" in ddp_table
    # FL has no epochs: its columns and table are as before.
    fl = summary[summary["kind"] == "fl"]
    assert fl["bytes_up_per_unit_last_epoch"].isna().all() and fl["bytes_up_x_of_fp32_last_epoch"].isna().all()
    assert "last epoch" not in text.split(f"## {FL_LAN}")[1].split("##")[0]


def test_every_figure_is_written_and_not_blank(report):
    out, _, text = report
    expected = ([f"{g}-{n}.png" for g in (FL_LAN, FL_DOCKER) for n in FL_FIGURES]
                + [f"{DDP}-{n}.png" for n in DDP_FIGURES])
    assert sorted(p.name for p in out.glob("*.png")) == sorted(expected)
    for name in expected:
        img = matplotlib.image.imread(out / name)
        assert img.shape[0] > 100 and img.shape[1] > 100
        assert img.std() > 0
        rgba = np.ascontiguousarray((img * 255).astype(np.uint8)).view(np.uint32)  # one int a pixel
        assert len(np.unique(rgba)) > 10, name  # more than background, frame and one line colour
        assert f"]({name})" in text


def test_settings_groups_are_kept_apart(report):
    _, summary, text = report
    assert set(summary["group"]) == {FL_LAN, FL_DOCKER, DDP}
    # fp32 ran on both backends and links: two separate rows, each its group's reference.
    fp32 = summary[(summary["kind"] == "fl") & (summary["series"] == "fp32")]
    assert sorted(fp32["group"]) == sorted([FL_LAN, FL_DOCKER])
    assert summary.loc["20250101-111500-fl-int8-202", "group"] == FL_DOCKER
    for group, settings in ((FL_LAN, "link_profile=lan, clients=3"), (FL_DOCKER, "backend=docker")):
        assert f"## {group}" in text and settings in text
    # Two int8_sparse runs with the same settings: the latest is shown, the older one only listed.
    assert summary.loc["20250101-101000-fl-int8_sparse-102", "shown"]
    assert not summary.loc["20250101-093000-fl-int8_sparse-99", "shown"]
    assert "Older runs" in text and "20250101-093000-fl-int8_sparse-99" in text


def test_broken_runs_are_skipped_with_reason(report, capsys):
    _, summary, text = report
    assert not set(BROKEN) & set(summary.index)
    assert "bench" not in summary["group"].values
    assert "steps-rank1.csv: truncated" in text
    assert "manifest.json: not valid JSON" in text
    assert "manifest.json: missing manifest" in text


def test_only_named_runs(tmp_path, capsys, text_only):
    run = "20250101-121000-ddp-dgc-302"
    assert main(["--results", str(FIXTURE), "--runs", run, "--out", str(tmp_path)]) == 0
    assert list(pd.read_csv(tmp_path / "summary.csv")["run_id"]) == [run]
    assert np.isnan(pd.read_csv(tmp_path / "summary.csv")["bytes_up_x_of_fp32"][0])  # no dense run named
    with pytest.raises(SystemExit) as e:
        main(["--results", str(FIXTURE), "--runs", "no-such-run", "--out", str(tmp_path)])
    assert e.value.code == 2
    assert "no-such-run" in capsys.readouterr().err


def test_no_runs_prints_how_to_make_one(tmp_path, capsys):
    (tmp_path / "results" / "bench").mkdir(parents=True)
    assert main(["--results", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert "No runs found" in out and "make fl-int8_sparse" in out
    assert not list((tmp_path / "results" / "report").glob("*.png"))
    assert main(["--results", str(tmp_path / "missing")]) == 0
    assert "No runs found" in capsys.readouterr().out


def test_run_that_goes_bad_is_skipped_and_others_reported(tmp_path, capsys, text_only):
    results = tmp_path / "results"
    for run in ("20250101-100000-fl-fp32-101", "20250101-101000-fl-int8_sparse-102"):
        shutil.copytree(FIXTURE / run, results / run)
    bad = results / "20250101-101000-fl-int8_sparse-102"
    (bad / "rounds.csv").write_text((bad / "rounds.csv").read_text().replace(",0.9668,", ",oops,"))
    manifest = json.loads((results / "20250101-100000-fl-fp32-101" / "manifest.json").read_text())
    assert main(["--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "rounds.csv: line 6, column test_accuracy: 'oops' is not a number" in out
    summary = pd.read_csv(results / "report" / "summary.csv")
    assert list(summary["run_id"]) == [manifest["run_id"]]
    # A second report over the same results ignores the report folder it wrote.
    assert main(["--results", str(results)]) == 0
    assert "Report on 1 run(s)" in capsys.readouterr().out


def test_runs_differing_in_training_settings_are_separate_groups(tmp_path, text_only):
    # Same codec and link, only the learning rate differs: neither run may hide the other.
    results = tmp_path / "results"
    run = "20250101-100000-fl-fp32-101"
    for lr, suffix in ((0.05, "a"), (0.1, "b")):
        dst = results / f"{run}{suffix}"
        shutil.copytree(FIXTURE / run, dst)
        manifest = json.loads((dst / "manifest.json").read_text())
        manifest["run_id"] = dst.name
        manifest["config"].update(training={"lr": lr, "local_epochs": 1, "batch_size": 64, "samples_per_round": 600},
                                  partition={"scheme": "dirichlet", "alpha": 0.5})
        (dst / "manifest.json").write_text(json.dumps(manifest))
    assert main(["--results", str(results), "--out", str(tmp_path / "out")]) == 0
    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert sorted(summary["group"]) == [f"{FL_LAN}-lr0.05-e1-b64-n600-dirichlet0.5", f"{FL_LAN}-lr0.1-e1-b64-n600-dirichlet0.5"]
    assert summary["shown"].all()
    assert set(summary["training"]) == {f"lr={lr} local_epochs=1 batch=64 samples_per_round=600 partition=dirichlet0.5"
                                        for lr in (0.05, 0.1)}
    assert "training=lr=0.1 local_epochs=1" in (tmp_path / "out" / "report.md").read_text()


def test_compressor_matrix_is_drawn_and_tabled(tmp_path, text_only):
    results = tmp_path / "results"
    shutil.copytree(FIXTURE / "20250101-121000-ddp-dgc-302", results / "20250101-121000-ddp-dgc-302")
    bench = results / "bench"
    bench.mkdir()
    pd.DataFrame([
        {"mode": "fl", "compressor": "fp32", "status": "ok", "bytes_x_of_fp32": 1.0, "accuracy_delta_pp": 0.0},
        {"mode": "fl", "compressor": "int8", "status": "ok", "bytes_x_of_fp32": 0.25, "accuracy_delta_pp": -0.1},
        {"mode": "ddp", "compressor": "dgc", "status": "ok", "bytes_x_of_fp32": 0.0014, "accuracy_delta_pp": -0.3},
        {"mode": "ddp", "compressor": "terngrad", "status": "exit 1", "bytes_x_of_fp32": None,
         "accuracy_delta_pp": None},
    ]).to_csv(bench / "matrix.csv", index=False)
    (bench / "matrix.md").write_text("FL: 2 clients\n\n| mode | compressor |\n|---|---|\n| fl | int8 |\n")
    (bench / "matrix.json").write_text(json.dumps({"settings": {"fl": "FL: 2 clients", "ddp": "DDP: WORLD=3"}}))
    assert main(["--results", str(results), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "report.md").read_text()
    assert "## Compressor matrix" in text and "| fl | int8 |" in text and "![matrix](matrix.png)" in text
    image = matplotlib.image.imread(tmp_path / "out" / "matrix.png")
    assert image.std() > 0.01  # something was drawn


def test_a_matrix_written_before_x_of_fp32_is_named_not_drawn(tmp_path, capsys, text_only):
    results = tmp_path / "results"
    shutil.copytree(FIXTURE / "20250101-121000-ddp-dgc-302", results / "20250101-121000-ddp-dgc-302")
    (results / "bench").mkdir()
    pd.DataFrame([{"mode": "fl", "compressor": "fp32", "status": "ok", "bytes_vs_fp32": 1.0, "accuracy_delta_pp": 0.0}]
                 ).to_csv(results / "bench" / "matrix.csv", index=False)
    assert main(["--results", str(results), "--out", str(tmp_path / "out")]) == 0
    assert "make bench-matrix again" in capsys.readouterr().out
    assert not (tmp_path / "out" / "matrix.png").exists()


def test_adaptive_runs_get_bits_and_uplink_share_figures():
    clients = pd.DataFrame({"run_id": "r", "series": "qsgd15", "round": [1, 1, 2, 2], "client_id": [0, 1, 0, 1],
                            "bits": [4, 8, 2, 6], "rate_bps": [2e6, 6e6, 1e6, 3e6]})
    figures = adaptive_figures(clients, ["test"])
    assert list(figures) == list(ADAPTIVE_FIGURES)
    share = [line.get_ydata().tolist() for line in figures["rate-share"].axes[0].get_lines()]
    assert share == [[0.25, 0.25], [0.75, 0.75]]  # of each round's allocated uplink
    # Runs without allocations (bits empty) draw nothing.
    assert adaptive_figures(clients.assign(bits=np.nan), ["test"]) == {}


def test_ratios_are_x_of_fp32_this_run_over_fp32(report):
    """One convention for every ratio of bytes: this run's / the fp32 run's (DDP: the dense run's),
    headed "x of fp32", so compressed runs are below 1; the report says so before its tables."""
    _, summary, text = report
    assert "ratio vs" not in text and "compression_ratio" not in summary.columns
    assert 'Ratios are "x of fp32": this run\'s bytes divided by the reference run\'s' in text
    for group, compressed in ((FL_LAN, "20250101-101000-fl-int8_sparse-102"), (DDP, "20250101-121000-ddp-dgc-302")):
        table = text.split(f"## {group}")[1].split("##")[0]
        headings = table.split("\n")[4].split(" | ")
        assert headings[4] == "x of fp32"
        cell = next(line for line in table.split("\n") if compressed in line).split(" | ")[4]
        assert float(cell) == pytest.approx(summary.loc[compressed, "bytes_up_x_of_fp32"], rel=1e-3)
        assert float(cell) < 1


def test_each_group_gallery_opens_with_accuracy_over_wall_time(report):
    _, _, text = report
    for group in (FL_LAN, FL_DOCKER, DDP):
        gallery = text.split(f"### Figures: {group}")[1].split("\n## ")[0]
        images = [line.split("](")[1].rstrip(")") for line in gallery.split("\n") if line.startswith("![")]
        assert images[0] == f"{group}-accuracy-time.png"
        assert len(images) == len(FL_FIGURES if group.startswith("fl") else DDP_FIGURES)
    legend = text.split("## Reading the tables")[1].split("\n## ")[0]
    for heading in ("bytes up per round, incl. warm-up", "bytes up per step, incl. warm-up",
                    "bytes up per step, last epoch only", "x of fp32"):
        assert f"**{heading}**" in legend
