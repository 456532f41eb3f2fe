#!/usr/bin/env bash
# train_nets.sh - whole-network training throughput and peak memory on the
# CPU, side by side in one run: mxtrain (ours) on configs/NET.conf with the
# synthetic iterator, MXNet 1.9.1 (oneDNN; the venv ~/.cache/mxc/mxnet-venv
# or $MX_INTEROP_VENV) training the very symbol mxtrain wrote
# (scripts/bench/mxnet_train_net.py), and PyTorch (Debian's python3-torch,
# scripts/bench/torch_train_net.py) where torchvision or torch_gpu.py has
# the same net. Every side: 2 threads (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS),
# float32, sgd momentum 0.9, wd 1e-4, random data made once, --warmup steps
# then --batches timed steps; peak RSS of the whole process from
# /usr/bin/time. Rounds alternate which side goes first. Writes the
# "Whole networks, training on the CPU" section of docs/benchmarks.md
# (between its markers) unless --no-write. --variants adds mxtrain runs
# with one setting changed, each its own columns: unfolded
# (MXNET_EXEC_ENABLE_FOLDING=0: operation folding off), mirror
# (MXNET_BACKWARD_DO_MIRROR=1: backward mirroring of the cheap layers),
# segments (MXNET_BACKWARD_DO_MIRROR=2: all but checkpoints); default all three, "none"
# for neither.
#   scripts/bench/train_nets.sh [--nets resnet-20,resnet-18,resnet-50,mobilenet-v2,inception-bn,vgg-16]
#       [--rounds R] [--batches N] [--warmup N] [--variants unfolded,mirror,segments|none] [--out FILE] [--work DIR]
#       [--no-write]
# A side that cannot run (no MXNet venv, no torch, no such torch net) is
# shown as "-" with the reason under the table.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh

nets=resnet-20,resnet-18,resnet-50,mobilenet-v2,inception-bn,vgg-16 rounds=1 batches=8 warmup=2 out=docs/benchmarks.md work= write=1
variants=unfolded,mirror,segments
while [ $# -gt 0 ]; do
    case "$1" in
    --nets) nets=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --no-write) write=0; shift ;;
    *) echo "train_nets.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[ "$variants" = none ] && variants=
for v in ${variants//,/ }; do
    case $v in unfolded|mirror|segments) ;; *) echo "train_nets.sh: unknown variant '$v' (unfolded, mirror, segments or none)" >&2; exit 2 ;; esac
done
if [ -z "$work" ]; then
    work=$(mktemp -d /tmp/train-nets.XXXXXX)
    trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"
# A CPU-only build, as the other sides' (MXNet's pip wheel, Debian's
# PyTorch): a CUDA build maps and initialises cuBLAS, cuDNN and cudart
# before main (about 150-220 MiB of RSS even for fit.ctx = cpu).
make -s BUILD=build-cpu CUDA=0 build-cpu/bin/mxtrain >&2
mxtrain=build-cpu/bin/mxtrain
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2
venv=${MX_INTEROP_VENV:-$HOME/.cache/mxc/mxnet-venv}
have_mxnet=0 have_torch=0
"$venv/bin/python" -c 'import mxnet' 2>/dev/null && have_mxnet=1
/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null && have_torch=1
notes=()
[ $have_mxnet = 1 ] || notes+=("MXNet: not importable from $venv (scripts/interop/mxnet-params.sh installs it)")
[ $have_torch = 1 ] || notes+=("PyTorch: /usr/bin/python3 cannot import torch and torchvision (apt-get install python3-torch python3-torchvision)")

# spec: net:sample shape:classes:batch (the batch sizes of the issue)
specs=(resnet-20:3,32,32:10:64 resnet-18:3,224,224:1000:16 resnet-50:3,224,224:1000:16 mobilenet-v2:3,224,224:1000:16 inception-bn:3,224,224:1000:16 vgg-16:3,224,224:1000:8)
results=$work/results.tsv
: > "$results"

