#!/usr/bin/env bash
# mxnet-modelzoo.sh - mxpredict runs every MXNet 1.9.1 Gluon model zoo
# network as MXNet does.
#
# With MXNet 1.9.1, exports every model of mxnet.gluon.model_zoo.vision
# (random weights, random BatchNorm gamma/beta, moving statistics moved by
# one forward+backward under autograd.record(train_mode=True), the only way
# 1.9.1 updates them) and one HybridBlock of our own using relu, sigmoid,
# broadcast_mul, mean, expand_dims and LayerNorm; the output layer is scaled
# so that outputs are of order 1. MXNet's outputs on two random images per
# model (coloured blocks plus noise, ImageNet mean/std) are recorded. Then
# `mxpredict --layer OUTPUT --format raw` on the same PNG files must match
# them within 1e-4 * max(1, max|ref|) and agree on each image's top-1 class
# (unless MXNet's top two are closer than the tolerance). Inputs are as
# small as each model accepts (32x32; alexnet 64; densenet and squeezenet
# 224; inception-v3 299), batch 2. Every model runs; one line each with its
# max error; the failures are listed at the end, with the reason, and make
# the script exit 1.
#
# MXNet's exports and outputs are cached beside the venv under a hash of
# the export program below (about 3 GB; a new hash removes older copies):
# the first run spends about 10 minutes in MXNet, later ones well under a
# minute. Skipped loudly (exit 0) when MXNet cannot be imported.
#
# Environment: MX_INTEROP_VENV (venv), MX_INTEROP_BUILD (build folder with
# bin/mxpredict; default build), MX_INTEROP_MODELS (space-separated subset
# of model names, for debugging), MX_INTEROP_MODELZOO: `all` (default, what
# `make interop` runs) or `quick` (what `make test` and CI run: one network
# of each family that adds operators or layouts, plus our own block, about
# 1 minute to export and 0.2 GB: resnet18 v1 and v2, mobilenet v1 and v2,
# squeezenet 1.1 (Dropout), densenet121).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv=${MX_INTEROP_VENV:-$HOME/.cache/mxc/mxnet-venv}
py="$venv/bin/python"
build=${MX_INTEROP_BUILD:-build}
if ! [ -x "$py" ] || ! "$py" -c 'import mxnet' >/dev/null 2>&1; then
    echo "=================================================================="
    echo "INTEROP SKIPPED: mxnet==1.9.1 is not installed in $venv (run scripts/interop/mxnet-params.sh first)"
    echo "=================================================================="
    exit 0
fi
cd "$repo"
mode=${MX_INTEROP_MODELZOO:-all}
case "$mode" in
    all) selection= ;;
    quick) selection="resnet18_v1 resnet18_v2 mobilenet0.25 mobilenetv2_0.25 squeezenet1.1 densenet121 mine" ;;
    *) echo "mxnet-modelzoo.sh: MX_INTEROP_MODELZOO must be all or quick, not '$mode'" >&2; exit 2 ;;
esac
hash=$(sed -n '/^    "$py" - "$cache.tmp" "$selection" <<.PY.$/,/^PY$/p' "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)
cache_root=$(dirname "$venv")
cache="$cache_root/mxnet-modelzoo-$mode-$hash"
start=$(date +%s)

if ! [ -f "$cache/models.tsv" ]; then
    for old in "$cache_root"/mxnet-modelzoo-"$mode"-*; do
        [ -d "$old" ] && [ "$old" != "$cache" ] && rm -rf "$old"
    done
    rm -rf "$cache.tmp"
    mkdir -p "$cache.tmp"
    echo "interop: exporting the MXNet model zoo into $cache (first run only)"
    "$py" - "$cache.tmp" "$selection" <<'PY'
import struct, sys, traceback, zlib
import numpy as np, mxnet as mx
from mxnet import autograd, gluon
from mxnet.gluon import nn
from mxnet.gluon.model_zoo import vision

out = sys.argv[1]
MEAN = np.array([123.68, 116.779, 103.939], np.float32)
STD = np.array([58.4, 57.12, 57.38], np.float32)

class Mine(gluon.HybridBlock):
    """Operators Gluon users call directly, beyond the classic layers."""
    def __init__(self, **kw):
        super().__init__(**kw)
        with self.name_scope():
            self.conv = nn.Conv2D(16, 3, padding=1)
            self.ln = nn.LayerNorm()
            self.out = nn.Dense(10)

    def hybrid_forward(self, F, x):
        y = F.relu(self.conv(x))
        gate = F.sigmoid(F.mean(y, axis=(2, 3)))
        y = F.broadcast_mul(y, F.expand_dims(F.expand_dims(gate, axis=2), axis=3))
        return self.out(self.ln(F.mean(y, axis=1)))

def png(path, img):
    """An RGB PNG, written with zlib only."""
    h, w, _ = img.shape
    raw = b''.join(b'\0' + img[y].tobytes() for y in range(h))
    def chunk(kind, data):
        c = kind + data
        return struct.pack('>I', len(data)) + c + struct.pack('>I', zlib.crc32(c) & 0xffffffff)
    with open(path, 'wb') as f:
        f.write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0))
                + chunk(b'IDAT', zlib.compress(raw, 6)) + chunk(b'IEND', b''))

