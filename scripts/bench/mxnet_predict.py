#!/usr/bin/env python3
"""mxnet_predict.py - prediction speed of mxpredict beside MXNet 1.9.1 on
Gluon model zoo networks (run by scripts/bench/predict.sh with the MXNet
venv's python).

  mxnet_predict.py --work DIR --mxpredict BIN [--nets a,b] [--batches 1,16]
                   [--rounds R] [--out FILE]

Exports each network of mxnet.gluon.model_zoo.vision (random weights: the
speed does not depend on them) with net.hybridize(); net.export(), as a
Gluon user would, then in each round times, for every (net, batch) in
turn, both sides in alternating order:
  mxpredict: `mxpredict --no-overlap -v --batch-size B` on a .lst of
    224x224 PNGs; the "network per batch" figures (copy in, forward, copy
    out; the images are read and decoded outside that time);
  MXNet: the exported files loaded with gluon.SymbolBlock.imports,
    hybridize(static_alloc=True, static_shape=True), one warm-up batch,
    then each batch's forward timed to wait_to_read().
Both with OMP_NUM_THREADS=2 (and OPENBLAS_NUM_THREADS=2). The best batch
of all rounds leads (other jobs only slow a run down), the median follows.
Writes the "Prediction beside MXNet" section of --out (the rest is kept).
"""
import argparse
import os
import statistics
import struct
import subprocess
import sys
import time
import zlib

import numpy as np

BEGIN = "<!-- BEGIN prediction-vs-mxnet (scripts/bench/predict.sh writes this section) -->"
END = "<!-- END prediction-vs-mxnet -->"
NETS = {"resnet50_v1": "ResNet-50 v1", "mobilenet1.0": "MobileNet v1 1.0", "mobilenetv2_1.0": "MobileNet v2 1.0",
        "densenet121": "DenseNet-121"}


def write_png(path, rgb):
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xffffffff)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)


def export(work, nets):
    import mxnet as mx
    from mxnet.gluon.model_zoo import vision
    for name in nets:
        prefix = os.path.join(work, name)
        if os.path.exists(prefix + "-symbol.json"):
            continue
        net = vision.get_model(name)
        net.initialize(mx.init.Xavier())
        net.hybridize()
        net(mx.nd.zeros((1, 3, 224, 224))).wait_to_read()
        net.export(prefix)
    rng = np.random.RandomState(0)
    for i in range(2):
        path = os.path.join(work, "img%d.png" % i)
        if not os.path.exists(path):
            write_png(path, rng.randint(0, 256, (224, 224, 3)).astype(np.uint8))


def lst(work, n):
    path = os.path.join(work, "imgs%d.lst" % n)
    with open(path, "w") as f:
        for i in range(n):
            f.write("%d\t0\t%s\n" % (i, os.path.join(work, "img%d.png" % (i % 2))))
    return path


def time_mxpredict(binary, work, name, batch, batches):
    cmd = [binary, "--model", os.path.join(work, name), "--epoch", "0", "--data-shape", "3,224,224",
           "--batch-size", str(batch), "--no-overlap", "-v", "--output", os.devnull, lst(work, batch * batches)]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("mxnet_predict.py: %s failed:\n%s" % (" ".join(cmd), r.stderr))
    best = cpu = None
    for line in r.stderr.splitlines():
        if "network per batch" in line:  # "... best X ms, median Y ms ..."
            best = float(line.split("best ")[1].split(" ms")[0])
            med = float(line.split("median ")[1].split(" ms")[0])
        if "network CPU time" in line:  # "... X s, Y ms per sample"
            cpu = float(line.split(", ")[-1].split(" ms")[0])
    if best is not None and cpu is not None:
        return best / 1e3, med / 1e3, cpu / 1e3
    sys.exit("mxnet_predict.py: no per-batch timing from mxpredict:\n" + r.stderr)


_blocks = {}


def time_mxnet(work, name, batch, batches):
    import mxnet as mx
    from mxnet import gluon
    key = (name, batch)
    if key not in _blocks:
        prefix = os.path.join(work, name)
        blk = gluon.SymbolBlock.imports(prefix + "-symbol.json", ["data"], prefix + "-0000.params")
        blk.hybridize(static_alloc=True, static_shape=True)
        _blocks.clear()  # one network's memory at a time
        _blocks[key] = blk
    blk = _blocks[key]
    x = mx.nd.array(np.random.RandomState(1).uniform(-2, 2, (batch, 3, 224, 224)).astype(np.float32))
    blk(x).wait_to_read()  # warm-up (first call builds the cached graph)
    t = []
    c0 = time.process_time()
    for _ in range(batches):
        t0 = time.perf_counter()
        blk(x).wait_to_read()
        t.append(time.perf_counter() - t0)
    return min(t), statistics.median(t), (time.process_time() - c0) / (batches * batch)


