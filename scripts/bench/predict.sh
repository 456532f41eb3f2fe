#!/usr/bin/env bash
# predict.sh - prediction throughput on the CPU (2 threads each side):
#  part torch: mxpredict against PyTorch inference, LeNet on Fashion-MNIST
#    and ResNet-20 on 32x32 colour images ("Prediction throughput" section);
#  part mxnet: mxpredict beside MXNet 1.9.1 (oneDNN; the venv
#    ~/.cache/mxc/mxnet-venv, or $MX_INTEROP_VENV) on ResNet-50 v1,
#    MobileNet v1/v2 and DenseNet-121 from its Gluon model zoo at batch 1
#    and 16 (scripts/bench/mxnet_predict.py; "Prediction beside MXNet"
#    section; skipped loudly when MXNet cannot be imported).
# Each part rewrites only its section of docs/benchmarks.md.
#   scripts/bench/predict.sh [--part torch|mxnet|all] [--rounds R] [--images N] [--lenet-images N] [--batch B]
#                            [--out FILE] [--work DIR]
# (defaults: all, 6 rounds (3 for mxnet), 1024 ResNet-20 images, 5120 LeNet images, batch 64)
# Steps: build mxpredict, mxtrain and im2rec; install Debian's python3-torch
# when /usr/bin/python3 cannot import torch; make the data
# (torch_predict.py prepare); train the two checkpoints with mxtrain (one
# epoch each, on the CPU); pack the 32x32 images with im2rec (JPEG); then
# time both sides (torch_predict.py bench).
set -euo pipefail
cd "$(dirname "$0")/../.."

part=all rounds= images=1024 lenet_images=5120 batch=64 out=docs/benchmarks.md work= train_rows=512
while [ $# -gt 0 ]; do
    case "$1" in
        --part) part=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --images) images=$2; shift 2 ;;
        --lenet-images) lenet_images=$2; shift 2 ;;
        --batch) batch=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) echo "predict.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$part" in torch|mxnet|all) ;; *) echo "predict.sh: --part must be torch, mxnet or all, not '$part'" >&2; exit 2 ;; esac

if [ -z "$work" ]; then
    work=$(mktemp -d /tmp/mxpredict-bench.XXXXXX)
    trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"
export OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2

if [ "$part" != torch ]; then
    venv=${MX_INTEROP_VENV:-$HOME/.cache/mxc/mxnet-venv}
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import mxnet' >/dev/null 2>&1; then
        make --no-print-directory build/bin/mxpredict >&2
        "$venv/bin/python" scripts/bench/mxnet_predict.py --work "$work/mxnet" --mxpredict build/bin/mxpredict \
            --rounds "${rounds:-3}" --out "$out"
    else
        echo "predict.sh: SKIPPED the MXNet part: mxnet is not importable from $venv (scripts/interop/mxnet-params.sh installs it)" >&2
    fi
fi
[ "$part" = mxnet ] && exit 0
rounds=${rounds:-6}

if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "predict.sh: installing python3-torch (Debian)" >&2
    if [ "$(id -u)" -eq 0 ]; then SUDO=; else SUDO=sudo; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-torch >/dev/null
fi
/usr/bin/python3 -c 'import PIL, numpy' 2>/dev/null || {
    echo "predict.sh: /usr/bin/python3 needs PIL and numpy (python3-pil, python3-numpy)" >&2; exit 1; }

make --no-print-directory build/bin/mxpredict build/bin/mxtrain build/bin/im2rec >&2

py=/usr/bin/python3

$py scripts/bench/torch_predict.py prepare --work "$work" --images "$images" --lenet-images "$lenet_images" --train "$train_rows"

# LeNet: one epoch on a sixth of Fashion-MNIST.
if [ ! -f "$work/lenet-0001.params" ]; then
    build/bin/mxtrain configs/lenet.conf train.num_parts=6 val.num_parts=10 fit.num_epoch=1 \
        fit.disp_batches=1000 fit.model_prefix="$work/lenet" >&2
fi

# ResNet-20: the shipped network, its [train] replaced by the CSV rows.
if [ ! -f "$work/resnet20-0001.params" ]; then
    sed '/^\[train\]/,$d' configs/resnet-20.conf > "$work/resnet20.conf"
    cat >> "$work/resnet20.conf" <<EOF
[train]
iter       = csv
data_csv   = $work/r20-data.csv
label_csv  = $work/r20-label.csv
data_shape = 3,32,32
batch_size = 64

[optimizer]
type     = sgd
lr       = 0.05
momentum = 0.9
wd       = 0.0001

[fit]
num_epoch    = 1
ctx          = cpu
model_prefix = $work/resnet20
disp_batches = 1000
EOF
    build/bin/mxtrain "$work/resnet20.conf" >&2
fi

# The 32x32 images as a .rec of JPEGs (quality 95), in list order.
if [ ! -f "$work/rec32.rec" ] || [ "$(wc -l < "$work/rec32.lst")" -ne "$images" ]; then
    rm -f "$work/rec32.lst" "$work/rec32.rec" "$work/rec32.idx"
    build/bin/im2rec --list --recursive --no-shuffle "$work/rec32" "$work/img32" >/dev/null
    build/bin/im2rec --num-thread 2 --quality 95 "$work/rec32" "$work/img32" >&2
fi

$py scripts/bench/torch_predict.py bench --work "$work" --rounds "$rounds" --batch "$batch" \
    --train-rows "$train_rows" --out "$out"
