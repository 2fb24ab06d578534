"""Every report figure kind, drawn from small synthetic runs (written through RunWriter as real runs
are) and measured on the figure object: text inside the canvas, categorical ticks unique and apart,
the legend off the data, lines with equal values apart, units on the axes."""
from __future__ import annotations

import itertools
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.text import Text

from commlab.output.run_folder import RunWriter
from commlab.output.tables import COLUMNS, OPTIONAL, TEXT
from commlab.report.build import group_figures
from commlab.report.figures import ADAPTIVE_FIGURES, DDP_FIGURES, FL_FIGURES, matrix_figure
from commlab.report.frames import latest_per_series
from commlab.report.runs import load_runs

NUMEL = 110_890
UP = {"fp32": 4 * NUMEL, "int8_sparse": NUMEL // 5, "qsgd15": NUMEL // 2}
DDP_SENT = {"dense": 4 * NUMEL, "gloo-none": 6 * NUMEL, "centralized": 0}
FL_TRAINING = {"training": {"lr": 0.05, "local_epochs": 1, "batch_size": 64, "samples_per_round": 600},
               "partition": {"scheme": "dirichlet", "alpha": 0.5}}
LONE = "lone"          # FL, one codec, 12 clients: the time split had nine ticks under one wall-wide bar
ADAPTIVE = "adaptive"  # FL, one adaptive run, 4 clients of which 3 get the same bits: hidden lines, cut title
PEERS = "peers"        # DDP: dense and DGC beside the gloo and centralized peers (which sends nothing)
# Axis labels without a unit: counters and categories.
UNITLESS = {"round", "step", "step (end of window)", "epoch", "client", "codec"}


def append(w: RunWriter, name: str, table: str, values: dict) -> None:
    blank = {c: "" if c in TEXT | OPTIONAL else 0 for c in COLUMNS[table]}
    w.table(name, COLUMNS[table]).append({**blank, **values})


def fl_run(results: Path, run_id: str, codec: str, clients: int, rounds: int, link: str = "lan",
           adaptive: dict | None = None, bits=None) -> None:
    """bits(round, client) -> qsgd bits: the run allocated bits per client (adaptive)."""
    rng = np.random.default_rng(zlib.crc32(run_id.encode()))
    w = RunWriter(results, run_id, {"kind": "fl", "model": "mnist_cnn", "dataset": "mnist", "codec": codec,
                                    "link_profile": link, "backend": "local", "clients": clients, "rounds": rounds,
                                    "config": {**FL_TRAINING, "adaptive": adaptive}, "started_at": run_id})
    acc = 0.0
    for r in range(1, rounds + 1):
        up = [UP[codec] if bits is None else NUMEL * bits(r, c) // 8 for c in range(clients)]
        comm = rng.uniform(0.01, 0.05, clients)
        for c in range(clients):
            append(w, f"clients-{c}", "clients", {
                "round": r, "client_id": f"client{c}", "num_samples": 600, "bytes_up": up[c], "bytes_down": 4 * NUMEL,
                "comm_time_s": comm[c], "train_time_s": rng.uniform(1.5, 2.5), "encode_time_s": 0.01,
                "decode_time_s": 0.005, "bits": "" if bits is None else bits(r, c),
                "rate_bps": "" if bits is None else 4e6 * (1 + c % 2)})
        acc += (0.985 - acc) * 0.6
        append(w, "rounds", "rounds", {
            "round": r, "round_time_s": 2.6 + comm.max(), "n_participants": clients, "bytes_up": sum(up),
            "bytes_down": 4 * NUMEL * clients, "aggregate_time_s": 0.005, "decode_time_s": 0.01,
            "broadcast_time_s": 0.2, "test_accuracy": round(acc, 4), "test_loss": 0.1})
    w.close()


def ddp_run(results: Path, run_id: str, method: str, world: int = 2, epochs: int = 2, steps: int = 10) -> None:
    rng = np.random.default_rng(zlib.crc32(run_id.encode()))
    w = RunWriter(results, run_id, {"kind": "ddp", "model": "mnist_cnn", "dataset": "mnist", "method": method,
                                    "link_profile": "10mbit", "backend": "local", "world": world, "epochs": epochs,
                                    "config": {"training": {"lr": 0.02, "batch_size": 32},
                                               "dataset": {"train_subset": 3000}}, "started_at": run_id})
    for step in range(epochs * steps):
        density = [0.25, 0.0625, 0.015625, 0.004, 0.001][min(step // 3, 4)]
        sent = DDP_SENT.get(method, int(NUMEL * density) * 6)
        for rank in range(world):
            comm = sent * 3e-8 + rng.uniform(0.002, 0.01)
            append(w, f"steps-rank{rank}", "steps", {
                "step": step, "epoch": step // steps, "rank": rank, "bytes_sent": sent, "bytes_received": sent,
                "comm_time_s": comm, "step_time_s": comm + 0.05, "density": density, "train_loss": 1.0})
    for epoch, rank in itertools.product(range(epochs), range(world)):
        append(w, f"epochs-rank{rank}", "epochs", {
            "epoch": epoch, "rank": rank, "step": (epoch + 1) * steps, "epoch_time_s": steps * (0.06 + 0.01 * rank),
            "test_accuracy": 0.9 + 0.03 * epoch + (0.01 if method == "centralized" else 0), "test_loss": 0.2})
    w.close()


def write_runs(results: Path) -> dict[str, str]:
    """The three settings groups' runs; returns label -> settings group."""
    fl_run(results, "20250101-100000-fl-int8_sparse", "int8_sparse", clients=12, rounds=4)
    fl_run(results, "20250101-110000-fl-qsgd15-joint", "qsgd15", clients=4, rounds=3, link="hetero4",
           adaptive={"policy": "joint", "beta": 1.0, "min_bits": 2}, bits=lambda r, c: 4 if c < 3 else 2)
    for i, method in enumerate(["dense", "dgc", "gloo-none", "centralized"]):
        ddp_run(results, f"20250101-12000{i}-ddp-{method}", method)
    return {LONE: "fl-mnist_cnn-mnist-lan-c12-r4", ADAPTIVE: "fl-mnist_cnn-mnist-hetero4-c4-r3",
            PEERS: "ddp-mnist_cnn-mnist-10mbit-w2-e2"}


# Every kind once; from the adaptive group its own two and the time split of a long series name.
KINDS = ([(LONE, n) for n in FL_FIGURES] + [(ADAPTIVE, n) for n in ("time-split", *ADAPTIVE_FIGURES)]
         + [(PEERS, n) for n in DDP_FIGURES] + [("matrix", "matrix")])
# A compressor matrix like the README's: several compressors at nearly the same bytes and accuracy.
MATRIX = pd.DataFrame(
    [("fl", c, "ok", b, d) for c, b, d in [("fp32", 1, 0), ("fp32_sparse", 0.1252, 0.24), ("minmax4", 0.1253, 0.01),
                                           ("qsgd4", 0.127, 0.15), ("int8", 0.2501, 0.09), ("minmax8", 0.2503, 0.03),
                                           ("centralized", 0, 0.17)]]
    + [("ddp", c, "ok", b, d) for c, b, d in [("fp32", 1, 0), ("fp32_sparse", 0.1251, -0.13),
                                              ("minmax4", 0.1252, -0.06), ("qsgd4", 0.127, -0.21), ("dgc", 0.00151, -0.46)]]
    + [("ddp", "terngrad", "exit 1", np.nan, np.nan)],
    columns=["mode", "compressor", "status", "bytes_x_of_fp32", "accuracy_delta_pp"])


@pytest.fixture(scope="module")
def figures(tmp_path_factory) -> dict[tuple[str, str], object]:
    """(group label, figure name) -> drawn Figure, every kind once."""
    results = tmp_path_factory.mktemp("results")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("COMMLAB_GIT_COMMIT", "figures")  # synthetic runs of no commit (as make_results.py's)
        groups = write_runs(results)
    runs, skipped = load_runs(results)
    assert not skipped
    shown, _ = latest_per_series(runs)
    out = {}
    for label, prefix in groups.items():
        members = [r for r in shown if r.group.startswith(prefix)]
        drawn = group_figures(members, members[0].settings, 0.97)
        out |= {(label, name): fig for name, fig in drawn.items() if (label, name) in KINDS}
    out[("matrix", "matrix")] = matrix_figure(MATRIX, ["FL: 2 clients, 10 rounds, 6000 samples/client/round",
                                                       "DDP: WORLD=3, 2 epoch(s), 20000 training samples"])
    for fig in out.values():
        fig.canvas.draw()
    return out


def drawn_texts(fig) -> list[Text]:
    """Every text the canvas shows: titles, axis labels, tick labels in view, legends, annotations."""
    texts = [fig._suptitle] if fig._suptitle else []
    for ax in (a for a in fig.axes if a.get_visible()):
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        texts += [label for axis in (ax.xaxis, ax.yaxis) for label in shown_ticklabels(axis)]
    for legend in [*fig.legends, *(a.get_legend() for a in fig.axes if a.get_legend())]:
        texts += [*legend.get_texts(), legend.get_title()]
    return [t for t in texts if t.get_visible() and t.get_text().strip()]


def shown_ticklabels(axis) -> list[Text]:
    """Labels of the ticks inside the view (matplotlib keeps labels of ticks outside it, undrawn)."""
    low, high = sorted(axis.get_view_interval())
    ticks = [*axis.get_major_ticks(), *axis.get_minor_ticks()]
    return [t.label1 for t in ticks if t.label1.get_visible() and t.label1.get_text().strip()
            and low - 1e-9 * abs(low) <= t.get_loc() <= high + 1e-9 * abs(high)]


def extent(artist, fig):
    return artist.get_window_extent(fig.canvas.get_renderer())


def check_text_inside_canvas(fig) -> None:
    canvas = fig.bbox
    for t in drawn_texts(fig):
        box = extent(t, fig)
        assert (box.x0 >= canvas.x0 - 1 and box.x1 <= canvas.x1 + 1 and box.y0 >= canvas.y0 - 1
                and box.y1 <= canvas.y1 + 1), f"{t.get_text()!r} reaches outside the canvas: {box} vs {canvas}"


def check_ticks_unique_and_apart(fig) -> None:
    for ax in (a for a in fig.axes if a.get_visible()):
        for axis in (ax.xaxis, ax.yaxis):
            labels = shown_ticklabels(axis)
            names = [t.get_text() for t in labels]
            assert len(names) == len(set(names)), f"repeated tick labels {names}"
            boxes = [extent(t, fig).padded(-1) for t in labels]
            for (a, box_a), (b, box_b) in itertools.combinations(zip(names, boxes), 2):
                assert not box_a.overlaps(box_b), f"tick labels {a!r} and {b!r} overlap"


def check_legend_off_the_data(fig) -> None:
    """Legends lie outside every plotting area and clear of the title."""
    legends = [*fig.legends, *(a.get_legend() for a in fig.axes if a.get_legend())]
    for legend, ax in itertools.product(legends, [a for a in fig.axes if a.get_visible()]):
        assert not extent(legend, fig).overlaps(extent(ax.patch, fig)), "legend covers a plotting area"
    for legend in legends:
        assert not (fig._suptitle and extent(legend, fig).overlaps(extent(fig._suptitle, fig))), "legend on the title"


def display_points(line) -> np.ndarray:
    xy = np.column_stack([np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)])
    shown = line.get_transform().transform(xy)
    return shown[np.isfinite(shown).all(axis=1)]


def check_equal_lines_apart(fig) -> None:
    """No data line has half its points within 1.5 pixels of another line's points."""
    for ax in fig.axes:
        lines = [line for line in ax.get_lines() if line.get_gid() != "reference" and len(line.get_xdata())]
        for a, b in itertools.permutations(lines, 2):
            pa, pb = display_points(a), display_points(b)
            near = (np.linalg.norm(pa[:, None, :] - pb[None, :, :], axis=2) < 1.5).any(axis=1)
            assert near.mean() < 0.5, f"{a.get_label()!r} lies on {b.get_label()!r}"


def check_units(fig) -> None:
    for ax in (a for a in fig.axes if a.get_visible()):
        for label in (ax.get_xlabel(), ax.get_ylabel()):
            first = label.split("\n")[0]
            assert first in UNITLESS or ("(" in first and first.endswith(")")), f"no unit in axis label {label!r}"


CHECKS = (check_text_inside_canvas, check_ticks_unique_and_apart, check_legend_off_the_data,
          check_equal_lines_apart, check_units)


@pytest.mark.parametrize("key", KINDS, ids=["-".join(k) for k in KINDS])
@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__.removeprefix("check_") for c in CHECKS])
def test_every_figure_reads_at_a_glance(figures, key, check):
    check(figures[key])


def test_every_kind_is_drawn(figures):
    assert sorted(figures) == sorted(KINDS)
    assert {name for _, name in KINDS} == {*FL_FIGURES, *ADAPTIVE_FIGURES, *DDP_FIGURES, "matrix"}


def test_a_lone_codec_gets_one_tick_under_a_bar_of_its_own(figures):
    fig = figures[(LONE, "time-split")]
    ax = fig.axes[0]
    assert [t.get_text() for t in shown_ticklabels(ax.xaxis)] == ["int8_sparse"]
    bar = extent(ax.patches[0], fig)
    assert bar.width < 0.75 * extent(ax.patch, fig).width


def test_adaptive_title_keeps_every_setting_and_equal_clients_show(figures):
    fig = figures[(ADAPTIVE, "bits")]
    title = fig._suptitle.get_text().replace("\n", " ")
    for setting in ("link=hetero4", "lr=0.05", "local_epochs=1", "partition=dirichlet0.5", "latest run per codec"):
        assert setting in title
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["client0", "client1", "client2", "client3"]
    assert len({line.get_marker() for line in lines}) == 4
    assert "shifted" in fig.axes[0].get_xlabel()  # the note that says why equal lines are apart


def test_client_ticks_count_in_natural_order(figures):
    ax = figures[(LONE, "comm-time")].axes[0]
    assert [t.get_text() for t in shown_ticklabels(ax.xaxis)] == [str(i) for i in range(12)]


def test_a_peer_that_sends_nothing_is_named_in_the_bytes_legend(figures):
    texts = [t.get_text().replace("\n", " ") for t in figures[(PEERS, "bytes")].axes[0].get_legend().get_texts()]
    assert texts[:3] == ["dense", "dgc", "gloo-none"]
    assert texts[3].startswith("centralized: 0 bytes")


def test_matrix_point_labels_do_not_overlap(figures):
    fig = figures[("matrix", "matrix")]
    labels = fig.axes[0].texts
    assert len(labels) == 11  # every ok compressor but the centralized rows, which are lines
    renderer = fig.canvas.get_renderer()
    for a, b in itertools.combinations(labels, 2):  # the texts, without their leader lines
        assert not Text.get_window_extent(a, renderer).overlaps(Text.get_window_extent(b, renderer)), \
            f"{a.get_text()} / {b.get_text()}"
