#!/usr/bin/env python3
"""torch_train_net.py - PyTorch (Debian's python3-torch, /usr/bin/python3)
training steps on the CPU, the PyTorch side of scripts/bench/train_nets.sh:
the same nets as configs/NET.conf where torchvision or a few lines give them
(ResNet-20 from torch_gpu.py, torchvision's resnet18, resnet50, vgg16 and mobilenet_v2), 2 threads,
float32, sgd momentum 0.9, wd 1e-4, random data made once; prints one JSON
line: samples/s over --batches steps after --warmup.
    /usr/bin/python3 torch_train_net.py --net resnet50 --batch 16
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpu import ResNet20  # noqa: E402  (the same CIFAR net as configs/resnet-20.conf)

NETS = {
    "resnet-20": (ResNet20, (3, 32, 32), 10),
    "resnet-18": (lambda: torchvision.models.resnet18(num_classes=1000), (3, 224, 224), 1000),
    "resnet-50": (lambda: torchvision.models.resnet50(num_classes=1000), (3, 224, 224), 1000),
    "vgg-16": (lambda: torchvision.models.vgg16(num_classes=1000), (3, 224, 224), 1000),
    "mobilenet-v2": (lambda: torchvision.models.mobilenet_v2(num_classes=1000), (3, 224, 224), 1000),
}

p = argparse.ArgumentParser()
p.add_argument("--net", required=True, choices=sorted(NETS))
p.add_argument("--batch", type=int, required=True)
p.add_argument("--batches", type=int, default=10)
p.add_argument("--warmup", type=int, default=2)
p.add_argument("--threads", type=int, default=2)
a = p.parse_args()
torch.set_num_threads(a.threads)
make, shape, classes = NETS[a.net]
torch.manual_seed(0)
net = make().train()
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
x = torch.rand(a.batch, *shape) * 2 - 1
y = torch.randint(0, classes, (a.batch,))
t0 = None
for step in range(a.warmup + a.batches):
    if step == a.warmup:
        t0 = time.perf_counter()
    loss = F.cross_entropy(net(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
dt = time.perf_counter() - t0
print(json.dumps({"side": "torch", "samples_per_sec": a.batches * a.batch / dt, "torch": torch.__version__}))
