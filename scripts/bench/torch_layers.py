#!/usr/bin/python3
"""Per-layer benchmark: our Convolution / FullyConnected kernels
(build/bin/mxbench) against PyTorch on the CPU, side by side.

For each round and each layer of `mxbench --list`, runs our side
(mxbench --index I, OPENBLAS_NUM_THREADS=2), PyTorch (2 threads, oneDNN
convolutions) and PyTorch with oneDNN off (its own im2col + BLAS
convolution) back to back, rotating which goes first, so all see the same
machine load. Each side times --runs forward+backward passes after
--warmup; the table shows each side's best pass over all rounds (other jobs
on a shared machine only slow passes down) and, beside it, the median over
rounds of the per-round ratio of median passes. The raw cblas_sgemm
GFLOP/s of this machine is measured in every round (mxbench --sgemm-only)
and the convolution's GFLOP/s is given as a share of it.

usage: torch_layers.py [--rounds R] [--runs N] [--warmup W] [--only SUBSTR]
                       [--mxbench PATH] [--out FILE] [--json FILE] [--notes FILE]
Writes its own marked section of FILE (default docs/benchmarks.md), leaving
the other sections alone, and prints the table.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

THREADS = 2


def parse_tuple(text):
    text = text.strip().strip("()[]")
    return tuple(int(v) for v in text.split(",") if v.strip())


SETTLE_S = 0.3  # pause between sides (see the comparison loop)


def mxbench(path, *args):
    # OpenBLAS starts its own worker threads when the library loads, and they
    # spin in sched_yield for about 0.1 s before sleeping: a short mxbench
    # run would share the cores with them. Our kernels call OpenBLAS on one
    # thread inside the kernel pool, so only the SGEMM reference (which
    # measures OpenBLAS's own threading) gets THREADS of them.
    blas_threads = THREADS if "--sgemm-only" in args else 1
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(blas_threads), OMP_NUM_THREADS=str(THREADS))
    out = subprocess.run([path, *args], env=env, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def gemm_dims(spec):
    """(M, N, K) of the layer's forward product, batch folded in."""
    d, p = spec["data"], spec["params"]
    if spec["op"] == "FullyConnected":
        k = 1
        for v in d[1:]:
            k *= v
        return d[0], int(p["num_hidden"]), k
    kh, kw = parse_tuple(p["kernel"])
    sh, sw = parse_tuple(p.get("stride", "(1,1)"))
    ph, pw = parse_tuple(p.get("pad", "(0,0)"))
    oh, ow = (d[2] + 2 * ph - kh) // sh + 1, (d[3] + 2 * pw - kw) // sw + 1
    return int(p["num_filter"]), d[0] * oh * ow, d[1] * kh * kw


def shape_text(spec):
    d, p = spec["data"], spec["params"]
    if spec["op"] == "FullyConnected":
        return "(%s) -> %s" % (",".join(map(str, d)), p["num_hidden"])
    text = "(%s) k%s" % (",".join(map(str, d)), "x".join(map(str, parse_tuple(p["kernel"]))))
    s = parse_tuple(p.get("stride", "(1,1)"))
    if any(v != 1 for v in s):
        text += " s%d" % s[0]
    pad = parse_tuple(p.get("pad", "(0,0)"))
    if any(pad):
        text += " p%d" % pad[0]
    return text + " -> %s" % p["num_filter"]


def torch_layer(spec):
    """(forward closure, the tensors needing gradients, output-gradient)."""
    d, p = spec["data"], spec["params"]
    x = torch.randn(*d, requires_grad=True)
    if spec["op"] == "FullyConnected":
        h = int(p["num_hidden"])
        k = x[0].numel()
        w = torch.randn(h, k, requires_grad=True)
        b = torch.randn(h, requires_grad=True)
        fn = lambda: F.linear(x.reshape(d[0], k), w, b)
    else:
        f = int(p["num_filter"])
        kernel = parse_tuple(p["kernel"])
        stride = parse_tuple(p.get("stride", "(1,1)"))
        pad = parse_tuple(p.get("pad", "(0,0)"))
        w = torch.randn(f, d[1], *kernel, requires_grad=True)
        b = torch.randn(f, requires_grad=True)
        fn = lambda: F.conv2d(x, w, b, stride=stride, padding=pad)
    with torch.no_grad():
        gy = torch.randn_like(fn())
    return fn, (x, w, b), gy


