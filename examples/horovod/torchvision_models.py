"""Stand-ins for ``torchvision.models`` in Horovod's benchmark script.

torchvision has no CPU wheel on this project's package index, so the
adapted ``pytorch_synthetic_benchmark.py`` imports this module under the
name ``models``. Each function takes torchvision's ``norm_layer=`` and
``num_classes=`` and returns a small residual CNN for 224x224 images (its
first convolution has stride 4, so a CPU step takes milliseconds); pass the
real torchvision models when you have them.
"""
import torch.nn as nn
import torch.nn.functional as F


class _Block(nn.Module):
    def __init__(self, channels, norm_layer):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = norm_layer(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = norm_layer(channels)

    def forward(self, x):
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


class _SmallResNet(nn.Module):
    def __init__(self, blocks, width, norm_layer=nn.BatchNorm2d, num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, stride=4, padding=3, bias=False),
                                  norm_layer(width), nn.ReLU(), nn.MaxPool2d(2))
        self.blocks = nn.Sequential(*[_Block(width, norm_layer) for _ in range(blocks)])
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def resnet18(norm_layer=nn.BatchNorm2d, num_classes=1000):
    return _SmallResNet(2, 16, norm_layer, num_classes)


def resnet50(norm_layer=nn.BatchNorm2d, num_classes=1000):
    return _SmallResNet(4, 32, norm_layer, num_classes)
