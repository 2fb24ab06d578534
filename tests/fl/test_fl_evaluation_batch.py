"""The controller's evaluation batch: its activations stay within the model's own fp32 size
(the exchange's memory target counts the controller's evaluation), never above eval_batch_size."""
from types import SimpleNamespace

import numpy as np
from torch import nn

from commlab.fl.evaluation import FLOOR_BYTES, LIVE_OUTPUTS, bounded_batch
from commlab.models import largest_output_bytes

IMAGES = SimpleNamespace(test_x=np.zeros((4, 3, 32, 32), np.float32))
PER_SAMPLE = 64 * 32 * 32 * 4  # the convolution's output for one image


def conv(hidden: int = 0) -> nn.Module:
    layers = [nn.Conv2d(3, 64, 3, padding=1)]
    if hidden:  # a large layer after it: more weights, the same largest output
        layers += [nn.Flatten(), nn.Linear(64 * 32 * 32, hidden)]
    return nn.Sequential(*layers)


def test_the_largest_output_of_one_sample_is_measured():
    assert largest_output_bytes(conv(), IMAGES.test_x[0]) == PER_SAMPLE
    assert largest_output_bytes(conv(hidden=8), IMAGES.test_x[0]) == PER_SAMPLE


def test_the_batch_fits_the_model_size_or_the_floor_and_never_exceeds_the_configured_one():
    assert bounded_batch(conv(), IMAGES, 1000) == FLOOR_BYTES // (LIVE_OUTPUTS * PER_SAMPLE)  # a small model: the floor
    big = conv(hidden=256)  # 16.8 M weights, 67 MB
    model_bytes = 4 * sum(p.numel() for p in big.parameters())
    assert bounded_batch(big, IMAGES, 1000) == model_bytes // (LIVE_OUTPUTS * PER_SAMPLE) == 19
    assert bounded_batch(big, IMAGES, 10) == 10
