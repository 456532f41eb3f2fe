#!/usr/bin/env bash
# prepare.sh - run HERE (no GPU needed): builds the GPU suite with CUDA=1 and
# packs what the lent GPU machine lacks into .gpu-carry/carry.tar.xz (about
# 21 MB) and .gpu-carry/fashion (30 MB): the test binaries, mxtrain, mxpredict (debug info stripped,
# symbols kept) and every shared library they load that is not glibc or
# CUDA (OpenBLAS and its Fortran run-time, libstdc++, Check's subunit, ...),
# plus libcudart 13 so the run-time matches what nvcc built against.
# Then: device run `bash scripts/gpu/run.sh` with carry [".gpu-carry"].
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gpu}
tests=$(ls tests/test_gpu_*.c | sed "s|^tests/\(.*\)\.c$|$BUILD/tests/\1|")
make --no-print-directory BUILD="$BUILD" CUDA=1 "$BUILD/bin/mxtrain" "$BUILD/bin/mxpredict" $tests
stage=.gpu-carry/stage
rm -rf .gpu-carry && mkdir -p "$stage/bin" "$stage/lib"
for b in $tests "$BUILD/bin/mxtrain" "$BUILD/bin/mxpredict"; do
    strip --strip-debug -o "$stage/bin/$(basename "$b")" "$b"
done
# Libraries: everything ldd resolves outside glibc's core and CUDA's own.
for b in "$stage"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
    libc.so.* | libm.so.* | libdl.so.* | librt.so.* | libpthread.so.* | ld-linux* ) ;;
    libcudnn* | libcublas* | libnccl* ) ;;  # the machine has these (PyTorch's nvidia-* packages)
    *) strip --strip-unneeded -o "$stage/lib/$(basename "$lib")" "$(readlink -f "$lib")" ;;
    esac
done
# A Fashion-MNIST subset (3000 training, 1000 test images) for the
# training comparison of run.sh: LeNet on gpu:0 against the CPU.
mkdir -p "$stage/data"
python3 - "$stage/data" <<'PY'
import gzip, struct, sys
src, dst = "/usr/share/datasets/fashion-mnist", sys.argv[1]
for name, n in (("train", 3000), ("t10k", 1000)):
    with gzip.open(f"{src}/{name}-images-idx3-ubyte.gz") as f:
        magic, count, rows, cols = struct.unpack(">IIII", f.read(16))
        pixels = f.read(n * rows * cols)
    with gzip.open(f"{dst}/{name}-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">IIII", magic, n, rows, cols) + pixels)
    with gzip.open(f"{src}/{name}-labels-idx1-ubyte.gz") as f:
        magic, count = struct.unpack(">II", f.read(8))
        labels = f.read(n)
    with gzip.open(f"{dst}/{name}-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">II", magic, n) + labels)
PY
tar -C "$stage" -cJf .gpu-carry/carry.tar.xz .
# The whole Fashion-MNIST (30 MB, already gzip'd: outside the tarball) for
# run.sh's full LeNet training on the GPU (MX_GPU_LENET_FULL=1).
mkdir -p .gpu-carry/fashion
cp /usr/share/datasets/fashion-mnist/*.gz .gpu-carry/fashion/
rm -rf "$stage"
ls -la .gpu-carry/carry.tar.xz
echo "device: run command 'bash scripts/gpu/run.sh' with carry [\".gpu-carry\"]"