def images(size):
    """Two random images of size x size, as files and as the network input:
    4x4 blocks of random colours plus noise, so that they differ after
    global pooling (white noise alone averages out to the same features)."""
    rng = np.random.RandomState(size)
    side = (size + 3) // 4
    blocks = np.kron(rng.uniform(0, 255, (2, 4, 4, 3)), np.ones((1, side, side, 1)))[:, :size, :size]
    pix = np.clip(blocks + rng.normal(0, 25, blocks.shape), 0, 255).astype(np.uint8)
    paths = []
    for i in range(2):
        paths.append('img%d_%d.png' % (size, i))
        png(out + '/' + paths[-1], pix[i])
    x = (pix.astype(np.float32) - MEAN) * np.float32(1) / STD   # mxpredict's (pixel - mean) * scale / std
    return paths, x.transpose(0, 3, 1, 2).copy()

try:
    vision.get_model('?')
except ValueError as e:
    names = [n.strip() for n in str(e).split('\n')[1:] if n.strip()]
names.append('mine')
wanted = sys.argv[2].split()   # empty: every model
sizes = {'inceptionv3': 299, 'alexnet': 64}
lines = []
for k, name in enumerate(names):   # k (the seed) does not depend on the selection
    if wanted and name not in wanted:
        continue
    size = 224 if name.startswith(('densenet', 'squeezenet')) else sizes.get(name, 32)
    try:
        mx.random.seed(k)
        rng = np.random.RandomState(k)
        net = Mine(prefix='mine_') if name == 'mine' else vision.get_model(name)
        net.initialize(mx.init.Xavier(magnitude=2))
        paths, x = images(size)
        xb = mx.nd.array(x)
        with autograd.record(train_mode=True):   # deferred shapes, then BatchNorm's moving stats
            net(xb).backward()
        for pname, p in net.collect_params().items():
            if pname.endswith('_gamma'):
                p.set_data(mx.nd.array(rng.uniform(0.5, 1.5, p.shape)))
            elif pname.endswith('_beta'):
                p.set_data(mx.nd.array(rng.uniform(-0.3, 0.3, p.shape)))
        with autograd.record(train_mode=True):
            net(xb).backward()
        # A BatchNorm that backward skips (resnet v2's first, on the data,
        # has no parameters to learn) keeps 0 and 1: give it statistics.
        for pname, p in net.collect_params().items():
            d = p.data().asnumpy()
            if pname.endswith('running_mean') and not d.any():
                p.set_data(mx.nd.array(rng.uniform(-0.5, 0.5, p.shape)))
            elif pname.endswith('running_var') and (d == 1).all():
                p.set_data(mx.nd.array(rng.uniform(0.5, 2, p.shape)))
        net.hybridize()
        ref = net(xb).asnumpy()                  # predict mode, as exported
        # Outputs of order 1 (random weights give 1e-4 in squeezenet): scale
        # the output layer, the last weight and its bias, whose output is
        # positively homogeneous in them (a Dense; squeezenet's convolution
        # + relu + average pooling; mobilenet v2's convolution + flatten).
        params = list(net.collect_params().items())
        last = max(i for i, (n, _) in enumerate(params) if n.endswith('weight'))
        scaled = params[last:]
        assert all(n.endswith(('weight', 'bias')) for n, _ in scaled) and len(scaled) <= 2, scaled
        c = 3.0 / float(np.abs(ref).max())
        for _, p in scaled:
            p.set_data(p.data() * c)
        ref = net(xb).asnumpy()
        prefix = '%s/%s' % (out, name)
        net.export(prefix, epoch=0)
        np.save(prefix + '.ref.npy', ref)
        lines.append('%s|%d|%s|\n' % (name, size, ' '.join(paths)))
    except Exception as e:
        traceback.print_exc()
        lines.append('%s|%d||MXNet export failed: %s\n' % (name, size, str(e).splitlines()[0][:200]))
    print('interop: exported %s (%d/%d)' % (name, k + 1, len(names)), flush=True)
