"""Datasets read from files in their official formats (written small by tests/fixtures/official_formats.py):
CIFAR-10/100 pickles (tarball or folder), LEAF's FEMNIST and Shakespeare JSON, WikiText-2 and any
text file; the checks against the official sizes and label counts; synthetic data of any shape."""
from __future__ import annotations

import json
import pickle
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from commlab.config.builders import build_dataset
from commlab.config.schema import DatasetSection
from commlab.data import (DatasetError, dataset_spec, load_dataset, load_raw, partition_dataset, subset_first,
                          subset_random, to_dataset)
from commlab.data.cifar import CIFAR10, CIFAR100, reader
from commlab.data.dataset import _check
from commlab.data.leaf import LETTERS
from fixtures.official_formats import write_cifar, write_leaf, write_wikitext


def one_line(e: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(e.value)
    return str(e.value)


def test_cifar10_tarball_and_folder_read_alike(tmp_path):
    write_cifar(tmp_path / "tar", "cifar10", tarball=True)
    write_cifar(tmp_path / "dir", "cifar10")
    a, b = reader(CIFAR10)(tmp_path / "tar"), reader(CIFAR10)(tmp_path / "dir")
    assert a.train_x.shape == (40, 3, 32, 32) and a.test_x.shape == (20, 3, 32, 32) and a.train_x.dtype == np.uint8
    assert np.array_equal(a.train_x, b.train_x) and np.array_equal(a.test_y, b.test_y)
    assert np.bincount(a.train_y).tolist() == [4] * 10
    # Row layout as released: 1024 red, then green, then blue values, each 32 x 32 row-major.
    raw = pickle.loads((tmp_path / "dir" / "cifar-10-batches-py" / "data_batch_1").read_bytes(), encoding="bytes")
    assert np.array_equal(a.train_x[0].reshape(-1), raw[b"data"][0]) and a.train_y[0] == raw[b"labels"][0]


def test_cifar100_fine_labels(tmp_path):
    write_cifar(tmp_path, "cifar100", train_per_class=1, test_per_class=1)
    raw = reader(CIFAR100)(tmp_path)
    assert raw.train_x.shape == (100, 3, 32, 32) and sorted(raw.train_y.tolist()) == list(range(100))


def test_a_small_cifar_is_not_taken_for_the_official_set(tmp_path):
    write_cifar(tmp_path, "cifar10")
    with pytest.raises(DatasetError) as e:
        load_dataset("cifar10", root=tmp_path)
    assert one_line(e) == "cifar10 from source: train holds 40 samples, the official set 50,000"


@pytest.fixture(scope="module")
def official_cifar10(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cifar10")
    write_cifar(root, "cifar10", train_per_class=5000, test_per_class=1000)
    return root


def test_official_sized_cifar10_loads_normalised_and_cached(official_cifar10):
    raw = load_raw("cifar10", root=official_cifar10)
    assert raw.train_x.shape == (50000, 3, 32, 32) and raw.test_x.shape == (10000, 3, 32, 32)
    assert (official_cifar10 / "cifar10.npz").is_file()
    ds = to_dataset(dataset_spec("cifar10"), subset_first(raw, 5, 5))
    assert ds.train_x.dtype == np.float32 and ds.num_classes == 10
    expected = (raw.train_x[0, 1, 0, 0] / 255 - 0.4822) / 0.2435  # green: its channel's mean and std
    assert ds.train_x[0, 1, 0, 0] == pytest.approx(expected, rel=1e-5)
    cached = load_raw("cifar10", root=official_cifar10)
    assert np.array_equal(cached.train_x, raw.train_x) and np.array_equal(cached.train_y, raw.train_y)


def test_label_counts_are_checked(official_cifar10):
    raw = load_raw("cifar10", root=official_cifar10)
    raw.train_y = raw.train_y.copy()
    raw.train_y[np.flatnonzero(raw.train_y == 3)[0]] = 4
    with pytest.raises(DatasetError, match=r"^cifar10 from x: train has 4999..5001 samples a class, the official set "
                                           r"5000 of each of 10$"):
        _check(dataset_spec("cifar10"), raw, "x")


def test_subsets_are_cut_before_normalising_with_the_same_result():
    small = build_dataset(DatasetSection(name="synthetic:cifar10", train_subset=300, test_subset=50, subset_seed=4))
    whole = subset_random(load_dataset("synthetic:cifar10"), 300, 50, seed=4)
    assert np.array_equal(small.train_x, whole.train_x) and np.array_equal(small.test_y, whole.test_y)


def test_pickles_that_build_other_objects_are_refused(tmp_path):
    write_cifar(tmp_path, "cifar10")
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))
    (tmp_path / "cifar-10-batches-py" / "data_batch_2").write_bytes(pickle.dumps({b"data": Payload()}, protocol=2))
    with pytest.raises(DatasetError) as e:
        reader(CIFAR10)(tmp_path)
    assert "data_batch_2: not a CIFAR python batch (UnpicklingError: refusing to build io.open)" in one_line(e)
    assert not marker.exists()


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "data_batch_5").unlink(), "cifar-10-batches-py: lacks data_batch_5"),
    (lambda d: (d / "test_batch").write_bytes(pickle.dumps({b"data": np.zeros((2, 5), np.uint8), b"labels": [1, 2]})),
     r"test_batch: 'data' is uint8\(2, 5\), expected uint8 \(n, 3072\)"),
    (lambda d: (d / "test_batch").write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]})),
     "test_batch: 'labels' is not a list of 2 integers"),
    (lambda d: (d / "test_batch").write_bytes(b"\x80\x02garbage"), "test_batch: not a CIFAR python batch"),
])
def test_damaged_cifar_files_are_named(tmp_path, damage, message):
    damage(write_cifar(tmp_path, "cifar10"))
    with pytest.raises(DatasetError, match=message) as e:
        reader(CIFAR10)(tmp_path)
    one_line(e)


