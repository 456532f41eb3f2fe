#!/usr/bin/env bash
# graph_scale.sh - how graph building scales with depth: a chain of N
# FullyConnected layers (num_hidden = 2) through the config compiler,
# symbol, executor planning and binding, timed per tool:
#   dry-run   mxtrain X.conf --dry-run   (compile, shapes, both memory plans)
#   viz       mxviz X.conf               (compile, shapes, dot)
#   train     mxtrain X.conf             (bind, one batch, save a checkpoint)
#   predict   mxpredict --model PREFIX   (2N+1 variable symbol JSON, .params,
#                                          bind, one batch)
#   scripts/bench/graph_scale.sh [--layers "5000 20000 100000"] [--max-seconds S]
# Fails (exit 1) when a step takes longer than S seconds (default 60: the
# work is linear, a quadratic step takes minutes at 100,000 layers). Wall
# times on a shared machine are noisy: compare the growth, not the numbers.
set -euo pipefail
cd "$(dirname "$0")/../.."

layers="5000 20000 100000"
max=60
while [ $# -gt 0 ]; do
    case "$1" in
        --layers) layers="$2"; shift 2 ;;
        --max-seconds) max="$2"; shift 2 ;;
        *) echo "usage: $0 [--layers \"N ...\"] [--max-seconds S]" >&2; exit 2 ;;
    esac
done

make --no-print-directory build/bin/mxtrain build/bin/mxviz build/bin/mxpredict >&2
work=$(mktemp -d /tmp/graph-scale-XXXXXX)
trap 'rm -rf "$work"' EXIT

# One 1x2 "image" of an idx3 file for mxpredict (4 samples).
printf '\x00\x00\x08\x03\x00\x00\x00\x04\x00\x00\x00\x01\x00\x00\x00\x02\x01\x02\x03\x04\x05\x06\x07\x08' >"$work/in.idx"

chain() { # N PREFIX
    awk -v n="$1" -v prefix="$2" 'BEGIN {
        print "[net]\ninputs = data"
        for (i = 0; i < n; i++) printf "[layer fc%d]\nop = FullyConnected\nnum_hidden = 2\n", i
        print "[layer softmax]\nop = SoftmaxOutput"
        print "[train]\niter = synthetic\ndata_shape = 1,1,2\nnum_classes = 2\nnum_samples = 4\nbatch_size = 4"
        printf "[fit]\nnum_epoch = 1\nctx = cpu\ninitializer = uniform(scale=0.5)\nmodel_prefix = %s\n", prefix
    }'
}

failed=0
timed() { # LABEL CMD...
    local label="$1"; shift
    local t0 t1
    t0=$(date +%s.%N)
    if ! "$@" >"$work/out.txt" 2>"$work/err.txt"; then
        echo "graph_scale.sh: $label failed:" >&2
        tail -3 "$work/err.txt" >&2
        failed=1
        printf ' %9s' fail
        return
    fi
    t1=$(date +%s.%N)
    local s
    s=$(echo "$t1 - $t0" | bc)
    printf ' %8.2fs' "$s"
    if [ "$(echo "$s > $max" | bc)" = 1 ]; then
        echo >&2
        echo "graph_scale.sh: $label took ${s}s (over --max-seconds $max)" >&2
        failed=1
    fi
}

printf '%8s %9s %9s %9s %9s\n' layers dry-run viz train predict
for n in $layers; do
    conf="$work/chain$n.conf"
    chain "$n" "$work/m$n/net" >"$conf"
    mkdir -p "$work/m$n"
    printf '%8s' "$n"
    timed "$n layers: mxtrain --dry-run" build/bin/mxtrain "$conf" --dry-run
    timed "$n layers: mxviz" build/bin/mxviz "$conf"
    timed "$n layers: mxtrain" build/bin/mxtrain "$conf"
    timed "$n layers: mxpredict" build/bin/mxpredict --model "$work/m$n/net" "$work/in.idx"
    printf '\n'
    rm -rf "$work/m$n" "$conf"
done
exit $failed
