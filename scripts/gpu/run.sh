#!/usr/bin/env bash
# run.sh - run ON THE LENT GPU MACHINE (see README.md here): unpacks what
# prepare.sh packed, finds cuDNN and cuBLAS there, runs every GPU suite,
# then compute-sanitizer (memcheck, racecheck) on them, and leaves the logs
# under $OUT (env.txt, suite.log, train.log, sanitizer.log). The last lines printed
# are a table: suite, result, seconds.
#   MX_GPU_SANITIZE=0  skips the sanitizer; MX_GPU_TIMEOUT (s, default 150)
#   bounds each suite; MX_GPU_LENET_FULL=1 trains configs/lenet.conf whole
#   on gpu:0 and predicts the test set on gpu(0) and the CPU (lenet-full.log);
#   MX_GPU_BENCH=1 runs scripts/bench/gpu.sh (bench-gpu.log), with
#   MX_GPU_BENCH_PROFILE=1 its per-operation profiles too (gpu.sh --profile);
#   MX_GPU_SAN_TOOLS (default "memcheck racecheck") and MX_GPU_SAN_SUITES
#   (default: every test_gpu_* suite, e.g. "test_gpu_bn") narrow the sanitizer.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/mxc-gpu-out}
mkdir -p "$OUT"
top=/tmp/mxc-gpu
rm -rf "$top" && mkdir -p "$top"
tar -C "$top" -xJf .gpu-carry/carry.tar.xz || { echo "run.sh: no .gpu-carry/carry.tar.xz (run prepare.sh here, carry .gpu-carry)"; exit 2; }
libdir() { find /usr/local/cuda/ /usr/local/cuda*/ /opt /usr/lib /usr/local/lib -name "$1" 2>/dev/null | head -1 | xargs -r dirname; }
cudnn=$(libdir 'libcudnn.so.9')
cublas=$(libdir 'libcublas.so.13')
nccl=$(libdir 'libnccl.so.2') # loaded by the device store (test_gpu_kvstore), not linked
export LD_LIBRARY_PATH="$top/lib:${cudnn}:${cublas}${nccl:+:$nccl}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
{
    date -u; uname -a; head -2 /etc/os-release; ldd --version | head -1
    nvidia-smi; nvcc --version 2>&1 | tail -2
    echo "cuDNN: $cudnn"; echo "cuBLAS: $cublas"; echo "NCCL: ${nccl:-not found}"; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    which compute-sanitizer ncu 2>&1
    for b in "$top"/bin/*; do ldd "$b" | grep -E "not found|cudnn|cublas|cudart" | sed "s|^|$(basename "$b"): |"; done
} > "$OUT/env.txt" 2>&1
grep -E "not found|cuDNN:|cuBLAS:|NCCL:|NVIDIA H|Driver" "$OUT/env.txt"

table=()
: > "$OUT/suite.log"
for t in "$top"/bin/test_gpu_*; do
    name=$(basename "$t")
    start=$(date +%s)
    timeout "${MX_GPU_TIMEOUT:-150}" "$t" > "$OUT/$name.tmp" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    { echo "=== $name rc=$rc ${secs}s"; cat "$OUT/$name.tmp"; } >> "$OUT/suite.log"
    grep -E "GPU |Checks:|:F:|:E:" "$OUT/$name.tmp" | head -20
    rm -f "$OUT/$name.tmp"
    table+=("$(printf '%-24s %-6s %4ss' "$name" "$([ $rc = 0 ] && echo pass || echo "FAIL($rc)")" "$secs")")
done

# LeNet (configs/lenet.conf) on a Fashion-MNIST subset, 2 epochs, on gpu:0
# (float32, then float16 and bfloat16 mixed precision) and on the CPU from
# the same seed: the metrics must agree closely.
: > "$OUT/train.log"
d=$top/data
for run in gpu:0/float32 gpu:0/float16 gpu:0/bfloat16 cpu/float32; do
    ctx=${run%/*} dtype=${run#*/}
    start=$(date +%s%N)
    timeout 200 "$top/bin/mxtrain" configs/lenet.conf fit.ctx=$ctx fit.dtype=$dtype fit.num_epoch=2 fit.disp_batches=20 \
        fit.model_prefix=/tmp/mxc-gpu/lenet-${ctx%%:*}-$dtype train.image=$d/train-images-idx3-ubyte.gz \
        train.label=$d/train-labels-idx1-ubyte.gz val.image=$d/t10k-images-idx3-ubyte.gz \
        val.label=$d/t10k-labels-idx1-ubyte.gz > "$OUT/train.tmp" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    { echo "=== mxtrain lenet fit.ctx=$ctx fit.dtype=$dtype rc=$rc ${ms} ms"; cat "$OUT/train.tmp"; } >> "$OUT/train.log"
    grep -iE "epoch\[1\].*(validation|train)|loss scale|error|fail" "$OUT/train.tmp" | tail -5 | sed "s|^|$run: |"
    table+=("$(printf '%-24s %-6s %4ss' "mxtrain lenet $run" "$([ $rc = 0 ] && echo pass || echo "FAIL($rc)")" "$(( ms / 1000 ))")")
