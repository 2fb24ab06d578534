"""Datasets by name (mnist, fashion_mnist, cifar10, cifar100, femnist, shakespeare, wikitext2,
text:<path>, synthetic:<name>) and client partitions (iid, dirichlet, shards, label_quantity,
quantity, natural)."""
from . import cifar, fashion_mnist, leaf, mnist, synthetic, text  # noqa: F401  (importing registers the datasets)
from .dataset import (Dataset, DatasetError, DatasetSpec, RawData, data_dir, dataset_names, dataset_spec, load_dataset,
                      load_raw, register_dataset, to_dataset)
from .partition import SCHEMES, format_histogram, label_histogram, partition, partition_dataset
from .subset import subset_first, subset_random

__all__ = [
    "Dataset", "DatasetError", "DatasetSpec", "RawData", "SCHEMES", "data_dir", "dataset_names", "dataset_spec",
    "format_histogram", "label_histogram", "load_dataset", "load_raw", "partition", "partition_dataset",
    "register_dataset", "subset_first", "subset_random", "to_dataset",
]
