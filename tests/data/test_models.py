"""Models by name, parameter/gradient vectors, evaluation and the SGD loop."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from commlab.data import load_dataset, subset_first
from commlab.models import (build_model, evaluate, flatten_grads, flatten_params, load_grads, load_params,
                            num_params, train_epoch)


@pytest.fixture(scope="module")
def small():
    return subset_first(load_dataset("mnist"), 512, 256)


def test_mnist_cnn_shape_and_size():
    model = build_model("mnist_cnn")
    assert num_params(model) == 1_663_370
    assert model(torch.zeros(3, 1, 28, 28)).shape == (3, 10)


def test_unknown_model():
    with pytest.raises(ValueError, match="unknown model 'resnet'.*mnist_cnn"):
        build_model("resnet")


def test_seeded_init_is_reproducible_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    a = flatten_params(build_model("mnist_cnn", seed=7))
    assert torch.rand(1) == expected
    assert np.array_equal(a, flatten_params(build_model("mnist_cnn", seed=7)))
    assert not np.array_equal(a, flatten_params(build_model("mnist_cnn", seed=8)))


def test_flatten_load_round_trip():
    src, dst = build_model("mnist_cnn", seed=1), build_model("mnist_cnn", seed=2)
    vec = flatten_params(src)
    assert vec.dtype == np.float32 and vec.shape == (1_663_370,)
    load_params(dst, vec)
    assert np.array_equal(flatten_params(dst), vec)
    x = torch.randn(4, 1, 28, 28)
    assert torch.equal(src(x), dst(x))
    vec[:] = 0  # the vector is a copy, not a view of the weights
    assert flatten_params(src).any()


def test_length_mismatch_is_named():
    model = build_model("mnist_cnn")
    with pytest.raises(ValueError, match=r"parameter vector has shape \(10,\).*needs \(1663370,\)"):
        load_params(model, np.zeros(10, np.float32))
    with pytest.raises(ValueError, match="gradient vector"):
        load_grads(model, np.zeros((2, 1663370 // 2), np.float32))


def test_grads_round_trip():
    model = build_model("mnist_cnn")
    assert not flatten_grads(model).any()  # no backward yet: zeros, not an error
    torch.nn.functional.cross_entropy(model(torch.randn(2, 1, 28, 28)), torch.tensor([1, 2])).backward()
    grads = flatten_grads(model)
    assert grads.any()
    other = build_model("mnist_cnn")
    load_grads(other, grads * 2)
    assert np.allclose(flatten_grads(other), grads * 2)


def test_training_reduces_loss(small):
    model = build_model("mnist_cnn", seed=0)
    x, y = small.train_x[:256], small.train_y[:256]
    acc0, loss0 = evaluate(model, x, y, batch_size=128)
    train_epoch(model, x, y, np.arange(256), batch_size=16, lr=0.1, seed=0)
    acc1, loss1 = evaluate(model, x, y, batch_size=128)
    assert loss1 < 0.85 * loss0 and acc1 > acc0 + 0.15


def test_training_is_deterministic_for_a_seed(small):
    idx = np.arange(0, 512, 8)
    runs = []
    for _ in range(2):
        model = build_model("mnist_cnn", seed=0)
        train_epoch(model, small.train_x, small.train_y, idx, batch_size=16, lr=0.1, seed=5)
        runs.append(flatten_params(model))
    assert np.array_equal(runs[0], runs[1]) and not np.array_equal(runs[0], flatten_params(build_model("mnist_cnn", seed=0)))


def test_evaluate_matches_direct_computation(small):
    model = build_model("mnist_cnn", seed=3)
    acc, loss = evaluate(model, small.test_x, small.test_y, batch_size=100)  # 256 = uneven last batch
    with torch.no_grad():
        out = model(torch.from_numpy(small.test_x))
    y = torch.from_numpy(small.test_y)
    assert acc == pytest.approx(float((out.argmax(1) == y).float().mean()))
    assert loss == pytest.approx(float(torch.nn.functional.cross_entropy(out, y)), rel=1e-5)


def test_train_epoch_rejects_empty_indices(small):
    with pytest.raises(ValueError, match="no samples"):
        train_epoch(build_model("mnist_cnn"), small.train_x, small.train_y, np.array([], np.int64),
                    batch_size=8, lr=0.1, seed=0)


def test_evaluate_rejects_empty_set(small):
    with pytest.raises(ValueError, match="no samples"):
        evaluate(build_model("mnist_cnn"), small.test_x[:0], small.test_y[:0])
