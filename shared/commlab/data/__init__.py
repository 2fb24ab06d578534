"""Datasets by name (mnist, fashion_mnist) and client partitions (iid, dirichlet, shards)."""
from . import fashion_mnist, mnist  # noqa: F401  (importing registers the datasets)
from .dataset import Dataset, DatasetError, DatasetSpec, cache_dir, dataset_names, load_dataset, register_dataset
from .partition import SCHEMES, format_histogram, label_histogram, partition
from .subset import subset_first, subset_random

__all__ = [
    "Dataset", "DatasetError", "DatasetSpec", "SCHEMES", "cache_dir", "dataset_names", "format_histogram",
    "label_histogram", "load_dataset", "partition", "register_dataset", "subset_first", "subset_random",
]
