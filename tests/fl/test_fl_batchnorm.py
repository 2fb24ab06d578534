"""BatchNorm's running statistics in FL (config batchnorm): "aggregate" sends them in the update
and the model vector; "local" keeps them off the wire and the controller recomputes them."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from commlab.config.schema import ConfigError, from_dict
from commlab.data import Dataset
from commlab.fl.config import ClientConfig, ControllerConfig
from commlab.fl.evaluation import GlobalEvaluation
from commlab.fl.local_training import local_update
from commlab.fl.strategy import FitIns
from commlab.models import build_model, flatten_buffers, flatten_params, num_params

FIT = FitIns(round=1, epochs=1, lr=0.05, batch_size=8, subset_size=16, seed=3)


@pytest.fixture(scope="module")
def data() -> Dataset:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((32, 3, 32, 32)) * 2 + 1).astype(np.float32)  # statistics far from 0 and 1
    y = rng.integers(0, 10, 32)
    return Dataset(name="tiny", train_x=x, train_y=y, test_x=x[:8], test_y=y[:8], num_classes=10)


def controller(batchnorm: str, **extra) -> ControllerConfig:
    return from_dict(ControllerConfig, {"run_id": "r", "results_dir": "x", "checkpoint_dir": "x", "rounds": 1,
                                        "expected_clients": 1, "dds": {"domain_id": 1}, "batchnorm": batchnorm,
                                        **extra})


def test_aggregate_updates_carry_the_statistics(data):
    model = build_model("resnet20")
    start = flatten_params(model, buffers=True)
    delta, _ = local_update(model, start, data, np.arange(16), FIT, momentum=0.9, weight_decay=0.0, buffers=True)
    assert delta.size == start.size > num_params(model)
    moved = delta[num_params(model):]
    assert np.abs(moved).max() > 0.1  # running means and variances followed the client's data
    local, _ = local_update(model, flatten_params(model), data, np.arange(16), FIT, momentum=0.9, weight_decay=0.0,
                            buffers=False)
    assert local.size == num_params(model)


def test_local_statistics_are_recomputed_by_the_controller(data):
    model = build_model("resnet20")
    trained = build_model("resnet20")
    local_update(trained, flatten_params(trained, buffers=True), data, np.arange(32), FIT, momentum=0.9,
                 weight_decay=0.0, buffers=True)
    weights = flatten_params(trained)  # what a "local" run's controller holds: no statistics
    evaluation = GlobalEvaluation(controller("local", bn_calibration_samples=32), model, data)
    assert evaluation.calibration is not None and len(evaluation.calibration) == 32
    accuracy, loss = evaluation(weights)
    assert np.isfinite(loss) and 0 <= accuracy <= 1
    # The statistics are the calibration set's, not the initial 0 / 1 the vector left untouched.
    assert abs(float(model.bn1.running_mean.abs().mean())) > 0.1
    again = build_model("resnet20")
    GlobalEvaluation(controller("local", bn_calibration_samples=32), again, data)(weights)
    assert np.array_equal(flatten_buffers(again), flatten_buffers(model))  # seeded sample: the same each time


def test_aggregate_evaluates_with_the_statistics_it_was_sent(data):
    model, trained = build_model("resnet20"), build_model("resnet20", seed=5)
    trained(torch.from_numpy(data.train_x))  # statistics of its own
    evaluation = GlobalEvaluation(controller("aggregate"), model, data)
    assert evaluation.calibration is None
    evaluation(flatten_params(trained, buffers=True))
    assert np.array_equal(flatten_buffers(model), flatten_buffers(trained))
    assert GlobalEvaluation(controller("local"), build_model("mnist_cnn"), data).calibration is None  # no BatchNorm


def test_unknown_mode_is_named():
    with pytest.raises(ConfigError, match="^batchnorm: must be one of aggregate, local, got 'fedbn'$"):
        controller("fedbn")
    with pytest.raises(ConfigError, match="^batchnorm: must be one of aggregate, local"):
        from_dict(ClientConfig, {"run_id": "r", "results_dir": "x", "dds": {"domain_id": 1}, "client_id": 0,
                                 "num_clients": 1, "batchnorm": "none"})
