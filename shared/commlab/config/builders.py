"""Objects named by config sections: dataset, model, DDS settings (shared by every node program)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from commlab.config.schema import ConfigError, DatasetSection, DdsSection, ModelSection
from commlab.data import Dataset, dataset_spec, load_raw, subset_random, to_dataset
from commlab.models import build_model, configure_threads, model_entry


def build_dataset(section: DatasetSection, subset_seed: int) -> Dataset:
    """The section's dataset, its random subsets (drawn with `subset_seed`, SeedTree.subset) cut
    before the images are normalised (the same samples and values as cutting after, without a
    float copy of the whole set)."""
    raw = load_raw(section.name, section.root)
    if section.train_subset is not None or section.test_subset is not None:
        raw = subset_random(raw, section.train_subset or len(raw.train_y), section.test_subset, seed=subset_seed)
    return to_dataset(dataset_spec(section.name), raw)


def build_node_model(section: ModelSection, seed: int, threads: int, data: Dataset) -> torch.nn.Module:
    """The named model sized for `data` (input channels, classes or vocabulary; section.params may
    set more, or override them); ValueError, one line, when the model cannot read the data's inputs
    or its outputs do not match the data's targets (checked on two training samples)."""
    tokens = not np.issubdtype(data.train_x.dtype, np.floating)
    if (model_entry(section.name).inputs == "tokens") != tokens:
        raise ValueError(f"{section.name} reads {model_entry(section.name).inputs} inputs, dataset {data.name} "
                         f"holds {'token ids' if tokens else 'images'}")
    fitted = {"vocab_size": data.num_classes} if tokens else {"in_channels": data.train_x.shape[1],
                                                                "num_classes": data.num_classes}
    model = build_model(section.name, seed=seed, **{**fitted, **section.params})
    configure_threads(threads)  # after build_model, which applies the environment default
    x, y = torch.from_numpy(data.train_x[:2]), torch.from_numpy(data.train_y[:2])
    model.eval()  # a forward in training mode would move BatchNorm's running statistics
    try:
        with torch.no_grad():
            out = model(x)
    except RuntimeError as e:
        raise ValueError(f"{section.name} cannot read {data.name}'s inputs of shape {tuple(x.shape[1:])}: "
                         f"{' '.join(str(e).split())}") from None
    finally:
        model.train()
    if out.shape != (*y.shape, data.num_classes):
        raise ValueError(f"{section.name} gives outputs of shape {tuple(out.shape[1:])} a sample, {data.name} "
                         f"needs {(*y.shape[1:], data.num_classes)} ({data.num_classes} classes)")
    return model


def dds_settings(section: DdsSection, model_numel: int | None = None, senders: int = 1):
    """The transport settings of a node, its keyring read from `key_file` (ConfigError if
    unusable); with the model's size, caps on what incomplete messages from `senders` peers may
    hold (no message of ours is larger than twice the fp32 model)."""
    from commlab.dds import DdsSettings  # lazy: config validation and unit tests need no DDS
    from commlab.dds.auth import KeyFileError, read_keyring
    from commlab.dds.settings import reassembly_caps
    extras = {k: getattr(section, k) for k in ("chunk_bytes", "write_timeout_s", "lease_s", "loopback_tuned", "multicast",
                                                        "link_mtu", "datagram_frames", "send_window_bytes", "encrypt", "shared_memory",
                                                        "lossy_link", "ring_directions", "ring_block_bytes")
              if getattr(section, k) is not None}
    try:
        keyring = None if section.key_file is None else read_keyring(Path(section.key_file))
    except KeyFileError as e:
        raise ConfigError(f"dds.key_file: {e}") from None
    if model_numel is not None:
        extras.update(reassembly_caps(2 * 4 * model_numel, senders))
    return DdsSettings(domain_id=section.domain_id, interface=section.interface, peers=tuple(section.peers),
                       keyring=keyring, **extras)
