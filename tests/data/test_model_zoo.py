"""The models by name: parameter counts pinned to the papers' and reference implementations'
figures, outputs for images and token ids, the vector with BatchNorm statistics, training on tokens."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from commlab.config.builders import build_node_model
from commlab.config.schema import ModelSection
from commlab.data import Dataset
from commlab.models import (MODELS, build_model, evaluate, flatten_buffers, flatten_params, has_batchnorm, layout_of,
                            load_buffers, load_params, num_params, recompute_batchnorm, train_epoch)
from commlab.models.train_step import cross_entropy_step

LSTM_GATES = 4


@pytest.mark.parametrize("name, params, count", [
    ("mnist_cnn", {}, 1_663_370),                      # McMahan et al. 2017 (FedAvg)
    ("femnist_cnn", {}, 6_603_710),                    # LEAF models/femnist/cnn.py: 832 + 51,264 + 6,424,576 + 127,038
    ("resnet20", {}, 269_722),                         # He et al. 2016, option A (akamaster/pytorch_resnet_cifar10)
    ("resnet20", {"num_classes": 100}, 275_572),       # CIFAR-100: the last layer 64 x 100 + 100
    ("resnet18", {}, 11_173_962),                      # kuangliu/pytorch-cifar
    ("lstm_lm", {"vocab_size": 33_278}, 31_819_578),  # PowerSGD's 3 x 650 tied LSTM, WikiText-2's vocabulary
])
def test_parameter_counts(name, params, count):
    assert num_params(build_model(name, **params)) == count


def test_char_lstm_is_leafs_model_with_pytorchs_second_lstm_bias():
    # LEAF's TensorFlow count: embedding 80x8, LSTM 4*256*(8+256+1) and 4*256*(256+256+1), dense 256*80+80.
    leaf = 80 * 8 + LSTM_GATES * 256 * (8 + 256 + 1) + LSTM_GATES * 256 * (256 + 256 + 1) + 256 * 80 + 80
    assert leaf == 817_872
    assert num_params(build_model("char_lstm")) == leaf + 2 * LSTM_GATES * 256 == 819_920


def test_every_model_is_listed():
    assert set(MODELS) == {"mnist_cnn", "femnist_cnn", "resnet20", "resnet18", "char_lstm", "lstm_lm"}


@pytest.mark.parametrize("name, x, out", [
    ("femnist_cnn", torch.zeros(3, 1, 28, 28), (3, 62)),
    ("resnet20", torch.zeros(3, 3, 32, 32), (3, 10)),
    ("resnet18", torch.zeros(3, 3, 32, 32), (3, 10)),
    ("char_lstm", torch.zeros(3, 80, dtype=torch.int64), (3, 80)),
])
def test_outputs(name, x, out):
    assert build_model(name)(x).shape == out


def test_language_model_predicts_every_position_with_tied_embeddings():
    model = build_model("lstm_lm", vocab_size=50, embed=16, hidden=16, layers=2)
    assert model(torch.zeros(4, 7, dtype=torch.int64)).shape == (4, 7, 50)
    assert model.decoder.weight is model.encoder.weight
    assert [name for name, _ in layout_of(model)].count("encoder.weight") == 1  # sent once
    with pytest.raises(ValueError, match="tied embeddings need embed == hidden"):
        build_model("lstm_lm", vocab_size=50, embed=16, hidden=32)


def test_vector_with_batchnorm_statistics_round_trips():
    src, dst = build_model("resnet20", seed=1), build_model("resnet20", seed=2)
    src.train()
    src(torch.randn(8, 3, 32, 32))  # moves the running statistics away from their initial 0 and 1
    channels = sum(m.num_features for m in src.modules() if isinstance(m, torch.nn.BatchNorm2d))
    vec = flatten_params(src, buffers=True)
    assert vec.size == num_params(src) + 2 * channels == 271_098
    assert [n for n, _ in layout_of(src, buffers=True)][-2:] == ["stages.2.2.bn2.running_mean",
                                                                  "stages.2.2.bn2.running_var"]
    load_params(dst, vec, buffers=True)
    src.eval(), dst.eval()
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(src(x), dst(x))
    assert np.array_equal(flatten_buffers(dst), flatten_buffers(src))
    resnet18 = build_model("resnet18")
    assert flatten_params(resnet18, buffers=True).size - num_params(resnet18) == 9_600  # 20 layers, 4,800 channels
    assert not has_batchnorm(build_model("mnist_cnn"))
    assert flatten_buffers(build_model("char_lstm")).size == 0


def test_a_negative_variance_from_a_lossy_codec_is_clamped():
    model = build_model("resnet20")
    buffers = flatten_buffers(model)
    load_buffers(model, buffers - 5.0)  # running_var starts at 1: 1 - 5 < 0
    assert float(model.bn1.running_var.min()) == 0.0 and float(model.bn1.running_mean.min()) == -5.0
    with pytest.raises(ValueError, match=r"buffer vector has shape \(3,\)"):
        load_buffers(model, np.zeros(3, np.float32))


def test_recomputed_statistics_are_the_average_over_the_samples():
    model = build_model("resnet20")
    x = np.random.default_rng(0).standard_normal((64, 3, 32, 32)).astype(np.float32)
    recompute_batchnorm(model, x, batch_size=16)
    with torch.no_grad():
        first = model.conv1(torch.from_numpy(x))
    assert torch.allclose(model.bn1.running_mean, first.mean((0, 2, 3)), atol=1e-5)
    assert model.training  # left in the mode it was in


def test_training_on_token_ids_lowers_the_loss():
    """LEAF's next-character task in miniature: the target is a fixed function of the last token."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 80, (256, 20)).astype(np.int64)
    y = (x[:, -1] * 7 + 3) % 80
    model = build_model("char_lstm", seed=0, hidden=64)
    loss0 = evaluate(model, x, y)[1]
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(6):
        train_epoch(model, x, y, np.arange(256), batch_size=32, lr=0.0, seed=epoch, optimizer=opt)
    assert evaluate(model, x, y)[1] < 0.5 * loss0