def test_missing_sources_say_what_to_get_and_where(tmp_path):
    for name, needle in [("cifar10", "download cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html "
                                     f"into {tmp_path}"),
                         ("cifar100", "download cifar-100-python.tar.gz"),
                         ("femnist", f"{tmp_path}/femnist/data/train/ not found: run LEAF's data/femnist/preprocess.sh"),
                         ("shakespeare", "shakespeare/data/train/ not found"),
                         ("wikitext2", f"{tmp_path}/wikitext-2/wiki.train.tokens not found: unzip wikitext-2-v1.zip")]:
        with pytest.raises(DatasetError) as e:
            load_dataset(name, root=tmp_path)
        assert needle in one_line(e), name


def test_femnist_keeps_writers_for_the_natural_split(tmp_path):
    users = {"f0000_14": 9, "f0001_41": 5, "f0002_03": 13, "f0003_77": 7}
    write_leaf(tmp_path, "femnist", users, files=2)
    ds = load_dataset("femnist", root=tmp_path)
    assert ds.num_classes == 62 and ds.train_x.shape[1:] == (1, 28, 28)
    assert 0 <= ds.train_x.min() and ds.train_x.max() <= 1  # LEAF feeds pixels in [0, 1]: so does commlab
    assert sorted(ds.group_names) == sorted(users)
    first = json.loads(next((tmp_path / "femnist/data/train").glob("*_0_*.json")).read_text())
    name = first["users"][0]
    mine = ds.train_groups == ds.group_names.index(name)
    pixels = np.array(first["user_data"][name]["x"])
    assert np.allclose(ds.train_x[mine].reshape(mine.sum(), -1), pixels, atol=1e-6)
    assert np.array_equal(load_raw("femnist", root=tmp_path).train_x[mine].reshape(mine.sum(), -1),
                          np.rint(pixels * 255))  # LEAF's value/255 back to the exact byte
    parts = partition_dataset(ds, len(users), "natural", seed=0)
    assert [sorted(set(ds.train_groups[p].tolist())) for p in parts] == [[i] for i in range(len(users))]
    two = partition_dataset(ds, 2, "natural", seed=0)
    assert sorted(np.concatenate(two).tolist()) == list(range(len(ds.train_y)))
    assert all(len(set(ds.train_groups[p].tolist())) == 2 for p in two)  # whole writers, two each
    assert len(ds.test_y) == sum(max(1, int(n * 0.25)) for n in users.values())
    with pytest.raises(ValueError, match="natural: the dataset has 4 writers or roles, fewer than 5 clients"):
        partition_dataset(ds, 5, "natural", seed=0)


def test_shakespeare_reads_leafs_letters(tmp_path):
    write_leaf(tmp_path, "shakespeare", {"KING_LEAR_KING": 6, "HAMLET_OPHELIA": 5})
    ds = load_dataset("shakespeare", root=tmp_path)
    assert ds.train_x.shape[1:] == (80,) and ds.train_x.dtype == np.int64 and ds.num_classes == len(LETTERS) == 80
    content = json.loads(next((tmp_path / "shakespeare/data/train").glob("*_0_*.json")).read_text())
    text, nxt = content["user_data"]["KING_LEAR_KING"]["x"][0], content["user_data"]["KING_LEAR_KING"]["y"][0]
    row = ds.train_groups.tolist().index(ds.group_names.index("KING_LEAR_KING"))
    assert "".join(LETTERS[i] for i in ds.train_x[row]) == text and LETTERS[ds.train_y[row]] == nxt


@pytest.mark.parametrize("name, edit, message", [
    ("femnist", lambda c: c["num_samples"].__setitem__(0, 99), r"has \d+ x, \d+ y, num_samples 99"),
    ("femnist", lambda c: c["user_data"][c["users"][0]]["x"][0].__setitem__(3, 1.5), "pixel values outside"),
    ("femnist", lambda c: c["user_data"][c["users"][0]]["x"][0].pop(), "x must be lists of 784 numbers"),
    ("femnist", lambda c: c.pop("user_data"), "not LEAF output"),
    ("shakespeare", lambda c: c["user_data"][c["users"][0]]["y"].__setitem__(0, "\u00e9"), "character 'é' is not one of"),
    ("shakespeare", lambda c: c["user_data"][c["users"][0]]["x"].__setitem__(0, "short"), "strings of 80 characters"),
])
def test_malformed_leaf_json_is_named(tmp_path, name, edit, message):
    base = write_leaf(tmp_path, name, {"u0": 6, "u1": 6}, files=1)
    path = next((base / "train").glob("*.json"))
    content = json.loads(path.read_text())
    edit(content)
    path.write_text(json.dumps(content))
    with pytest.raises(DatasetError, match=message) as e:
        load_dataset(name, root=tmp_path)
    assert str(path) in one_line(e)


