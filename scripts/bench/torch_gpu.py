#!/usr/bin/env python3
"""Training-step throughput of PyTorch on a GPU, the PyTorch side of
scripts/bench/gpu.sh (run on the lent GPU machine with its PyTorch 2.11).

The nets match mxc's configs in compute: LeNet (configs/lenet.conf),
ResNet-20 pre-activation as MXNet's resnet.py CIFAR branch
(configs/resnet-20.conf: BN -> ReLU -> conv units, 16-32-64 filters, 1x1
projections where a stage starts), and ResNet-50 (torchvision's v1.5:
the layers and parameters of configs/resnet-50.conf's v1, but stride 2 in
each downsampling block's 3x3 convolution instead of its first 1x1, about
5% more multiply-adds).
NCHW, SGD with momentum 0.9 and weight decay 1e-4, random data made once
on the GPU (as mxtrain's synthetic iterator): the step alone is timed.
--dtype float32 (TF32 off, as mxc), or bfloat16 / float16 mixed precision
as PyTorch does it (torch.autocast around the forward pass and the loss,
float32 weights; float16 with a GradScaler), the counterpart of mxtrain's
fit.dtype. Eager mode, and torch.compile when --compile is given.
--predict: inference instead (eval mode, no autograd, the same autocast),
each step's output read back to the host, beside mxpredict --benchmark.

Prints one JSON object per net: images/s over --steps timed steps after
--warmup, and the peak GPU memory PyTorch allocated.

usage: torch_gpu.py [--nets lenet,resnet20,resnet50] [--batch 64] [--dtype float32]
                    [--steps 50] [--warmup 10] [--compile] [--profile DIR]

--profile DIR: after the timed steps, 4 more under torch.profiler; the
operators' GPU time per step goes to DIR/torch-NET-profile.txt (to set
beside mxtrain's fit.profile summary, scripts/bench/profile_summary.py).
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 20, 5), nn.Conv2d(20, 50, 5)
        self.fc1, self.fc2 = nn.Linear(800, 500), nn.Linear(500, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.tanh(self.conv1(x)), 2, 2)
        x = F.max_pool2d(torch.tanh(self.conv2(x)), 2, 2)
        return self.fc2(torch.tanh(self.fc1(x.flatten(1))))


class PreActUnit(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm2d(cin), nn.BatchNorm2d(cout)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.proj = nn.Conv2d(cin, cout, 1, stride, bias=False) if (cin != cout or stride != 1) else None

    def forward(self, x):
        a = F.relu(self.bn1(x))
        short = self.proj(a) if self.proj is not None else x
        return self.conv2(F.relu(self.bn2(self.conv1(a)))) + short


class ResNet20(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn_data = nn.BatchNorm2d(3, affine=False)
        self.conv0 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        units, cin = [], 16
        for stage, cout in enumerate((16, 32, 64)):
            for u in range(3):
                units.append(PreActUnit(cin if u == 0 else cout, cout, 2 if (stage > 0 and u == 0) else 1))
            cin = cout
        self.units = nn.Sequential(*units)
        self.bn1, self.fc = nn.BatchNorm2d(64), nn.Linear(64, 10)

    def forward(self, x):
        x = self.units(self.conv0(self.bn_data(x)))
        return self.fc(F.adaptive_avg_pool2d(F.relu(self.bn1(x)), 1).flatten(1))


NETS = {
    "lenet": (LeNet, (1, 28, 28), 10),
    "resnet20": (ResNet20, (3, 32, 32), 10),
    "resnet50": (lambda: torchvision.models.resnet50(num_classes=1000), (3, 224, 224), 1000),
}


def bench_predict(name, batch, steps, warmup, compile_, dtype):
    make, shape, _ = NETS[name]
    torch.manual_seed(0)
    net = make().cuda().eval()
    x = torch.rand(batch, *shape, device="cuda") * 2 - 1
    fwd = torch.compile(net) if compile_ else net
    half = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]

    def step():
        with torch.no_grad(), torch.autocast("cuda", dtype=half, enabled=half is not None):
            return fwd(x).float().cpu()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    dt = time.perf_counter() - t0
    return {"side": "torch" + (".compile" if compile_ else ""), "mode": "predict", "net": name, "batch": batch,
            "dtype": dtype, "steps": steps, "images_per_sec": steps * batch / dt, "step_ms": 1000 * dt / steps,
            "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}


def bench(name, batch, steps, warmup, compile_, dtype="float32", profile_dir=None):
    make, shape, classes = NETS[name]
    torch.manual_seed(0)
    net = make().cuda().train()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    x = torch.rand(batch, *shape, device="cuda") * 2 - 1
    y = torch.randint(0, classes, (batch,), device="cuda")
    fwd = torch.compile(net) if compile_ else net
    half = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    scaler = torch.amp.GradScaler("cuda") if dtype == "float16" else None

    def step():
        with torch.autocast("cuda", dtype=half, enabled=half is not None):
            loss = F.cross_entropy(fwd(x), y)
        opt.zero_grad(set_to_none=True)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    if profile_dir:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(4):
                step()
            torch.cuda.synchronize()
        with open(f"{profile_dir}/torch-{name}-profile.txt", "w") as f:
            f.write(f"# {name}, batch {batch}, 4 steps (divide totals by 4)\n")
            f.write(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=40))
    return {"side": "torch" + (".compile" if compile_ else ""), "net": name, "batch": batch, "dtype": dtype, "steps": steps,
            "images_per_sec": steps * batch / dt, "step_ms": 1000 * dt / steps,
            "peak_mib": torch.cuda.max_memory_allocated() / 2**20, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nets", default="lenet,resnet20,resnet50")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--predict", action="store_true")
    ap.add_argument("--profile", metavar="DIR")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 as mxc computes it
    torch.backends.cudnn.allow_tf32 = False
    for name in a.nets.split(","):
        if a.predict:
            print(json.dumps(bench_predict(name, a.batch, a.steps, a.warmup, a.compile, a.dtype)), flush=True)
        else:
            print(json.dumps(bench(name, a.batch, a.steps, a.warmup, a.compile, a.dtype, a.profile)), flush=True)


if __name__ == "__main__":
    main()
