"""bench_fl_schedule's schedules: the fields left out come from the dataset's defaults, a malformed
one is one line naming it, and the summary gives each schedule's final accuracy over the seeds."""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from commlab.fl.defaults import dataset_defaults

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
bench = pytest.importorskip("bench_fl_schedule")


def test_left_out_fields_are_the_datasets_defaults():
    d = dataset_defaults("fashion_mnist")
    assert bench.parse_schedule("2:0.02:32", "fashion_mnist") == (2, 0.02, 32, d["server_momentum"], d["lr_decay"])
    assert bench.parse_schedule("2:0.02:32:0.7", "mnist") == (2, 0.02, 32, 0.7, 1.0)
    assert bench.parse_schedule("1:0.05:64:0:1", "fashion_mnist") == (1, 0.05, 64, 0.0, 1.0)
    assert str(bench.parse_schedule(bench.default_schedule("fashion_mnist"), "mnist")) == bench.default_schedule("fashion_mnist")


@pytest.mark.parametrize("text", ["1:0.05", "1:x:64", "1:0.05:64:0.5:0.9:7", "1.5:0.05:64"])
def test_a_malformed_schedule_is_one_line_naming_it(text):
    with pytest.raises(SystemExit, match=f"schedule '{text}' is not EPOCHS:LR:BATCH"):
        bench.parse_schedule(text, "fashion_mnist")


def test_summary_gives_min_and_median_over_the_seeds_that_finished():
    df = pd.DataFrame([{"schedule": "a", "final_accuracy": 0.88}, {"schedule": "a", "final_accuracy": 0.885},
                       {"schedule": "a", "final_accuracy": 0.90}, {"schedule": "b", "final_accuracy": float("nan")},
                       {"schedule": "b", "final_accuracy": 0.87}])
    assert bench.seed_summary(df) == ["- a: final accuracy over 3 seed(s): min 88.00 %, median 88.50 %",
                                      "- b: final accuracy over 1 seed(s): min 87.00 %, median 87.00 %"]
