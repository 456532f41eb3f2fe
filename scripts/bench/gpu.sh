#!/usr/bin/env bash
# gpu.sh - training-step throughput on one GPU, mxtrain beside PyTorch in
# one run (run on the lent GPU machine; scripts/gpu/run.sh calls it with
# MX_GPU_BENCH=1). For each net (LeNet, ResNet-20 at batch 64, ResNet-50 at
# the --r50-batch sizes) and each of --dtypes (fit.dtype: float32, and
# bfloat16 / float16 mixed precision): mxtrain with the net of configs/NET.conf on synthetic data
# (made once, as MXNet's --benchmark 1), fit.ctx=gpu:0, sgd momentum 0.9;
# its speed is the median of the Speed lines after the first window (the
# first holds cuDNN's algorithm search and the CUDA graphs' capture; LeNet
# and ResNet-20 run again with fit.cuda_graph=0: side "mxc-nograph"); the peak GPU memory is the most
# nvidia-smi saw in use during the run (the whole process, CUDA context
# included, so above what the program itself allocated). Then
# scripts/bench/torch_gpu.py on the same nets, batches, precisions (autocast
# with float32 weights, a GradScaler for float16), optimizer and card
# (eager mode; torch.compile too with --compile).
#   usage: gpu.sh [--bin DIR] [--batches N (ResNet-50's, default 40)] [--out DIR] [--compile]
#                 [--nets lenet,resnet-20,resnet-50] [--profile]
#                 [--dtypes float32,bfloat16] [--r50-batch 64 (e.g. 64,128,256)]
#   --profile: after each timed run, two more of the same net with
#   fit.profile over 4 batches from the middle: one as timed, one with
#   MX_GPU_SYNC_OPS=1 (each operation's duration is then its device time);
#   traces NET-trace-{async,sync}.json under --out, summarised by
#   profile_summary.py; PyTorch's side under torch.profiler likewise
#   (torch-NET-profile.txt).
#   Inference: after each net's training runs, mxpredict --benchmark 50 on
#   the checkpoint they wrote, batch 1 and 64 in each of --dtypes (side
#   "mxc", "mode": "predict"), and torch_gpu.py --predict beside it.
#   (MX_BENCH_CTX=cpu runs the mxtrain side on the CPU, to try the script
#   where there is no GPU)
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
bin=build/bin batches=40 out=${OUT:-/tmp} compile= nets=lenet,resnet-20,resnet-50 profile=0 dtypes=float32,bfloat16
r50_batch=64
while [ $# -gt 0 ]; do
    case "$1" in
    --bin) bin=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --compile) compile=--compile; shift ;;
    --nets) nets=$2; shift 2 ;;
    --profile) profile=1; shift ;;
    --dtypes) dtypes=$2; shift 2 ;;
    --r50-batch) r50_batch=$2; shift 2 ;;
    *) echo "gpu.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
