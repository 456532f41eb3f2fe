#!/usr/bin/python3
"""LeNet training throughput in PyTorch on the CPU, the PyTorch side of
scripts/bench/train_lenet.sh.

The network, optimiser and batch are those of configs/lenet.conf:
conv 5x5x20 -> tanh -> max pool 2/2 -> conv 5x5x50 -> tanh -> max pool 2/2
-> fc 500 -> tanh -> fc 10, softmax cross-entropy; SGD lr 0.05, momentum
0.9, weight decay 1e-4; batch 64. Fashion-MNIST's 60000 training images are
read with gzip + numpy, scaled by 1/256 (as mxtrain's mnist iterator does),
shuffled once and held in memory as one float32 tensor, so a batch is a
slice (a view, no copy): data loading is outside the timed loop.

Each step is the usual loop: forward, cross-entropy, zero_grad, backward,
optimizer.step(). After --warmup steps, --batches steps are timed in
windows of --window steps; every window prints an mxtrain-style line
"Batch[b] Speed: X samples/sec", and the last line is a JSON object with
the per-window speeds and the overall samples/sec of the timed steps.

usage: torch_lenet.py [--batches N] [--warmup W] [--window K] [--batch B]
                      [--threads T] [--data-dir DIR] [--device cpu|cuda]

With --device cuda (scripts/gpu/run.sh) the tensors and model live on the
GPU; the loss read at the end of every window waits for the GPU, so the
windows time finished work.
"""
import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5)
        self.conv2 = nn.Conv2d(20, 50, 5)
        self.fc1 = nn.Linear(800, 500)
        self.fc2 = nn.Linear(500, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.tanh(self.conv1(x)), 2, 2)
        x = F.max_pool2d(torch.tanh(self.conv2(x)), 2, 2)
        x = torch.tanh(self.fc1(x.flatten(1)))
        return self.fc2(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=300, help="timed steps (default 300)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps first (default 20)")
    ap.add_argument("--window", type=int, default=100, help="steps per Speed line (default 100)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda: data and model on that device")
    ap.add_argument("--data-dir", default=os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    images = read_idx(os.path.join(a.data_dir, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(a.data_dir, "train-labels-idx1-ubyte.gz"))
    perm = np.random.default_rng(a.seed).permutation(len(images))
    x_all = torch.from_numpy((images[perm].astype(np.float32) / 256.0).reshape(-1, 1, 28, 28)).contiguous()
    y_all = torch.from_numpy(labels[perm].astype(np.int64))
    nb = len(x_all) // a.batch
    dev = torch.device(a.device)
    x_all, y_all = x_all.to(dev), y_all.to(dev)

    net = LeNet().to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    net.train()

    def step(i):
        j = (i % nb) * a.batch
        x, y = x_all[j:j + a.batch], y_all[j:j + a.batch]
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for i in range(a.warmup):
        step(i)
    speeds = []
    t_start = t_window = time.perf_counter()
    done = 0
    loss = None
    for i in range(a.batches):
        loss = step(a.warmup + i)
        done += 1
        if done % a.window == 0 or done == a.batches:
            now = time.perf_counter()
            n = done % a.window or a.window
            speeds.append(n * a.batch / (now - t_window))
            print("Batch[%d] Speed: %.2f samples/sec loss=%.4f" % (done, speeds[-1], loss.item()),
                  file=sys.stderr, flush=True)
            t_window = now
    total = time.perf_counter() - t_start
    print(json.dumps({
        "side": "torch", "device": a.device, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "onednn": torch.backends.mkldnn.is_available(), "batch": a.batch, "warmup": a.warmup,
        "batches": a.batches, "window": a.window, "window_speeds": speeds,
        "samples_per_sec": a.batches * a.batch / total, "final_loss": loss.item() if loss is not None else None,
    }))


if __name__ == "__main__":
    main()