# Runs one side under /usr/bin/time; appends "net side round samples/s rss_kib".
run_side() {
    local net=$1 side=$2 round=$3 log=$work/$1.$2.$3.log
    shift 3
    if ! /usr/bin/time -f "RSS_KIB %M" -o "$log.rss" "$@" > "$log" 2>&1; then
        echo "$side on $net failed (round $round): $(tail -1 "$log")" >&2
        printf '%s\t%s\t%s\t-\t-\n' "$net" "$side" "$round" >> "$results"
        return
    fi
    local speed rss
    if [ "$side" != mxnet ] && [ "$side" != torch ]; then
        speed=$(mxtrain_speed "$log")
    else
        speed=$(grep -o '"samples_per_sec": [0-9.]*' "$log" | awk '{print $2}' | tail -1)
    fi
    rss=$(awk '/RSS_KIB/ {print $2}' "$log.rss")
    printf '%s\t%s\t%s\t%s\t%s\n' "$net" "$side" "$round" "${speed:--}" "${rss:--}" >> "$results"
    echo "$net $side round $round: ${speed:--} samples/s, peak RSS ${rss:--} KiB" >&2
}

for spec in "${specs[@]}"; do
    IFS=: read -r net shape classes batch <<< "$spec"
    case ",$nets," in *",$net,"*) ;; *) continue ;; esac
    conf=$work/$net.conf
    awk '/^\[(train|val|optimizer|fit)\]/ { skip = 1 } /^\[/ && !/^\[(train|val|optimizer|fit)\]/ { skip = 0 } !skip' \
        "configs/$net.conf" > "$conf"
    # mxtrain's Speed lines cover disp_batches each; the first holds the warm-up.
    disp=$(( batches / 2 > 0 ? batches / 2 : 1 ))
    cat >> "$conf" <<EOC
[train]
iter = synthetic
data_shape = $shape
num_classes = $classes
num_samples = $(( (warmup + batches) * batch ))
batch_size = $batch
[optimizer]
type = sgd
lr = 0.05
momentum = 0.9
wd = 0.0001
[fit]
num_epoch = 1
ctx = cpu
model_prefix = $work/$net
initializer = xavier(rnd_type=gaussian, factor_type=in, magnitude=2)
metric = acc
disp_batches = $disp
EOC
    for round in $(seq "$rounds"); do
        order="mxc ${variants//,/ } mxnet torch"
        [ $((round % 2)) = 0 ] && order="torch mxnet ${variants//,/ } mxc"
        for side in $order; do
            case $side in
            mxc) run_side "$net" mxc "$round" "$mxtrain" "$conf" ;;
            unfolded) run_side "$net" unfolded "$round" env MXNET_EXEC_ENABLE_FOLDING=0 "$mxtrain" "$conf" ;;
            mirror) run_side "$net" mirror "$round" env MXNET_BACKWARD_DO_MIRROR=1 "$mxtrain" "$conf" ;;
            segments) run_side "$net" segments "$round" env MXNET_BACKWARD_DO_MIRROR=2 "$mxtrain" "$conf" ;;
            mxnet)
                [ $have_mxnet = 1 ] || continue
                [ -f "$work/$net-symbol.json" ] || "$mxtrain" "$conf" fit.num_epoch=1 > /dev/null 2>&1 || true
                run_side "$net" mxnet "$round" "$venv/bin/python" scripts/bench/mxnet_train_net.py \
                    --symbol "$work/$net-symbol.json" --shape "$shape" --classes "$classes" --batch "$batch" \
                    --batches "$batches" --warmup "$warmup" ;;
            torch)
                [ $have_torch = 1 ] || continue
                case $net in inception-bn) continue ;; esac # no PyTorch twin of MXNet's Inception-BN here
                run_side "$net" torch "$round" /usr/bin/python3 scripts/bench/torch_train_net.py --net "$net" \
                    --batch "$batch" --batches "$batches" --warmup "$warmup" ;;
            esac
        done
    done
done

