"""mxnet_train_net.py - MXNet 1.9.1 (oneDNN) training steps of a symbol
that mxtrain wrote (PREFIX-symbol.json: the very network of configs/NET.conf),
the MXNet side of scripts/bench/train_nets.sh. Module API on the CPU, random
data made once (as mxtrain's synthetic iterator), sgd momentum 0.9, wd 1e-4,
Xavier init; prints one JSON line: samples/s over --batches steps after
--warmup, each step forward_backward + update, waited for at the end.
    python mxnet_train_net.py --symbol P-symbol.json --shape 3,224,224 --classes 1000 --batch 16
"""
import argparse
import json
import time

import mxnet as mx
import numpy as np

p = argparse.ArgumentParser()
p.add_argument("--symbol", required=True)
p.add_argument("--shape", required=True)
p.add_argument("--classes", type=int, required=True)
p.add_argument("--batch", type=int, required=True)
p.add_argument("--batches", type=int, default=10)
p.add_argument("--warmup", type=int, default=2)
a = p.parse_args()

shape = tuple(int(v) for v in a.shape.split(","))
net = mx.sym.load(a.symbol)
mod = mx.mod.Module(net, data_names=["data"], label_names=["softmax_label"], context=mx.cpu())
mod.bind(data_shapes=[("data", (a.batch,) + shape)], label_shapes=[("softmax_label", (a.batch,))])
mod.init_params(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2))
mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.05, "momentum": 0.9, "wd": 0.0001,
                                                       "rescale_grad": 1.0 / a.batch})
rng = np.random.default_rng(0)
batch = mx.io.DataBatch([mx.nd.array(rng.uniform(-1, 1, (a.batch,) + shape).astype(np.float32))],
                        [mx.nd.array(rng.integers(0, a.classes, a.batch).astype(np.float32))])
t0 = None
for step in range(a.warmup + a.batches):
    if step == a.warmup:
        mx.nd.waitall()
        t0 = time.perf_counter()
    mod.forward_backward(batch)
    mod.update()
mx.nd.waitall()
dt = time.perf_counter() - t0
print(json.dumps({"side": "mxnet", "samples_per_sec": a.batches * a.batch / dt, "mxnet": mx.__version__}))
