"""CIFAR ResNets: a 3x3 stem without max-pooling, stages of basic blocks, global average pooling.

resnet20 (He et al. 2016, section 4.2): 16-32-64 channels, 3 blocks a stage, option A shortcuts
(identity; on a stride-2 block the input is subsampled and zero-padded to the new width, so the
shortcuts add no parameters): 269,722 parameters for 10 classes.
resnet18 (the CIFAR variant of kuangliu/pytorch-cifar): 64-128-256-512 channels, 2 blocks a stage,
projection shortcuts (1x1 convolution + BatchNorm) where the shape changes: 11,173,962 parameters
for 10 classes.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

SHORTCUTS = ("pad", "conv")  # option A, option B


class BasicBlock(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int, shortcut: str) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.stride, self.pad = stride, planes - in_planes
        self.project = None
        if shortcut == "conv" and (stride != 1 or in_planes != planes):
            self.project = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                                         nn.BatchNorm2d(planes))

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        if self.project is not None:
            return self.project(x)
        if self.stride == 1 and self.pad == 0:
            return x
        x = x[:, :, ::self.stride, ::self.stride]
        return F.pad(x, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, widths: tuple[int, ...], blocks: tuple[int, ...], shortcut: str, in_channels: int = 3,
                 num_classes: int = 10) -> None:
        super().__init__()
        if shortcut not in SHORTCUTS:
            raise ValueError(f"shortcut must be one of {', '.join(SHORTCUTS)}, got {shortcut!r}")
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        stages, in_planes = [], widths[0]
        for i, (planes, n) in enumerate(zip(widths, blocks)):
            strides = [1 if i == 0 else 2] + [1] * (n - 1)
            stage = []
            for stride in strides:
                stage.append(BasicBlock(in_planes, planes, stride, shortcut))
                in_planes = planes
            stages.append(nn.Sequential(*stage))
        self.stages = nn.Sequential(*stages)
        self.linear = nn.Linear(in_planes, num_classes)
        for m in self.modules():  # He et al.'s initialisation, as resnet20's reference implementation
            if isinstance(m, (nn.Conv2d, nn.Linear)):  # (akamaster/pytorch_resnet_cifar10) applies it
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.stages(F.relu(self.bn1(self.conv1(x))))
        return self.linear(F.adaptive_avg_pool2d(out, 1).flatten(1))


def resnet20(in_channels: int = 3, num_classes: int = 10) -> CifarResNet:
    return CifarResNet((16, 32, 64), (3, 3, 3), "pad", in_channels, num_classes)


def resnet18(in_channels: int = 3, num_classes: int = 10) -> CifarResNet:
    return CifarResNet((64, 128, 256, 512), (2, 2, 2, 2), "conv", in_channels, num_classes)