with open(out + '/models.tsv', 'w') as f:
    f.writelines(lines)
PY
    mv "$cache.tmp" "$cache"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/mxnet-zoo.XXXXXX")
trap 'rm -rf "$work"' EXIT
results="$work/results.tsv"
: >"$results"
while IFS='|' read -r name size imgs failure; do
    if [ -n "${MX_INTEROP_MODELS:-}" ] && ! [[ " $MX_INTEROP_MODELS " == *" $name "* ]]; then continue; fi
    if [ -n "$failure" ]; then
        printf '%s\t%s\n' "$name" "$failure" >>"$results"
        continue
    fi
    head=$("$py" -c 'import json, sys; j = json.load(open(sys.argv[1])); print(j["nodes"][j["heads"][0][0]]["name"])' \
        "$cache/$name-symbol.json")
    paths=()
    for img in $imgs; do paths+=("$cache/$img"); done
    if "$build/bin/mxpredict" --model "$cache/$name" --epoch 0 --data-shape "3,$size,$size" --batch-size 2 \
        --mean 123.68,116.779,103.939 --std 58.4,57.12,57.38 --layer "$head" --format raw \
        --output "$work/$name.raw" -q "${paths[@]}" 2>"$work/$name.err"; then
        printf '%s\t\n' "$name" >>"$results"
    else
        printf '%s\tmxpredict failed: %s\n' "$name" "$(tail -n 1 "$work/$name.err")" >>"$results"
    fi
done <"$cache/models.tsv"

"$py" - "$cache" "$work" "$results" "$start" <<'PY'
import sys, time
import numpy as np
cache, work, results, start = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
failed = []
n = 0
for line in open(results):
    name, failure = line.rstrip('\n').split('\t', 1)
    n += 1
    if failure:
        print('interop: %-18s FAILED: %s' % (name, failure))
        failed.append((name, failure))
        continue
    ref = np.load('%s/%s.ref.npy' % (cache, name))
    raw = open('%s/%s.raw' % (work, name), 'rb').read()
    header, _, body = raw.partition(b'\n')
    ours = np.frombuffer(body, '<f4')
    if ours.size != ref.size:
        why = 'output has %d values, MXNet %s (%s)' % (ours.size, ref.shape, header.decode(errors='replace'))
        print('interop: %-18s FAILED: %s' % (name, why))
        failed.append((name, why))
        continue
    ours = ours.reshape(ref.shape)
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(ours.astype(np.float64) - ref).max())
    tol = 1e-4 * scale
    why = []
    if not err <= tol:
        why.append('max error %.3g above %.3g' % (err, tol))
    for i in range(ref.shape[0]):
        a, b = int(ref[i].argmax()), int(ours[i].argmax())
        top2 = np.sort(ref[i].ravel())[-2:]
        if a != b and top2[1] - top2[0] > tol:   # a tie within the tolerance may go either way
            why.append('image %d: top-1 %d, MXNet %d' % (i, b, a))
    print('interop: %-18s max|ref| %6.3g  max error %.3g (%.2g of the tolerance)%s'
          % (name, float(np.abs(ref).max()), err, err / tol, '  FAILED: ' + '; '.join(why) if why else ''))
    if why:
        failed.append((name, '; '.join(why)))
took = time.time() - start
if failed:
    print('interop: %d of %d models FAILED (%.0f s):' % (len(failed), n, took))
    for name, why in failed:
        print('  %s: %s' % (name, why))
    sys.exit(1)
print('INTEROP PASSED: mxpredict matches MXNet 1.9.1 on all %d Gluon model zoo networks and our own block (%.0f s)'
      % (n, took))
PY
