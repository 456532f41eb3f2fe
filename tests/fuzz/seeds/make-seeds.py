#!/usr/bin/env python3
"""Regenerates the generated part of the fuzz seed corpora (tests/fuzz/corpus/)
with the real MXNet 1.9.1 and OpenCV (the mxnet venv: ~/.cache/mxc/mxnet-venv),
so that seeds are files MXNet itself writes. The rest of the corpora are copies
of configs/ and /work/shared/fixtures/mxnet/ (docs/fuzzing.md).
Usage: ~/.cache/mxc/mxnet-venv/bin/python tests/fuzz/seeds/make-seeds.py"""
import gzip, os, struct
import numpy as np
import mxnet as mx
import cv2

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'corpus')
def out(h, name, data):
    d = os.path.join(root, h); os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f: f.write(data)
def read(p):
    with open(p, 'rb') as f: return f.read()

tmp = '/tmp/mx-fuzz-seeds'; os.makedirs(tmp, exist_ok=True)

# .params: named and unnamed lists, every dtype, 0-d and 3-d shapes.
rs = np.random.RandomState(0)
named = {'arg:w': mx.nd.array(rs.randn(2, 3), dtype='float32'),
         'arg:b': mx.nd.array([1, 2], dtype='float64'),
         'aux:m': mx.nd.array(rs.randn(2, 1, 2), dtype='float16')}
mx.nd.save(tmp + '/a.params', named); out('params', 'named-mixed.params', read(tmp + '/a.params'))
lst = [mx.nd.array([1, 2, 3], dtype=t) for t in ('uint8', 'int8', 'int32', 'int64')]
mx.nd.save(tmp + '/b.params', lst); out('params', 'unnamed-ints.params', read(tmp + '/b.params'))
mx.nd.save(tmp + '/c.params', {}); out('params', 'empty.params', read(tmp + '/c.params'))

# symbol JSON: a small net touching several ops and attributes.
data = mx.sym.var('data')
c = mx.sym.Convolution(data, kernel=(3, 3), num_filter=4, pad=(1, 1), name='conv')
b = mx.sym.BatchNorm(c, name='bn')
a = mx.sym.Activation(b, act_type='relu', name='relu')
p = mx.sym.Pooling(a, kernel=(2, 2), stride=(2, 2), pool_type='max', name='pool')
s = mx.sym.SliceChannel(p, num_outputs=2, name='split')
cc = mx.sym.Concat(s[0], s[1], name='concat')
f = mx.sym.FullyConnected(mx.sym.Flatten(cc), num_hidden=3, name='fc')
net = mx.sym.SoftmaxOutput(f, name='softmax')
out('symbol_json', 'conv-bn-split.json', net.tojson().encode())
out('json', 'conv-bn-split.json', net.tojson().encode())
out('json', 'scalars.json', b'{"a": [1, -2.5e-3, true, false, null, "s\\u00e9\\n\\"x"], "b": {}}')

# RecordIO: records with aligned magic words (escaped into parts), an empty
# record, and its .idx from MXIndexedRecordIO.
magic = struct.pack('<I', 0xCED7230A)
recs = [b'hello', b'', magic + b'abcd' + magic, b'x' * 37, magic * 3]
w = mx.recordio.MXIndexedRecordIO(tmp + '/r.idx', tmp + '/r.rec', 'w')
for i, r in enumerate(recs): w.write_idx(i * 3 - 2, r)
w.close()
out('recordio', 'escaped-parts.rec', read(tmp + '/r.rec'))
out('idx', 'mxnet.idx', read(tmp + '/r.idx'))
out('idx', 'hand-edited.idx', b'+007\t0\r\n\n -3 \t 16\r5\t000008')
# recordio_roundtrip input: u16 length + bytes per record.
out('recordio_roundtrip', 'records', b''.join(struct.pack('<H', len(r)) + r for r in recs))

# Images: PNG gray / RGB / RGBA / 16-bit, JPEG colour / gray (OpenCV writes
# them; OpenCV is BGR but the bytes are ordinary files either way).
img = (rs.rand(5, 7, 3) * 255).astype(np.uint8)
enc = lambda ext, im, *p: cv2.imencode(ext, im, list(p))[1].tobytes()
images = {
    'rgb.png': enc('.png', img), 'gray.png': enc('.png', img[:, :, 0]),
    'rgba.png': enc('.png', np.dstack([img, img[:, :, :1]])),
    'gray16.png': enc('.png', (img[:, :, 0].astype(np.uint16) * 257)),
    'color.jpg': enc('.jpg', img, cv2.IMWRITE_JPEG_QUALITY, 90),
    'gray.jpg': enc('.jpg', img[:, :, 0]),
    'progressive.jpg': enc('.jpg', img, cv2.IMWRITE_JPEG_PROGRESSIVE, 1),
}
for i, (name, d) in enumerate(sorted(images.items())):
    out('image', name, bytes([i % 8]) + d)  # first byte: mode and orientation options

# Image records (IRHeader + labels + image), as im2rec packs them.
h0 = mx.recordio.IRHeader(0, 3.0, 7, 0)
out('imrec', 'one-label-png', mx.recordio.pack(h0, images['gray.png']))
h2 = mx.recordio.IRHeader(0, [1.5, -2.0, 0.25], 8, 0)
out('imrec', 'three-labels-jpg', mx.recordio.pack(h2, images['color.jpg']))
sample = read('/work/shared/fixtures/mxnet/dmlc-core/sample.rec')
out('imrec', 'dmlc-sample-1', sample[8:8 + 44])  # record 1 of dmlc-core's sample.rec

# .lst lines as im2rec.py write_list writes them, plus odd but valid lines.
out('lst', 'im2rec.lst', b'0\t1.000000\ta/b.jpg\n1\t0.000000\t2.500000\tc d.png\n')
out('lst', 'odd.lst', b' 12 \t -1e3 \t nan\t inf \t x.jpg \r\n-5\t+3\tp\rbad line\n7\t1\t\t\n')
# lst_format input: int64 index, label count byte, doubles, path bytes.
out('lst_format', 'entry', struct.pack('<qB', 42, 1) + struct.pack('<dd', 0.5, -3.25) + b'dir/img.jpg')
out('lst_format', 'big', struct.pack('<qB', -1, 0) + struct.pack('<d', 1e20) + b'x')

# MNIST: [u16 split][options byte][idx3 images][idx1 labels], raw and gzip'd.
def idx3(n, r, c): return struct.pack('>IIII', 0x803, n, r, c) + bytes((i * 7) % 256 for i in range(n * r * c))
def idx1(n): return struct.pack('>II', 0x801, n) + bytes(i % 10 for i in range(n))
for name, opt, im, lb in (('raw', 0, idx3(3, 2, 3), idx1(3)),
                          ('gzip-flat-parts', 0x11, gzip.compress(idx3(4, 3, 2), mtime=0), gzip.compress(idx1(4), mtime=0))):
    out('mnist', name, struct.pack('<HB', len(im), opt) + im + lb)
print('seeds written under', os.path.normpath(root))