def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return "%s, %d logical CPUs" % (model, os.cpu_count())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--mxpredict", required=True)
    p.add_argument("--nets", default=",".join(NETS))
    p.add_argument("--batches", default="1,16")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default="")
    a = p.parse_args()
    nets = a.nets.split(",")
    batches = [int(b) for b in a.batches.split(",")]
    os.makedirs(a.work, exist_ok=True)
    export(a.work, nets)
    import mxnet as mx
    per_run = {1: 8}  # batches timed per run: a few at batch 1, fewer large ones
    res = {}
    load = []
    t_start = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for r in range(a.rounds):
        load.append(os.getloadavg()[0])
        for name in nets:
            for b in batches:
                k = per_run.get(b, 3)
                sides = [("mxpredict", lambda: time_mxpredict(a.mxpredict, a.work, name, b, k)),
                         ("mxnet", lambda: time_mxnet(a.work, name, b, k))]
                if r % 2:
                    sides.reverse()
                for side, fn in sides:
                    best, med, cpu = fn()
                    res.setdefault((name, b, side), []).append((best, med, cpu))
                    print("round %d %-16s batch %2d %-9s best %8.1f ms  median %8.1f ms  CPU %6.1f ms/img  load %.1f" %
                          (r + 1, name, b, side, best * 1e3, med * 1e3, cpu * 1e3, os.getloadavg()[0]), flush=True)
    load.append(os.getloadavg()[0])

    lines = [BEGIN, "## Prediction beside MXNet 1.9.1 (Gluon model zoo)", "",
             "Generated by `scripts/bench/predict.sh` on %s (it rewrites only this section)." % t_start, "",
             "- Machine: %s, shared with other jobs; 1-minute load average at the start of each round and at the "
             "end: %s. **Other jobs were running**: absolute figures are pessimistic and noisy; the ratios, from "
             "interleaved runs, are what to read." % (machine(), ", ".join("%.1f" % x for x in load)),
             "- Networks: `mxnet.gluon.model_zoo.vision.get_model(NAME)`, random weights, exported with "
             "`net.hybridize(); net.export(...)`; input 3x224x224.",
             "- **mxpredict**: `mxpredict --no-overlap -v --batch-size B` over 224x224 PNGs, `OMP_NUM_THREADS=2`; "
             "the time one batch spends in the network (copy in, forward, copy out; decoding is outside it).",
             "- **MXNet %s** (pip wheel, oneDNN): `gluon.SymbolBlock.imports` of the same files, "
             "`hybridize(static_alloc=True, static_shape=True)`, `OMP_NUM_THREADS=2`, one warm-up batch, each "
             "batch's forward to `wait_to_read()`." % mx.__version__,
             "- %d rounds, both sides in alternating order; %d batches per run at batch 1, 3 at larger batches. "
             "Best batch of all rounds (median of the rounds' medians in parentheses). Images/sec: higher is "
             "better; ratio = mxpredict / MXNet at the best figures (> 1: mxpredict faster)." % (a.rounds, 8),
             "- CPU ms/img: the process's CPU time (all threads, user + system) during the timed batches, per "
             "image: mxpredict's `network CPU time` line, MXNet's `time.process_time()` around its timed "
             "batches (OpenMP's spin-waiting counts on both sides), minimum over the rounds. Other jobs barely "
             "change it, so under load it is the steadier comparison of the work each side does; CPU ratio = "
             "MXNet / mxpredict (> 1: mxpredict does less work).",
             "",
             "| net | batch | mxpredict img/s | MXNet img/s | ratio | mxpredict CPU ms/img | MXNet CPU ms/img | CPU ratio |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in nets:
        for b in batches:
            m, x = res[(name, b, "mxpredict")], res[(name, b, "mxnet")]
            mb, xb = min(t[0] for t in m), min(t[0] for t in x)
            mm, xm = statistics.median(t[1] for t in m), statistics.median(t[1] for t in x)
            mc, xc = min(t[2] for t in m), min(t[2] for t in x)
            lines.append("| %s | %d | %.1f (%.1f) | %.1f (%.1f) | %.2f | %.1f | %.1f | %.2f |" %
                         (NETS.get(name, name), b, b / mb, b / mm, b / xb, b / xm, xb / mb, mc * 1e3, xc * 1e3,
                          xc / mc))
    lines += ["", "Reproduce: `scripts/bench/predict.sh --part mxnet` (options: `--rounds R`, `--work DIR` to "
              "keep the exports).", END]
    section = "\n".join(lines) + "\n"
    print(section)
    if a.out:
        text = open(a.out).read() if os.path.exists(a.out) else "# Benchmarks\n\n"
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            text = head + section.rstrip("\n") + rest.split(END, 1)[1]
        else:
            text = text.rstrip("\n") + "\n\n" + section
        with open(a.out + ".tmp", "w") as f:
            f.write(text)
        os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()