def time_torch(spec, runs, warmup, onednn=True):
    """Medians (and the best pass) in ms; onednn=False sends convolutions
    to PyTorch's own im2col + BLAS path (slow_conv2d), like ours."""
    fn, leaves, gy = torch_layer(spec)
    tf, tb, tt = [], [], []
    with torch.backends.mkldnn.flags(enabled=onednn):
        for i in range(warmup + runs):
            for t in leaves:
                t.grad = None  # written, not accumulated, like ours
            t0 = time.perf_counter()
            y = fn()
            t1 = time.perf_counter()
            y.backward(gy)
            t2 = time.perf_counter()
            if i >= warmup:
                tf.append(t1 - t0)
                tb.append(t2 - t1)
                tt.append(t2 - t0)
    med = statistics.median
    return {"fwd_ms": med(tf) * 1e3, "bwd_ms": med(tb) * 1e3, "ms": med(tt) * 1e3, "min_ms": min(tt) * 1e3}


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--only", default=None, help="layers whose 'net layer' contains this")
    ap.add_argument("--mxbench", default="build/bin/mxbench")
    ap.add_argument("--out", default="docs/benchmarks.md")
    ap.add_argument("--json", default=None, help="also write the raw per-round results here")
    ap.add_argument("--notes", default="scripts/bench/notes.md", help="appended to the report when present")
    a = ap.parse_args()

    torch.set_num_threads(THREADS)
    # mxbench also lists pooling layers (its own timings only): this
    # comparison covers the layers with a weight.
    specs = [s for s in mxbench(a.mxbench, "--list") if s["op"] in ("Convolution", "FullyConnected")]
    if a.only:
        specs = [s for s in specs if a.only in "%s %s" % (s["net"], s["layer"])]
    ours = {s["index"]: [] for s in specs}
    theirs = {s["index"]: [] for s in specs}
    blas = {s["index"]: [] for s in specs}  # PyTorch without oneDNN
    sgemm = {}
    load = []
    for r in range(a.rounds):
        load.append(os.getloadavg()[0])
        for line in mxbench(a.mxbench, "--sgemm-only", "--runs", str(a.runs), "--warmup", str(a.warmup)):
            sgemm.setdefault(line["sgemm"], []).append(line["gflops"])
        for s in specs:
            i = s["index"]
            sides = ["ours", "torch", "blas"]
            k = (r + i) % 3
            for side in sides[k:] + sides[:k]:  # rotate who goes first
                # Idle threads of the side before (PyTorch's OpenMP and
                # OpenBLAS workers in this process) spin for up to ~0.1 s
                # after their last task; let them fall asleep first.
                time.sleep(SETTLE_S)
                if side == "ours":
                    ours[i].append(mxbench(a.mxbench, "--index", str(i), "--no-sgemm", "--runs", str(a.runs),
                                           "--warmup", str(a.warmup))[0])
                elif side == "torch":
                    theirs[i].append(time_torch(s, a.runs, a.warmup))
                else:
                    blas[i].append(time_torch(s, a.runs, a.warmup, onednn=False))
            print("round %d/%d  %-8s %-18s ours %8.2f ms  torch %8.2f ms  torch im2col %8.2f ms" %
                  (r + 1, a.rounds, s["net"], s["layer"], ours[i][-1]["ms"], theirs[i][-1]["ms"],
                   blas[i][-1]["ms"]), file=sys.stderr, flush=True)

    med = statistics.median
    best_peak = max(sgemm["1024x1024x1024"])
    rows = []
    for s in specs:
        i = s["index"]
        o, t, b = ours[i], theirs[i], blas[i]
        best_o, best_t, best_b = (min(v["min_ms"] for v in x) for x in (o, t, b))
        gflop = o[0]["gflop"]
        m, n, k = gemm_dims(s)
        rows.append({
            "net": s["net"], "layer": s["layer"], "op": s["op"], "shape": shape_text(s),
            "gemm": "%dx%dx%d" % (m, n, k), "gemm_bound": min(m, n, k) >= 64,
            "ours_ms": best_o, "torch_ms": best_t, "blas_ms": best_b,
            "ratio": best_o / best_t, "ratio_blas": best_o / best_b,
            "median_ours_ms": med([v["ms"] for v in o]), "median_torch_ms": med([v["ms"] for v in t]),
            "median_ratio": med([ov["ms"] / tv["ms"] for ov, tv in zip(o, t)]),
            "median_ratio_blas": med([ov["ms"] / bv["ms"] for ov, bv in zip(o, b)]),
            "ours_fwd_ms": med([v["fwd_ms"] for v in o]), "ours_bwd_ms": med([v["bwd_ms"] for v in o]),
            "torch_fwd_ms": med([v["fwd_ms"] for v in t]), "torch_bwd_ms": med([v["bwd_ms"] for v in t]),
            "gflops": gflop / (best_o * 1e-3), "torch_gflops": gflop / (best_t * 1e-3),
            "peak_pct": 100.0 * gflop / (best_o * 1e-3) / best_peak,
        })

    def geomean(values):
        values = list(values)
        g = 1.0
        for v in values:
            g *= v
        return g ** (1.0 / len(values)) if values else float("nan")

    lines = []
    w = lines.append
    w("# Layer benchmark: Convolution and FullyConnected, forward + backward")
    w("")
    w("Generated by `scripts/bench/layers.sh` on %s; rerun it to refresh (it rewrites this file)." %
      datetime.datetime.now().strftime("%Y-%m-%d %H:%M"))
    w("")
    w("- Machine: %s, %d logical CPUs; load average at the start of each round: %s (other jobs shared "
      "the machine: read ratios, not absolute times)." %
      (cpu_model(), os.cpu_count() or 0, ", ".join("%.2f" % v for v in load)))
    w("- **ours**: `build/bin/mxbench` timing the registered operators' CPU kernels on a kernel pool of "
      "`OMP_NUM_THREADS=%d` threads: each thread takes its own images: Winograd F(4x4,3x3) / F(4x4,5x5) "
      "for 3x3 and 5x5 stride-1 layers with 4+ channels each side, direct implicit-GEMM AVX-512 kernels "
      "for strided layers where they win, else im2col + single-threaded OpenBLAS `cblas_sgemm`; "
      "fully-connected products split into blocks of the output. The SGEMM reference runs on OpenBLAS's "
      "own %d threads (the layer runs start with `OPENBLAS_NUM_THREADS=1`: OpenBLAS's idle workers would "
      "otherwise spin beside a short run), and every side starts %.1f s after the previous one ended, once the "
      "idle threads of the side before have stopped spinning." % (THREADS, THREADS, SETTLE_S))
    w("- **torch**: PyTorch %s (Debian python3-torch), `torch.set_num_threads(%d)`, `F.conv2d` / `F.linear` "
      "with autograd; convolutions run on oneDNN %s. **torch im2col**: the same with oneDNN turned off "
      "(`torch.backends.mkldnn.flags(enabled=False)`), i.e. PyTorch's own im2col + BLAS convolution on the "
      "same OpenBLAS." % (torch.__version__, THREADS, "(on)" if torch.backends.mkldnn.is_available() else
                          "(not built: off)"))
    w("- Each side times %d passes after %d warm-up passes, in %d rounds; the three sides run back to back "
      "layer by layer, rotating which goes first, so they see the same machine. The machine is shared and "
      "other jobs only ever slow a pass down, so the table uses each side's **best pass over all rounds** "
      "(the usual estimate of uncontended time); the median-based ratios (median over rounds of ours / "
      "theirs, each side's median pass per round) are given beside them and in the JSON output." %
      (a.runs, a.warmup, a.rounds))
    w("- A pass is forward, then backward writing every gradient (data, weight, bias). GFLOP counts "
      "2 flops per multiply-add, forward + both backward products (3x the forward).")
    w("- OpenBLAS SGEMM on this machine, %d threads, measured in each round: %s. \"%% of SGEMM\" is our "
      "best GFLOP/s over the best 1024x1024x1024 figure." % (THREADS, "; ".join(
          "%s: best %.1f, median %.1f GFLOP/s" % (k, max(v), med(v)) for k, v in sgemm.items())))
    w("- GEMM-bound: the layer's forward product (M x N x K, batch folded in) has every side >= 64.")
    w("- Ratios are ours / theirs: below 1.0 ours is faster.")
    w("")
    w("| net | layer | shape | GEMM M x N x K | GEMM-bound | ours ms | torch ms | ours / torch | torch im2col ms "
      "| ours / torch im2col | ours GFLOP/s | torch GFLOP/s | % of SGEMM | median ours / torch | median ours / "
      "torch im2col |")
    w("|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        w("| %s | %s | %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f | %.0f%% | %.2f | %.2f |" % (
            r["net"], r["layer"], r["shape"], r["gemm"], "yes" if r["gemm_bound"] else "no", r["ours_ms"],
            r["torch_ms"], r["ratio"], r["blas_ms"], r["ratio_blas"], r["gflops"], r["torch_gflops"],
            r["peak_pct"], r["median_ratio"], r["median_ratio_blas"]))
    w("")
    bound = [r for r in rows if r["gemm_bound"]]
    if bound:
        convs = [r for r in bound if r["op"] == "Convolution"]
        w("Summary over the %d GEMM-bound layers (best passes): ours / torch at or below 1.0 on %d, geometric "
          "mean %.2f (from medians: %.2f); ours / torch im2col at or below 1.0 on %d, geometric mean %.2f "
          "(from medians: %.2f). GEMM-bound convolutions at or above 70%% of SGEMM: %d of %d, geometric mean "
          "%.0f%%." % (
              len(bound), sum(r["ratio"] <= 1.0 for r in bound), geomean(r["ratio"] for r in bound),
              geomean(r["median_ratio"] for r in bound), sum(r["ratio_blas"] <= 1.0 for r in bound),
              geomean(r["ratio_blas"] for r in bound), geomean(r["median_ratio_blas"] for r in bound),
              sum(r["peak_pct"] >= 70 for r in convs), len(convs), geomean(r["peak_pct"] for r in convs)))
        w("")
    w("Forward / backward split (ms, medians):")
    w("")
    w("| net | layer | ours fwd | ours bwd | torch fwd | torch bwd |")
    w("|---|---|---:|---:|---:|---:|")
    for r in rows:
        w("| %s | %s | %.2f | %.2f | %.2f | %.2f |" % (r["net"], r["layer"], r["ours_fwd_ms"], r["ours_bwd_ms"],
                                                    r["torch_fwd_ms"], r["torch_bwd_ms"]))
    if a.notes and os.path.exists(a.notes):
        w("")
        with open(a.notes) as f:
            w(f.read().rstrip())
    text = "\n".join(lines) + "\n"
    if a.out:
        # Replace only this script's section: the other benchmark scripts
        # keep theirs in the same file between their own markers.
        begin, end = "<!-- BEGIN layer-benchmark (scripts/bench/layers.sh writes this section) -->", \
                     "<!-- END layer-benchmark -->"
        section = begin + "\n" + text + end + "\n"
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        old = open(a.out).read() if os.path.exists(a.out) else ""
        if begin in old and end in old:
            new = old[:old.index(begin)] + section + old[old.index(end) + len(end) + 1:]
        else:
            new = section + ("\n" + old if old else "")
        with open(a.out, "w") as f:
            f.write(new)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "sgemm": sgemm, "ours": ours, "torch": theirs, "torch_im2col": blas,
                       "load": load}, f, indent=1)
    print(text)


if __name__ == "__main__":
    main()
