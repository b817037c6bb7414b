"""torch_models.py: the d2l models in PyTorch, as dpbench defines them (src/model/): LeNet (d2l
12.5: conv 3x3x20, avg-pool, conv 5x5x50, avg-pool, dense 800-128-10, ReLU; 129,068 parameters)
and ResNet-18 (d2l 12.6 small-image variant: 3x3 stem without max-pool, stages 64/128/256/512,
conv biases kept, 1x1 projection shortcut without batch norm). Weights N(0, 0.01), biases 0."""
import torch
from torch import nn
from torch.nn import functional as F


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 20, 3), nn.Conv2d(20, 50, 5)
        self.f1, self.f2 = nn.Linear(800, 128), nn.Linear(128, 10)

    def forward(self, x):  # (B, 1, 28, 28) -> (B, 10)
        x = F.avg_pool2d(F.relu(self.c1(x)), 2)
        x = F.avg_pool2d(F.relu(self.c2(x)), 2).flatten(1)
        return self.f2(F.relu(self.f1(x)))


class Residual(nn.Module):
    def __init__(self, cin, cout, use_1x1conv=False, strides=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, stride=strides)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.conv3 = nn.Conv2d(cin, cout, 1, stride=strides) if use_1x1conv else None
        self.bn1, self.bn2 = nn.BatchNorm2d(cout), nn.BatchNorm2d(cout)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.conv3(x) if self.conv3 is not None else x))


def _stage(cin, cout, first):
    return nn.Sequential(Residual(cin, cout, use_1x1conv=not first, strides=1 if first else 2),
                         Residual(cout, cout))


def resnet18():
    return nn.Sequential(nn.Conv2d(1, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                         _stage(64, 64, True), _stage(64, 128, False), _stage(128, 256, False),
                         _stage(256, 512, False), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(512, 10))


def make(name, seed):
    torch.manual_seed(seed)
    net = LeNet() if name == "lenet" else resnet18()
    for m in net.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.normal_(m.weight, std=0.01)
            nn.init.zeros_(m.bias)
    return net