def test_language_model_loss_and_accuracy_count_every_position():
    model = build_model("lstm_lm", seed=0, vocab_size=30, embed=8, hidden=8, layers=1, dropout=0.0)
    x = np.random.default_rng(1).integers(0, 30, (5, 6)).astype(np.int64)
    y = np.roll(x, -1, axis=1)
    acc, loss = evaluate(model, x, y, batch_size=2)
    with torch.no_grad():
        logits = model(torch.from_numpy(x))
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 30), torch.from_numpy(y).reshape(-1))
    assert loss == pytest.approx(float(expected), rel=1e-5)
    assert acc == pytest.approx(float((logits.argmax(-1) == torch.from_numpy(y)).float().mean()))
    assert cross_entropy_step(model, torch.from_numpy(x), torch.from_numpy(y)).item() == pytest.approx(loss, rel=1e-5)


def _dataset(name: str, x: np.ndarray, y: np.ndarray, classes: int) -> Dataset:
    return Dataset(name=name, train_x=x, train_y=y, test_x=x, test_y=y, num_classes=classes)


def test_node_models_are_sized_for_their_data():
    cifar100 = _dataset("c100", np.zeros((4, 3, 32, 32), np.float32), np.zeros(4, np.int64), 100)
    assert build_node_model(ModelSection("resnet20"), 0, 1, cifar100).linear.out_features == 100
    text = _dataset("words", np.zeros((4, 6), np.int64), np.zeros((4, 6), np.int64), 40)
    model = build_node_model(ModelSection("lstm_lm", {"embed": 8, "hidden": 8}), 0, 1, text)
    assert model.encoder.num_embeddings == 40


@pytest.mark.parametrize("section, data, message", [
    (ModelSection("char_lstm"), ("images", np.zeros((2, 1, 28, 28), np.float32), np.zeros(2, np.int64), 10),
     "char_lstm reads tokens inputs, dataset images holds images"),
    (ModelSection("resnet20"), ("tokens", np.zeros((2, 80), np.int64), np.zeros(2, np.int64), 80),
     "resnet20 reads image inputs, dataset tokens holds token ids"),
    (ModelSection("mnist_cnn"), ("cifar", np.zeros((2, 3, 32, 32), np.float32), np.zeros(2, np.int64), 10),
     r"mnist_cnn cannot read cifar's inputs of shape \(3, 32, 32\): mat1 and mat2"),
    (ModelSection("resnet20", {"num_classes": 7}), ("cifar", np.zeros((2, 3, 32, 32), np.float32),
                                                    np.zeros(2, np.int64), 10),
     r"resnet20 gives outputs of shape \(7,\) a sample, cifar needs \(10,\) \(10 classes\)"),
])
def test_a_model_that_does_not_fit_the_data_is_one_line(section, data, message):
    with pytest.raises(ValueError, match=message) as e:
        build_node_model(section, 0, 1, _dataset(*data))
    assert "\n" not in str(e.value)
