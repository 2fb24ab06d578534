"""The two-convolution CNN of McMahan et al. (FedAvg) and LEAF's FEMNIST CNN: one architecture,
two sizes."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class MnistCnn(nn.Module):
    """Two 5x5 convolutions (32, 64 channels, padding 2 = TensorFlow's "same", each with 2x2 max
    pooling) and two fully connected layers (3136 -> hidden -> classes).

    mnist_cnn (FedAvg, McMahan et al. 2017): hidden 512, 10 classes, 1,663,370 parameters.
    femnist_cnn (LEAF, models/femnist/cnn.py): hidden 2048, 62 classes, 6,603,710 parameters.
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10, hidden: int = 512) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * 7 * 7, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def femnist_cnn(in_channels: int = 1, num_classes: int = 62, hidden: int = 2048) -> MnistCnn:
    return MnistCnn(in_channels, num_classes, hidden)
