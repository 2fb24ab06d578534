"""A client's model in one vector (commlab.models.storage): training on it gives the same bits,
and the round's delta is made in that vector, not in a new one."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from commlab.data import Dataset
from commlab.fl.local_training import local_update, warm_up
from commlab.fl.strategy import FitIns
from commlab.models import build_model, flatten_params
from commlab.models.storage import backs, share_storage
from commlab.runs.seeds import SeedTree

FIT = FitIns(round=1, epochs=1, lr=0.05, batch_size=8, subset_size=16)
SEEDS = SeedTree(5).local(0, 1)


@pytest.fixture(scope="module")
def data() -> Dataset:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, 16)
    return Dataset(name="tiny", train_x=x, train_y=y, test_x=x[:4], test_y=y[:4], num_classes=10)


@pytest.mark.parametrize("buffers", [True, False])
def test_a_delta_made_in_the_models_vector_has_the_bits_of_a_copied_one(data, buffers):
    plain, shared = build_model("resnet20", seed=2), build_model("resnet20", seed=2)
    start = flatten_params(plain, buffers)
    storage = share_storage(shared, buffers)
    assert np.array_equal(storage, start) and backs(storage, shared, buffers)
    for _ in range(2):  # the second round loads the model over the first round's delta
        expected, loss = local_update(plain, start, data, np.arange(16), FIT, SEEDS, momentum=0.9,
                                      weight_decay=1e-4, buffers=buffers)
        delta, shared_loss = local_update(shared, start, data, np.arange(16), FIT, SEEDS, momentum=0.9,
                                          weight_decay=1e-4, buffers=buffers, storage=storage)
        assert delta is storage and delta.tobytes() == expected.tobytes() and loss == shared_loss
        start = start + expected


def test_a_model_whose_tensor_was_replaced_is_refused(data):
    model = build_model("resnet20", seed=2)
    storage = share_storage(model, True)
    weights = storage.copy()
    last = list(model.parameters())[-1]
    last.data = last.data.clone()  # no longer in the vector
    assert not backs(storage, model, True)
    with pytest.raises(RuntimeError, match="no longer views of its storage"):
        local_update(model, weights, data, np.arange(16), FIT, SEEDS, momentum=0.9, weight_decay=0.0,
                     buffers=True, storage=storage)


def test_a_tensor_not_float32_is_refused():
    with pytest.raises(ValueError, match="float64"):
        share_storage(torch.nn.Linear(2, 2).double())


def test_warming_up_training_leaves_the_model_as_it_was(data):
    model = build_model("resnet20", seed=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    warm_up(model, data, momentum=0.9, weight_decay=1e-4)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
