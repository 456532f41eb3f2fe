#!/usr/bin/env python3
"""Writes tests/fixtures/mxnet/fp16-convnet: a float16 network as MXNet 1.9.1
writes one (a Cast to float16 after the data, float16 convolution and
fully-connected weights, float32 BatchNorm parameters and statistics, a Cast
back to float32 before SoftmaxOutput), its .params saved by MXNet, an input
batch, and the probabilities MXNet computes with the same weights in float32
(MXNet's CPU has no float16 GEMM, so the float16 run itself cannot be its
reference; the float16 network rounds every layer's output to float16, so it
matches within about 1e-2). Run with the MXNet venv:
    ~/.cache/mxc/mxnet-venv/bin/python scripts/interop/make-fp16-fixture.py
"""
import os
import sys

import mxnet as mx
import numpy as np

out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/mxnet/fp16-convnet"
os.makedirs(out_dir, exist_ok=True)


def net(dtype):
    data = mx.sym.Variable("data")
    x = mx.sym.Cast(data, dtype="float16", name="data_f16") if dtype == "float16" else data
    x = mx.sym.Convolution(x, kernel=(3, 3), num_filter=8, pad=(1, 1), name="conv1")
    x = mx.sym.BatchNorm(x, fix_gamma=False, name="bn1")
    x = mx.sym.Activation(x, act_type="relu", name="relu1")
    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool1")
    x = mx.sym.Flatten(x, name="flat")
    x = mx.sym.FullyConnected(x, num_hidden=10, name="fc1")
    if dtype == "float16":
        x = mx.sym.Cast(x, dtype="float32", name="fc1_f32")
    return mx.sym.SoftmaxOutput(x, name="softmax")


shape = (2, 3, 10, 10)
half = net("float16")
arg_types, _, aux_types = half.infer_type(data="float32")
rng = np.random.RandomState(7)
args, aux = {}, {}
for name, t in zip(half.list_arguments(), arg_types):
    if name in ("data", "softmax_label"):
        continue
    s = dict(zip(half.list_arguments(), half.infer_shape(data=shape)[0]))[name]
    v = rng.uniform(0.5, 1.5, s) if "gamma" in name else rng.uniform(-0.4, 0.4, s)
    args[name] = mx.nd.array(v, dtype=t)
for name, t in zip(half.list_auxiliary_states(), aux_types):
    s = dict(zip(half.list_auxiliary_states(), half.infer_shape(data=shape)[2]))[name]
    v = rng.uniform(0.5, 1.5, s) if "var" in name else rng.uniform(-0.2, 0.2, s)
    aux[name] = mx.nd.array(v, dtype=t)
half.save(os.path.join(out_dir, "model-symbol.json"))
saved = {"arg:" + k: v for k, v in args.items()}
saved.update({"aux:" + k: v for k, v in aux.items()})
mx.nd.save(os.path.join(out_dir, "model-0000.params"), saved)

data = rng.uniform(-1, 1, shape).astype(np.float32)
full = net("float32")
ex = full.simple_bind(mx.cpu(), data=shape, grad_req="null")
for k, v in args.items():
    ex.arg_dict[k][:] = v.astype("float32")
for k, v in aux.items():
    ex.aux_dict[k][:] = v.astype("float32")
ex.arg_dict["data"][:] = data
ex.forward(is_train=False)
data.tofile(os.path.join(out_dir, "input.f32"))
ex.outputs[0].asnumpy().astype(np.float32).tofile(os.path.join(out_dir, "expected.f32"))
print("wrote", out_dir, {k: str(v.dtype) for k, v in saved.items()})
