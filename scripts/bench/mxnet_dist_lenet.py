"""mxnet_dist_lenet.py - MXNet 1.9.1's LeNet (configs/lenet.conf's net, sgd
momentum 0.9, batch 64) on Fashion-MNIST with a distributed kvstore, one
worker of a ps-lite job started by scripts/bench/dist.sh (DMLC_ROLE=worker
and the DMLC_PS_* variables, as tools/launch.py --launcher local sets them).
Each worker trains on its part (num_parts = workers, part_index = rank) for
--batches batches and prints 'samples_per_sec S' over the batches after
--warmup (its own samples; dist.sh adds the workers up).
    python mxnet_dist_lenet.py --kvstore dist_sync --batches 200
"""
import argparse
import gzip
import time

import mxnet as mx
import numpy as np

p = argparse.ArgumentParser()
p.add_argument("--kvstore", default="dist_sync")
p.add_argument("--batches", type=int, default=200)
p.add_argument("--warmup", type=int, default=20)
p.add_argument("--images", default="/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
p.add_argument("--labels", default="/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz")
a = p.parse_args()

kv = mx.kv.create(a.kvstore)
with gzip.open(a.images) as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28).astype(np.float32) / 255
with gzip.open(a.labels) as f:
    y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.float32)
part = len(x) // kv.num_workers
x, y = x[kv.rank * part:(kv.rank + 1) * part], y[kv.rank * part:(kv.rank + 1) * part]
it = mx.io.NDArrayIter(x, y, batch_size=64, shuffle=True, label_name="softmax_label")

d = mx.sym.Variable("data")
n = mx.sym.Convolution(d, kernel=(5, 5), num_filter=20, name="conv1")
n = mx.sym.Pooling(mx.sym.Activation(n, act_type="tanh"), pool_type="max", kernel=(2, 2), stride=(2, 2))
n = mx.sym.Convolution(n, kernel=(5, 5), num_filter=50, name="conv2")
n = mx.sym.Pooling(mx.sym.Activation(n, act_type="tanh"), pool_type="max", kernel=(2, 2), stride=(2, 2))
n = mx.sym.FullyConnected(mx.sym.Flatten(n), num_hidden=500, name="fc1")
n = mx.sym.FullyConnected(mx.sym.Activation(n, act_type="tanh"), num_hidden=10, name="fc2")
net = mx.sym.SoftmaxOutput(n, name="softmax")

mod = mx.mod.Module(net, context=mx.cpu())
mod.bind(data_shapes=it.provide_data, label_shapes=it.provide_label)
mod.init_params(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2))
mod.init_optimizer(kvstore=kv, optimizer="sgd",
                   optimizer_params={"learning_rate": 0.05, "momentum": 0.9, "wd": 0.0001,
                                     "rescale_grad": 1.0 / (64 * kv.num_workers)})
done, t0 = 0, None
while done < a.batches:
    it.reset()
    for batch in it:
        if done == a.warmup:
            mx.nd.waitall()
            t0 = time.time()
        mod.forward_backward(batch)
        mod.update()
        done += 1
        if done >= a.batches:
            break
mx.nd.waitall()
print("samples_per_sec %.2f" % ((a.batches - a.warmup) * 64 / (time.time() - t0)), flush=True)