log=$out/bench-gpu.log
: > "$log"
results=()
# net:sample shape:classes:batches:batch sizes
specs="lenet:1,28,28:10:200:64 resnet-20:3,32,32:10:100:64"
for b in ${r50_batch//,/ }; do specs="$specs resnet-50:3,224,224:1000:$batches:$b"; done
for spec in $specs; do
  IFS=: read -r net shape classes nb bs <<< "$spec"
  case ",$nets," in *",$net,"*) ;; *) continue ;; esac
  for dtype in ${dtypes//,/ }; do
    conf=$work/$net.conf
    awk '/^\[(train|val|optimizer|fit)\]/ { skip = 1 } /^\[/ && !/^\[(train|val|optimizer|fit)\]/ { skip = 0 } !skip' \
        "configs/$net.conf" > "$conf"
    cat >> "$conf" <<EOC
[train]
iter = synthetic
data_shape = $shape
num_classes = $classes
num_samples = $((nb * bs))
batch_size = $bs
[optimizer]
type = sgd
lr = 0.05
momentum = 0.9
wd = 0.0001
[fit]
num_epoch = 1
ctx = ${MX_BENCH_CTX:-gpu:0}
model_prefix = $work/$net
initializer = xavier(rnd_type=gaussian, factor_type=in, magnitude=2)
metric = acc
disp_batches = 10
dtype = $dtype
EOC
    # With CUDA graphs (fit.cuda_graph = 1, the default), and for the
    # launch-bound nets without, to show what the graphs gain.
    graphs=1
    [ "$net" = resnet-50 ] || [ "$dtype" != float32 ] || graphs="1 0"
    for graph in $graphs; do
        side=mxc
        [ "$graph" = 0 ] && side=mxc-nograph
        nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$work/mem.txt" 2>/dev/null &
        smi=$!
        start=$(date +%s%N)
        timeout 200 "$bin/mxtrain" "$conf" fit.cuda_graph=$graph > "$work/run.txt" 2>&1
        rc=$?
        ms=$(( ($(date +%s%N) - start) / 1000000 ))
        kill $smi 2>/dev/null; wait $smi 2>/dev/null
        { echo "=== mxtrain $net batch $bs $dtype fit.cuda_graph=$graph rc=$rc ${ms} ms"; cat "$work/run.txt"; } >> "$log"
        speed=$(mxtrain_speed "$work/run.txt")
        peak=$(sort -n "$work/mem.txt" | tail -1)
        results+=("$(printf '{"side": "%s", "net": "%s", "batch": %d, "dtype": "%s", "rc": %d, "images_per_sec": %s, "peak_mib_process": %s}' \
            "$side" "${net//-/}" "$bs" "$dtype" "$rc" "${speed:-0}" "${peak:-0}")")
    done
  done
    # Inference on the checkpoint the runs above wrote (float32 master weights).
    if [ "$bs" = 64 ] || [ "$net" != resnet-50 ]; then
        pctx=gpu\(0\)
        [ "${MX_BENCH_CTX:-gpu:0}" = cpu ] && pctx=cpu
        for dtype in ${dtypes//,/ }; do
        for pb in 1 64; do
            line=$(timeout 200 "$bin/mxpredict" --model "$work/$net" --epoch 1 --benchmark 50 --batch-size $pb \
                --data-shape "$shape" --ctx "$pctx" --dtype "$dtype" 2>> "$log" | grep 'benchmark:')
            echo "=== mxpredict $net batch $pb $dtype: $line" >> "$log"
            speed=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p')
            results+=("$(printf '{"side": "mxc", "mode": "predict", "net": "%s", "batch": %d, "dtype": "%s", "images_per_sec": %s}' \
                "${net//-/}" "$pb" "$dtype" "${speed:-0}")")
        done
        done
    fi
    if [ "$profile" = 1 ] && [ "$bs" = 64 ]; then
        first=$((nb / 2)) last=$((nb / 2 + 3))
        for mode in async sync; do
            trace=$out/$net-trace-$mode.json
            MX_GPU_SYNC_OPS=$([ $mode = sync ] && echo 1 || echo 0) timeout 200 "$bin/mxtrain" "$conf" \
                fit.profile="$trace" fit.profile_batches=$first-$last >> "$log" 2>&1
            python3 scripts/bench/profile_summary.py "$trace" 4 | tee -a "$log"
        done
    fi
done
printf '%s\n' "${results[@]}" | tee -a "$log"
# PyTorch one net per process, with nvidia-smi watching as for mxtrain, so
# both sides' peaks are the whole process's (PyTorch's own peak_mib counts
# only what its allocator handed out).
torch_specs="lenet:64 resnet20:64"
for b in ${r50_batch//,/ }; do torch_specs="$torch_specs resnet50:$b"; done
for spec in $torch_specs; do
  IFS=: read -r net bs <<< "$spec"
  case ",${nets//-/}," in *",$net,"*) ;; *) continue ;; esac
  for dtype in ${dtypes//,/ }; do
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$work/mem.txt" 2>/dev/null &
    smi=$!
    line=$(timeout 300 python3 scripts/bench/torch_gpu.py --nets $net --batch $bs --dtype $dtype --steps 50 $compile \
        $([ "$profile" = 1 ] && [ "$bs" = 64 ] && [ "$dtype" = float32 ] && echo "--profile $out") 2>> "$log" | tail -1)
    kill $smi 2>/dev/null; wait $smi 2>/dev/null
    peak=$(sort -n "$work/mem.txt" | tail -1)
    case "$line" in
    '{'*'}') echo "${line%\}}, \"peak_mib_process\": ${peak:-0}}" ;;
    *) echo "{\"side\": \"torch\", \"net\": \"$net\", \"batch\": $bs, \"dtype\": \"$dtype\", \"error\": \"torch_gpu.py failed (see $log)\"}" ;;
    esac | tee -a "$log"
    if [ "$bs" = 64 ]; then # inference at batch 1 and 64, as mxpredict --benchmark
        for pb in 1 64; do
            line=$(timeout 300 python3 scripts/bench/torch_gpu.py --nets $net --batch $pb --dtype $dtype --predict \
                --steps 50 $compile 2>> "$log" | tail -1)
            case "$line" in
            '{'*'}') echo "$line" ;;
            *) echo "{\"side\": \"torch\", \"mode\": \"predict\", \"net\": \"$net\", \"batch\": $pb, \"error\": \"torch_gpu.py failed (see $log)\"}" ;;
            esac | tee -a "$log"
        done
    fi
  done
done