# Best throughput over the rounds (other jobs only slow a run down), the
# smallest peak RSS.
table=$(python3 - "$results" "$nets" "$variants" <<'PY'
import collections, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
best = collections.defaultdict(lambda: [None, None])
for net, side, _, speed, rss in rows:
    b = best[(net, side)]
    if speed != "-":
        b[0] = max(b[0] or 0, float(speed))
    if rss != "-":
        b[1] = min(b[1] or 1e18, int(rss) / 1024)
batch = {"resnet-20": 64, "resnet-18": 16, "resnet-50": 16, "mobilenet-v2": 16, "inception-bn": 16, "vgg-16": 8}
def f(v, fmt):
    return fmt % v if v is not None else "-"
def ratio(a, b):
    return "%.2f" % (a / b) if a and b else "-"
variants = [v for v in sys.argv[3].split(",") if v]
head = {"unfolded": "unfolded", "mirror": "mirror", "segments": "segments"}
extra_head = "".join(f" mxc {head[v]} samples/s | {head[v]} peak RSS (MiB) |" for v in variants)
print("| net | batch | mxc samples/s | MXNet | PyTorch | mxc / MXNet | mxc / PyTorch | mxc peak RSS (MiB) | MXNet | PyTorch |"
      + extra_head)
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|---:|" * len(variants))
for net in sys.argv[2].split(","):
    m, x, t = best[(net, "mxc")], best[(net, "mxnet")], best[(net, "torch")]
    extra = "".join(f" {f(best[(net, v)][0], '%.2f')} | {f(best[(net, v)][1], '%.0f')} |" for v in variants)
    print(f"| {net} | {batch.get(net, '?')} | {f(m[0], '%.2f')} | {f(x[0], '%.2f')} | {f(t[0], '%.2f')} | "
          f"{ratio(m[0], x[0])} | {ratio(m[0], t[0])} | {f(m[1], '%.0f')} | {f(x[1], '%.0f')} | {f(t[1], '%.0f')} |"
          + extra)
PY
)
echo "$table"
[ "$write" = 1 ] || exit 0
machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) logical CPUs"
torch_version=$(/usr/bin/python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '-')
variants_line=
[ -n "$variants" ] && variants_line="- Variants (mxtrain with one setting changed): ${variants//,/, } (unfolded: \`MXNET_EXEC_ENABLE_FOLDING=0\`, mirror: \`MXNET_BACKWARD_DO_MIRROR=1\`, segments: \`MXNET_BACKWARD_DO_MIRROR=2\`)."
section=$(cat <<EOS
<!-- BEGIN train-nets (scripts/bench/train_nets.sh writes this section) -->
## Whole networks, training on the CPU

Generated by \`scripts/bench/train_nets.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC') (it rewrites only this section).

- Machine: $machine, shared with other jobs (1-minute load average at the end: $(cut -d' ' -f1 /proc/loadavg)).
- Every side: 2 threads, float32, sgd momentum 0.9 and wd 1e-4, random data made once, $warmup warm-up steps then $batches timed steps, best of $rounds round(s) (sides alternate order). mxc: \`mxtrain configs/NET.conf\` (a CPU-only build, \`make BUILD=build-cpu CUDA=0\`: a CUDA build holds 150-220 MiB more RSS from cuBLAS, cuDNN and cudart) with the synthetic iterator (median Speed window after the first). MXNet 1.9.1 (pip, oneDNN): the symbol mxtrain saved, trained with the Module API (forward_backward + update). PyTorch $torch_version (Debian): torch_gpu.py's ResNet-20, torchvision's resnet18 (the same net) and resnet50 (v1.5: stride 2 in the 3x3 rather than the first 1x1 convolution of each downsampling block, about 5% more multiply-adds than configs/resnet-50.conf's v1), vgg16 and mobilenet_v2; no PyTorch twin of Inception-BN.
- Peak RSS: the whole process (/usr/bin/time), smallest over the rounds.
$variants_line

$table
$(for n in "${notes[@]}"; do echo "- $n"; done)

Reproduce: \`scripts/bench/train_nets.sh\` (options: \`--nets\`, \`--rounds R\`, \`--batches N\`, \`--variants\`, \`--work DIR\` keeps the logs).
<!-- END train-nets -->
EOS
)
python3 - "$out" "$section" <<'PY'
import sys
path, section = sys.argv[1], sys.argv[2]
text = open(path).read()
begin = text.find("<!-- BEGIN train-nets")
end = text.find("<!-- END train-nets -->")
if begin >= 0 and end >= 0:
    text = text[:begin] + section + text[end + len("<!-- END train-nets -->"):]
else:
    text = text.rstrip("\n") + "\n\n" + section + "\n"
open(path, "w").write(text)
PY
echo "train_nets.sh: wrote the section to $out" >&2
