"""The skews added beside iid, dirichlet and shards: quantity (power law), label_quantity
(NIID-Bench's #C=k) and natural (a dataset's writers or roles)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from commlab.config.schema import ConfigError, from_dict
from commlab.data import label_histogram, partition
from commlab.fl.config import PartitionSection


@settings(max_examples=30, deadline=None)
@given(clients=st.integers(1, 12), exponent=st.floats(0, 3), seed=st.integers(0, 2**31))
def test_quantity_sizes_follow_the_power_law_and_use_every_sample(clients, exponent, seed):
    labels = np.arange(2000) % 10
    parts = partition(labels, clients, "quantity", seed, exponent=exponent)
    assert sorted(np.concatenate(parts).tolist()) == list(range(2000))
    sizes = sorted((len(p) for p in parts), reverse=True)
    assert min(sizes) >= 10
    zipf = np.arange(1, clients + 1, dtype=float) ** -exponent
    expected = 10 + zipf / zipf.sum() * (2000 - 10 * clients)
    # floor; the largest takes the remainder
    assert all(abs(size - e) < 1.0 + 1e-9 for size, e in zip(sizes[1:], expected[1:]))


def test_quantity_skews_sizes_not_labels():
    labels = np.repeat(np.arange(10), 600)
    parts = partition(labels, 5, "quantity", seed=2, exponent=1.5)
    sizes = [len(p) for p in parts]
    assert max(sizes) > 5 * min(sizes)
    shares = label_histogram(labels, parts, 10) / np.array(sizes)[:, None]
    assert np.abs(shares[np.argmax(sizes)] - 0.1).max() < 0.03  # the big client sees every label about equally
    assert partition(labels, 5, "quantity", seed=2, exponent=0.0)[0].size == 1200  # exponent 0: equal shares


def test_label_quantity_holders_are_uneven_where_shards_spreads_them():
    """Exactly labels_per_client labels each for both (tests/test_data.py); label_quantity's client i
    holds label i mod classes and draws the others."""
    labels = np.repeat(np.arange(10), 100)
    hists = {s: label_histogram(labels, partition(labels, 10, s, 3, labels_per_client=3), 10)
             for s in ("shards", "label_quantity")}
    assert all(hists["label_quantity"][i, i] > 0 for i in range(10))
    holders = {s: (h > 0).sum(0) for s, h in hists.items()}
    assert holders["shards"].tolist() == [3] * 10
    assert holders["label_quantity"].max() > 3 > holders["label_quantity"].min()


def test_natural_deals_whole_groups():
    groups = np.repeat(np.arange(6), [3, 1, 4, 1, 5, 9])
    labels = np.zeros(len(groups), np.int64)
    one_each = partition(labels, 6, "natural", seed=0, groups=groups)
    assert [sorted(set(groups[p])) for p in one_each] == [[g] for g in range(6)]
    three = partition(labels, 3, "natural", seed=7, groups=groups)
    owned = [set(groups[p].tolist()) for p in three]
    assert all(len(o) == 2 for o in owned) and set().union(*owned) == set(range(6))
    assert sorted(np.concatenate(three).tolist()) == list(range(len(groups)))
    assert all(np.array_equal(a, b) for a, b in zip(three, partition(labels, 3, "natural", seed=7, groups=groups)))
    with pytest.raises(ValueError, match="partition natural needs a dataset of writers or roles"):
        partition(labels, 2, "natural", seed=0)


def test_bad_arguments_of_the_new_schemes():
    labels = np.repeat(np.arange(10), 5)
    with pytest.raises(ValueError, match="quantity exponent must be >= 0"):
        partition(labels, 2, "quantity", 0, exponent=-1)
    with pytest.raises(ValueError, match="50 samples cannot give 6 clients 10 each"):
        partition(labels, 6, "quantity", 0)
    with pytest.raises(ValueError, match="labels_per_client must be in 1..10"):
        partition(labels, 2, "label_quantity", 0, labels_per_client=0)


def test_partition_section_names_each_schemes_parameters():
    section = lambda **kw: from_dict(PartitionSection, kw)  # noqa: E731
    assert section(scheme="quantity", exponent=2.0).params() == {"exponent": 2.0}
    assert section(scheme="label_quantity", labels_per_client=3).params() == {"labels_per_client": 3}
    assert section(scheme="natural").params() == {} == section(scheme="iid").params()
    with pytest.raises(ConfigError, match="^scheme: unknown partition scheme 'writers' .known: iid, dirichlet, shards, "
                                          "label_quantity, quantity, natural.$"):
        section(scheme="writers")
    with pytest.raises(ConfigError, match="^exponent: must be >= 0, got -0.5$"):
        section(scheme="quantity", exponent=-0.5)
