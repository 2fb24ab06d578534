"""MemoryWatch: each phase's peak above idle, in models, with training apart from the exchange
that is held to its target; and freed memory handed back between phases."""
import json
import multiprocessing as mp
from pathlib import Path

import pytest

from commlab.output.memory_watch import EXCHANGE_TARGET_X, MemoryWatch, exchange_figures, run_memory
from commlab.output.run_folder import peak_memory_line, write_transport_totals

MIB = 2**20


def test_each_phase_counts_in_models_above_idle_and_training_is_not_held_to_the_target():
    idle, model = 500 * MIB, 40 * MIB
    peaks = {"train": idle + 20 * model, "decode": idle + model, "aggregate": idle + 2 * model + model // 2,
             "receive": idle + model // 4}
    doc = exchange_figures(idle, peaks, model)
    assert doc["phase_above_idle_x_model"] == {"train": 20.0, "decode": 1.0, "aggregate": 2.5, "receive": 0.25}
    assert doc["workload_phases"] == ["train"] and doc["model_fp32_bytes"] == model
    assert doc["exchange_above_idle_x_model"] == 2.5 and doc["exchange_within_target"] is True
    assert doc["exchange_target_x_model"] == EXCHANGE_TARGET_X == 3.0

    over = exchange_figures(idle, {**peaks, "evaluate": idle + 3 * model + model // 100}, model)  # the controller's: it counts
    assert over["exchange_above_idle_x_model"] > 3.0 and over["exchange_within_target"] is False
    only_training = exchange_figures(idle, {"train": idle + 9 * model}, model)
    assert only_training["exchange_above_idle_x_model"] is None and only_training["exchange_within_target"] is None
    assert exchange_figures(idle, peaks, 0) == {}  # no model size: no figures against it


def test_a_run_gives_its_largest_figures_by_kind_of_node(tmp_path):
    for name, exchange, train in (("controller", 2.5, None), ("client-0", 2.75, 17.5), ("client-1", 2.25, 18.0)):
        doc = {"exchange_above_idle_x_model": exchange, "phase_above_idle_x_model": {} if train is None else {"train": train}}
        (tmp_path / f"transport-{name}.json").write_text(json.dumps(doc))
    (tmp_path / "transport-client-2.json").write_text("{cut")  # a node that died while writing it
    assert run_memory(tmp_path) == {"controller_exchange_x": 2.5, "client_exchange_x": 2.75, "client_train_x": 18.0}
    assert run_memory(tmp_path / "none") == dict.fromkeys(("controller_exchange_x", "client_exchange_x", "client_train_x"))


def test_a_phase_inside_another_interrupts_it():
    watch = MemoryWatch(model_bytes=MIB, exact=True)
    assert watch.resettable, "/proc/self/clear_refs refused the reset of VmHWM"
    with watch.phase("aggregate"):
        with watch.phase("decode"):
            assert watch.open == ["aggregate", "decode"]
        assert watch.open == ["aggregate"]
    doc = watch.record()
    assert set(doc["phase_peak_rss_bytes"]) == {"receive", "aggregate", "decode"}
    assert set(doc["phase_above_idle_x_model"]) == {"receive", "aggregate", "decode"}
    assert doc["exchange_above_idle_x_model"] == max(doc["phase_above_idle_x_model"].values())


def test_without_exact_phases_nothing_is_handed_back_and_no_figure_is_held_to_the_target(monkeypatch):
    """The default (config memory_phases false): no malloc_trim and no dropped work arrays at a
    phase boundary, phase peaks still recorded, but as upper bounds with no exchange figures."""
    import commlab.codecs.scratch as scratch  # memory_watch takes them from there when it uses them
    handed_back = []
    monkeypatch.setattr(scratch, "release_freed_memory", lambda: handed_back.append("trim"))
    monkeypatch.setattr(scratch, "release_buffers", lambda: handed_back.append("buffers"))
    watch = MemoryWatch(model_bytes=MIB)
    handed_back.clear()  # once when it is made, either way: what setting up freed is not idle memory
    with watch.phase("train"):
        pass
    with watch.phase("encode"):
        pass
    doc = watch.record()
    assert handed_back == [] and doc["memory_phases_exact"] is False
    assert set(doc["phase_peak_rss_bytes"]) >= {"train", "encode"}
    assert "exchange_above_idle_x_model" not in doc and "phase_above_idle_x_model" not in doc
    exact = MemoryWatch(model_bytes=MIB, exact=True)
    handed_back.clear()
    with exact.phase("encode"):
        pass
    assert handed_back == ["buffers", "trim"] * 2 and exact.record()["memory_phases_exact"] is True


def _train_phase_of_64_mib(out: str) -> None:
    """In a fresh process with an allocator that keeps what is freed (scratch.retain_freed_memory;
    what earlier tests did in the test process would blur the phase's rise): a phase that touches
    and frees 64 MiB, which the allocator keeps until the watch hands it back at the phase's end."""
    import numpy as np

    from commlab.codecs.scratch import retain_freed_memory
    assert retain_freed_memory()
    watch = MemoryWatch(model_bytes=16 * MIB, exact=True)
    assert watch.resettable, "/proc/self/clear_refs refused the reset of VmHWM"
    with watch.phase("train"):
        block = np.ones(64 * MIB, dtype=np.uint8)  # touched, then freed: kept by the allocator
        del block
    write_transport_totals(Path(out), "r1", "client-0", {}, watch)


@pytest.mark.slow
def test_memory_freed_by_a_phase_is_not_counted_in_the_next(tmp_path):
    (tmp_path / "r1").mkdir()
    child = mp.get_context("spawn").Process(target=_train_phase_of_64_mib, args=(str(tmp_path),))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    doc = json.loads((tmp_path / "r1" / "transport-client-0.json").read_text())
    train, receive = doc["phase_peak_rss_bytes"]["train"], doc["phase_peak_rss_bytes"]["receive"]
    assert train >= doc["idle_rss_bytes"] + 60 * MIB
    assert receive <= train - 48 * MIB  # the block went back to the kernel before the phase outside began
    assert doc["peak_rss_bytes"] >= train
    assert doc["phase_rise_rss_bytes"]["train"] >= 60 * MIB and doc["phase_rise_rss_bytes"]["receive"] < 16 * MIB
    assert doc["phase_above_idle_x_model"]["train"] >= 3.75 and doc["exchange_above_idle_x_model"] < 1.0
    line = peak_memory_line(tmp_path / "r1")
    assert " MiB (idle " in line and ", train " in line and "x model (target 3x)" in line