def test_wikitext2_checks_the_official_counts_and_text_reads_any_file(tmp_path):
    folder = write_wikitext(tmp_path)
    with pytest.raises(DatasetError, match=r"^wikitext2 from .*wikitext-2: [\d,]+ training tokens, the official set "
                                           r"2,088,628$"):
        load_dataset("wikitext2", root=tmp_path)
    ds = load_dataset(f"text:{folder / 'wiki.train.tokens'}")
    lines = (folder / "wiki.train.tokens").read_text().split("\n")[:-1]
    words = [w for line in lines for w in line.split() + ["<eos>"]]
    assert ds.num_classes == len(set(words)) and ds.train_x.shape[1:] == (30,) and ds.train_y.shape == ds.train_x.shape
    assert np.array_equal(ds.train_x[:, 1:], ds.train_y[:, :-1])  # targets: the next token
    assert ds.train_x[0, 0] == 0 and ds.train_x[0, 1] == 1  # ids in order of first appearance: "=", "Heading"
    assert len(ds.train_y) + len(ds.test_y) == (len(words) - len(words) // 10 - 1) // 30 + (len(words) // 10 - 1) // 30
    with pytest.raises(ValueError, match="partition dirichlet needs one class label a sample"):
        partition_dataset(ds, 2, "dirichlet", seed=0, alpha=0.5)
    assert len(partition_dataset(ds, 2, "iid", seed=0)) == 2
    with pytest.raises(DatasetError, match="text file /nowhere.txt not found"):
        load_dataset("text:/nowhere.txt")


@pytest.mark.parametrize("name, x_shape, y_shape, classes", [
    ("synthetic:cifar10", (3, 32, 32), (), 10), ("synthetic:cifar100", (3, 32, 32), (), 100),
    ("synthetic:femnist", (1, 28, 28), (), 62), ("synthetic:shakespeare", (80,), (), 80),
    ("synthetic:wikitext2", (30,), (30,), 33_278),
])
def test_synthetic_data_has_the_named_datasets_shape(name, x_shape, y_shape, classes):
    ds = load_dataset(name)
    assert ds.train_x.shape == (10_000, *x_shape) and ds.test_y.shape == (2_000, *y_shape)
    assert ds.num_classes == classes and ds.train_y.max() < classes
    assert np.array_equal(load_dataset(name).train_y, ds.train_y)  # seeded: every process has the same
    if not y_shape:
        assert np.bincount(ds.train_y, minlength=classes).min() > 10_000 / classes / 3  # every class present


def test_synthetic_labels_are_learnable():
    import torch
    ds = load_dataset("synthetic:cifar10")
    x, y = torch.from_numpy(ds.train_x[:2000].reshape(2000, -1)), torch.from_numpy(ds.train_y[:2000])
    model = torch.nn.Linear(x.shape[1], 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(30):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    test = torch.from_numpy(ds.test_x.reshape(len(ds.test_y), -1))
    assert float((model(test).argmax(1) == torch.from_numpy(ds.test_y)).float().mean()) > 0.9


def test_synthetic_needs_a_named_dataset():
    with pytest.raises(DatasetError, match="synthetic:text:/x: needs a dataset whose classes are known"):
        load_dataset("synthetic:text:/x")
    with pytest.raises(DatasetError, match="unknown dataset 'nothing'"):
        load_dataset("synthetic:nothing")


def test_cached_arrays_that_fail_the_checks_are_rebuilt(tmp_path, capsys):
    write_leaf(tmp_path, "femnist", {"a": 5, "b": 5})
    good = load_raw("femnist", root=tmp_path)
    np.savez(tmp_path / "femnist.npz", train_x=good.train_x, train_y=good.train_y + 100, test_x=good.test_x,
             test_y=good.test_y, group_names=np.array(good.group_names))
    again = load_raw("femnist", root=tmp_path)
    assert "ignoring bad cache" in capsys.readouterr().err and np.array_equal(again.train_y, good.train_y)
    assert again.group_names == good.group_names and np.array_equal(again.train_groups, good.train_groups)


def test_a_user_in_two_files_is_named(tmp_path):
    base = write_leaf(tmp_path, "femnist", {"u0": 6, "u1": 6}, files=2)
    first, second = sorted((base / "train").glob("*.json"))
    content = json.loads(second.read_text())
    content["users"] = ["u0"]
    content["user_data"] = {"u0": content["user_data"]["u1"]}
    second.write_text(json.dumps(content))
    with pytest.raises(DatasetError, match=rf"^{second}: user 'u0' appears twice in {base / 'train'}$"):
        load_dataset("femnist", root=tmp_path)