done
rm -f "$OUT/train.tmp"
# PyTorch's LeNet on the same GPU, same net, batch and optimizer (speed).
if [ "${MX_GPU_TORCH:-1}" != 0 ]; then
    timeout 120 python3 scripts/bench/torch_lenet.py --device cuda --threads 16 --data-dir "$d" --batches 400 \
        --warmup 40 --window 100 >> "$OUT/train.log" 2>&1
    echo "torch: $(tail -1 "$OUT/train.log" | grep -o '"samples_per_sec": [0-9.]*')"
    awk '/^=== mxtrain/ {ctx=$4 " " $5} /Epoch\[1\] Batch.*Speed/ {print "mxtrain " ctx ": " $0}' "$OUT/train.log"
fi

# The whole configs/lenet.conf (10 epochs of Fashion-MNIST) on gpu:0, then
# mxpredict on the test set on gpu(0) and on the CPU: accuracy, agreement.
if [ "${MX_GPU_LENET_FULL:-0}" != 0 ] && [ -d .gpu-carry/fashion ]; then
    f=$PWD/.gpu-carry/fashion
    start=$(date +%s%N)
    timeout 300 "$top/bin/mxtrain" configs/lenet.conf fit.ctx=gpu:0 fit.model_prefix=/tmp/mxc-gpu/full/lenet \
        train.image=$f/train-images-idx3-ubyte.gz train.label=$f/train-labels-idx1-ubyte.gz \
        val.image=$f/t10k-images-idx3-ubyte.gz val.label=$f/t10k-labels-idx1-ubyte.gz > "$OUT/lenet-full.log" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    grep -E "Epoch\[9\] (Validation|Train)-accuracy|Time cost" "$OUT/lenet-full.log" | tail -3 | sed 's|^|lenet full gpu:0: |'
    table+=("$(printf '%-24s %-6s %4ss' "lenet full gpu:0" "$([ $rc = 0 ] && echo pass || echo "FAIL($rc)")" "$(( ms / 1000 ))")")
    for c in 'gpu(0)' cpu; do
        "$top/bin/mxpredict" --model /tmp/mxc-gpu/full/lenet --ctx "$c" "$f/t10k-images-idx3-ubyte.gz" \
            > "/tmp/mxc-gpu/pred-${c%%(*}.csv" 2>> "$OUT/lenet-full.log"
        echo "mxpredict --ctx $c rc=$?"
    done
    python3 - "$f/t10k-labels-idx1-ubyte.gz" /tmp/mxc-gpu/pred-gpu.csv /tmp/mxc-gpu/pred-cpu.csv <<'PY'
import csv, gzip, sys
labels = gzip.open(sys.argv[1]).read()[8:]
g = list(csv.DictReader(open(sys.argv[2])))
c = list(csv.DictReader(open(sys.argv[3])))
acc = sum(int(r["top1"]) == labels[int(r["id"])] for r in g) / max(len(g), 1)
agree = sum(a["top1"] == b["top1"] for a, b in zip(g, c))
worst = max((abs(float(a["prob1"]) - float(b["prob1"])) for a, b in zip(g, c)), default=0)
print(f"mxpredict gpu(0): {len(g)} images, accuracy {acc:.4f}; top-1 equal to the CPU's on {agree} of {len(c)}, "
      f"largest top-1 probability difference {worst:.2g}")
PY
fi

if [ "${MX_GPU_BENCH:-0}" != 0 ]; then
    bash scripts/bench/gpu.sh --bin "$top/bin" --out "$OUT" --batches "${MX_GPU_BENCH_BATCHES:-40}" \
        $([ "${MX_GPU_BENCH_PROFILE:-0}" != 0 ] && echo --profile) | sed 's|^|bench: |'
fi

if [ "${MX_GPU_SANITIZE:-1}" != 0 ] && command -v compute-sanitizer >/dev/null; then
    : > "$OUT/sanitizer.log"
    for tool in ${MX_GPU_SAN_TOOLS:-memcheck racecheck}; do
        for t in "$top"/bin/test_gpu_*; do
            name=$(basename "$t")
            case " ${MX_GPU_SAN_SUITES:-$name} " in *" $name "*) ;; *) continue ;; esac
            start=$(date +%s)
            CK_FORK=no timeout "${MX_GPU_SAN_TIMEOUT:-60}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
                "$t" > "$OUT/san.tmp" 2>&1
            rc=$?
            secs=$(( $(date +%s) - start ))
            { echo "=== $tool $name rc=$rc ${secs}s"; tail -40 "$OUT/san.tmp"; } >> "$OUT/sanitizer.log"
            grep -E "ERROR SUMMARY|Checks:" "$OUT/san.tmp" | tail -2 | sed "s|^|$tool $name: |"
            table+=("$(printf '%-24s %-6s %4ss' "$tool:$name" "$([ $rc = 0 ] && echo clean || echo "FAIL($rc)")" "$secs")")
        done
    done
    rm -f "$OUT/san.tmp"
fi
echo "---- GPU check summary"
printf '%s\n' "${table[@]}"
