"""Objects named by config sections: dataset, model, DDS settings (shared by every node program)."""
from __future__ import annotations

import torch

from commlab.config_schema import DatasetSection, DdsSection, ModelSection
from commlab.data import Dataset, load_dataset, subset_random
from commlab.models import build_model, configure_threads


def build_dataset(section: DatasetSection) -> Dataset:
    ds = load_dataset(section.name, section.root)
    if section.train_subset is None and section.test_subset is None:
        return ds
    return subset_random(ds, section.train_subset or len(ds.train_y), section.test_subset, seed=section.subset_seed)


def build_node_model(section: ModelSection, seed: int, threads: int) -> torch.nn.Module:
    model = build_model(section.name, seed=seed, **section.params)
    configure_threads(threads)  # after build_model, which applies the environment default
    return model


def dds_settings(section: DdsSection):
    from commlab.dds import DdsSettings  # lazy: config validation and unit tests need no DDS
    extras = {k: getattr(section, k) for k in ("chunk_bytes", "write_timeout_s", "lease_s", "loopback_tuned")
              if getattr(section, k) is not None}
    return DdsSettings(domain_id=section.domain_id, interface=section.interface, peers=tuple(section.peers), **extras)
