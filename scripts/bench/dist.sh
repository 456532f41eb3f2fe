#!/usr/bin/env bash
# dist.sh - distributed training on one machine, side by side in one run
# (issue 14, item 8), written to the "Distributed training" section of
# docs/benchmarks.md (between its markers; the rest is left alone):
#  (a) dist_sync's communication per step (the MPI thread's collectives in
#      mxtrain's timeline, fit.profile) for LeNet's and ResNet-20's
#      gradients, against a bare MPI_Allreduce of the same bytes
#      (scripts/bench/allreduce.c, built here with mpicc); goal: within 10%;
#      and the fraction of that communication hidden behind computation;
#      and lib/comm's allreduce alone (scripts/bench/comm_allreduce.c, no
#      training beside it) against the same bare MPI_Allreduce;
#  (b) LeNet samples/s, 2 ranks of 1 thread (dist_sync) against 1 process of
#      2 threads over the same global samples; goal: at least 0.9;
#  (c) MXNet 1.9.1's own dist_sync and dist_async (ps-lite: a scheduler, a
#      server and 2 workers on 127.0.0.1, started with the DMLC_* variables
#      as its tools/launch.py --launcher local does; 1 thread a worker),
#      beside ours (dist_async: run when this build has it, else
#      "skipped: dist_async not in this build"); goal: at least 3x.
#   scripts/bench/dist.sh [--parts N] [--mxnet-batches N] [--profile-batches A-B]
#       [--resnet-batches N] [--reps N] [--rounds N] [--out FILE] [--work DIR]
#       [--no-write]
# (b) and (c) run --rounds times (default 3), the runs of a round one after
# the other, and each figure is the median over the rounds (their range
# beside it): one short run swings by 10-20% on a shared machine.
# Both ranks of (b) read the same 1/N of the training set (train.num_parts=N,
# part_index 0: only speed is measured); the single process reads 2/N, so
# both sides train the same number of samples. The machine is shared: the
# load average is noted beside the figures.
set -euo pipefail
cd "$(dirname "$0")/../.."

parts=10 mx_batches=150 prof_batches=20-59 resnet_batches=30 reps=50 rounds=3
out=docs/benchmarks.md work= write=1
while [ $# -gt 0 ]; do
    case "$1" in
        --parts) parts=$2; shift 2 ;;
        --mxnet-batches) mx_batches=$2; shift 2 ;;
        --profile-batches) prof_batches=$2; shift 2 ;;
        --resnet-batches) resnet_batches=$2; shift 2 ;;
        --reps) reps=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        --no-write) write=0; shift ;;
        -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
        *) echo "dist.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

if [ -z "$work" ]; then
    work=$(mktemp -d /tmp/bench-dist.XXXXXX)
    trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"
make --no-print-directory CUDA=0 build/bin/mxtrain build/libmx.a >&2
mpicc -O2 -o "$work/allreduce" scripts/bench/allreduce.c
mpicc -O2 -std=c11 -D_GNU_SOURCE -Ilib -o "$work/comm_allreduce" scripts/bench/comm_allreduce.c build/libmx.a \
    $(pkg-config --libs openblas libturbojpeg inih libpng zlib) -lm -pthread

mpirun=(mpirun --oversubscribe --mca btl self,vader)
[ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
bin=build/bin/mxtrain
lenet=(configs/lenet.conf fit.num_epoch=1 fit.model_prefix= fit.disp_batches=20 val.num_parts=50)
mxpy=${MXNET_PYTHON:-$HOME/.cache/mxc/mxnet-venv/bin/python}

# ResNet-20's net on synthetic CIFAR-shaped data (no CIFAR-10 here): only
# the gradients' bytes and the compute between them matter. Each of the 2
# ranks reads half: resnet_batches batches of 32.
awk '/^\[train\]/ { exit } { print }' configs/resnet-20.conf > "$work/resnet20.conf"
cat >> "$work/resnet20.conf" <<EOF
[train]
iter = synthetic
data_shape = 3, 32, 32
num_classes = 10
num_samples = $((resnet_batches * 32 * 2))
batch_size = 32
[optimizer]
type = sgd
lr = 0.1
momentum = 0.9
wd = 0.0001
[fit]
num_epoch = 1
disp_batches = 10
EOF

load() { cut -d' ' -f1 /proc/loadavg; }
loads=()

# (a) the timeline of 2 ranks: LeNet, then ResNet-20.
echo "dist.sh: (a) LeNet, 2 ranks, dist_sync, profiled batches $prof_batches" >&2
loads+=("$(load)")
"${mpirun[@]}" -np 2 $bin "${lenet[@]}" train.num_parts=$parts fit.kvstore=dist_sync \
    fit.profile="$work/lenet.json" fit.profile_batches=$prof_batches > "$work/lenet-prof.log" 2>&1
echo "dist.sh: (a) ResNet-20, 2 ranks, dist_sync" >&2
loads+=("$(load)")
"${mpirun[@]}" -np 2 $bin "$work/resnet20.conf" fit.kvstore=dist_sync \
    fit.profile="$work/resnet20.json" fit.profile_batches=5-$((resnet_batches / 2 - 1)) > "$work/resnet20-prof.log" 2>&1
# Per step, from both ranks' files (one clock on one host): the gradient
# collectives' time on each rank (start to completion, the wait for the
# other rank included), and from the moment both ranks had started each
# collective to its completion (the transfer alone); means over the ranks.
/usr/bin/python3 - "$work" <<'EOF' > "$work/steps.txt"
import json, sys
work = sys.argv[1]
for net in ("lenet", "resnet20"):
    ranks = []
    for r in (0, 1):
        ev = [e for e in json.load(open(f"{work}/{net}.rank{r}.json"))["traceEvents"] if e["ph"] == "X"]
        steps = sum(1 for e in ev if e["name"] == "softmax (SoftmaxOutput) bwd")
        grads = sorted((e for e in ev if e["cat"] == "comm" and e["name"].startswith("allreduce of key")),
                       key=lambda e: e["ts"])
        ranks.append((steps, grads))
    steps, grads = ranks[0]
    n = min(len(ranks[0][1]), len(ranks[1][1]))
    total = sum(sum(e["dur"] for e in g) for _, g in ranks) / 2
    alone = 0.0
    for i in range(n):
        both = max(ranks[0][1][i]["ts"], ranks[1][1][i]["ts"])
        alone += sum(max(0.0, g[i]["ts"] + g[i]["dur"] - both) for _, g in ranks) / 2
    per_step_bytes = sum(e["args"]["bytes"] for e in grads) // max(1, steps)
    print(net, steps, len(grads) // max(1, steps), per_step_bytes, "%.4f" % (total / 1e3 / max(1, steps)),
          "%.4f" % (alone / 1e3 / max(1, steps)))
EOF
while read -r net steps calls bytes ms alone; do
    "${mpirun[@]}" -np 2 "$work/allreduce" "$bytes" "$reps" > "$work/bare-$net.txt" < /dev/null
    "${mpirun[@]}" -np 2 "$work/comm_allreduce" "$bytes" "$reps" > "$work/comm-$net.txt" < /dev/null
done < "$work/steps.txt"

# (b) and (c), --rounds times: LeNet as 1 process of 2 threads, 2 ranks of
# 1 thread (dist_sync, dist_async), then MXNet 1.9.1's ps-lite on loopback.
mxnet_run() { # kvstore round -> $work/mxnet-KV-w{0,1}.rROUND.txt
    local kv=$1 r=$2 port=$((9000 + RANDOM % 1000)) pids=()
    export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$port DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2 \
        DMLC_NODE_HOST=127.0.0.1 OMP_NUM_THREADS=1 MXNET_CPU_WORKER_NTHREADS=1
    DMLC_ROLE=scheduler timeout 600 "$mxpy" -c 'import mxnet' > "$work/mxnet-$kv-sched.r$r.txt" 2>&1 & pids+=($!)
    DMLC_ROLE=server timeout 600 "$mxpy" -c 'import mxnet' > "$work/mxnet-$kv-server.r$r.txt" 2>&1 & pids+=($!)
    for w in 0 1; do
        DMLC_ROLE=worker timeout 600 "$mxpy" scripts/bench/mxnet_dist_lenet.py --kvstore "$kv" \
            --batches "$mx_batches" > "$work/mxnet-$kv-w$w.r$r.txt" 2>&1 & pids+=($!)
    done
    wait "${pids[2]}" "${pids[3]}" || true
    for p in "${pids[0]}" "${pids[1]}"; do kill "$p" 2>/dev/null || true; done
    wait || true
    unset DMLC_PS_ROOT_URI DMLC_PS_ROOT_PORT DMLC_NUM_SERVER DMLC_NUM_WORKER DMLC_NODE_HOST OMP_NUM_THREADS \
        MXNET_CPU_WORKER_NTHREADS
}
mx_note= async_note=
if ! { [ -x "$mxpy" ] && "$mxpy" -c 'import mxnet' 2>/dev/null; }; then
    mx_note="MXNet 1.9.1 not found at $mxpy (set MXNET_PYTHON)"
fi
for r in $(seq 1 "$rounds"); do
    echo "dist.sh: (b) round $r of $rounds: LeNet, 1 process x 2 threads and 2 ranks x 1 thread" >&2
    loads+=("$(load)")
    OMP_NUM_THREADS=2 MXNET_CPU_WORKER_NTHREADS=2 $bin "${lenet[@]}" train.num_parts=$((parts / 2)) \
        > "$work/one.r$r.log" 2>&1
    loads+=("$(load)")
    "${mpirun[@]}" -np 2 $bin "${lenet[@]}" train.num_parts=$parts fit.kvstore=dist_sync > "$work/two.r$r.log" 2>&1
    if [ -z "$async_note" ]; then
        loads+=("$(load)")
        if "${mpirun[@]}" -np 2 $bin "${lenet[@]}" train.num_parts=$parts fit.kvstore=dist_async \
            > "$work/two-async.r$r.log" 2>&1; then
            :
        elif grep -q "not in this build" "$work/two-async.r$r.log"; then
            async_note="skipped: dist_async not in this build"
            echo "dist.sh: $async_note" >&2
        else
            echo "dist.sh: mxtrain dist_async failed:" >&2; tail -5 "$work/two-async.r$r.log" >&2; exit 1
        fi
    fi
    if [ -z "$mx_note" ]; then
        for kv in dist_sync dist_async; do
            echo "dist.sh: (c) round $r of $rounds: MXNet 1.9.1 $kv, 2 workers + 1 server on 127.0.0.1" >&2
            loads+=("$(load)")
            mxnet_run $kv $r
        done
    fi
done

/usr/bin/python3 - "$work" "$out" "$write" "$parts" "$prof_batches" "$mx_batches" "$reps" "$async_note" "$mx_note" \
    "${loads[*]}" "$rounds" <<'EOF'
import os, re, statistics, subprocess, sys, time
work, out, write, parts, prof_batches, mx_batches, reps, async_note, mx_note, loads, rounds = sys.argv[1:12]
parts, rounds = int(parts), int(rounds)

def speeds(path):
    """mean samples/s of the Speed: lines after the first (warm-up)"""
    v = [float(m) for m in re.findall(r"Speed: ([0-9.]+) samples/sec", open(path).read())]
    return sum(v[1:]) / len(v[1:]) if len(v) > 1 else (v[0] if v else 0.0)

def overlap(path):
    m = re.search(r"hidden behind computation: ([0-9.]+) of ([0-9.]+) ms(.*)", open(path).read())
    return (float(m.group(1)), m.group(3).strip()) if m else (None, "")

def mxnet(kv, r):
    tot = 0.0
    for w in (0, 1):
        p = f"{work}/mxnet-{kv}-w{w}.r{r}.txt"
        m = re.search(r"samples_per_sec ([0-9.]+)", open(p).read()) if os.path.exists(p) else None
        if not m:
            return None
        tot += float(m.group(1))
    return tot

def over_rounds(values):
    """(median, "lo-hi") of the rounds' figures; None when any round failed"""
    if not values or any(v is None for v in values):
        return None, ""
    return statistics.median(values), f"{min(values):.0f}-{max(values):.0f}"

def cell(fig):
    m, spread = fig
    return f"{m:.0f} ({spread})" if rounds > 1 else f"{m:.0f}"

cpu = "?"
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
ncpu = os.cpu_count()
rows = []
w = rows.append
w("<!-- BEGIN distributed-training (scripts/bench/dist.sh writes this section) -->")
w("## Distributed training (mpirun, dist_sync)")
w("")
w(f"Generated by `scripts/bench/dist.sh` on {time.strftime('%Y-%m-%d %H:%M')}; rerun it to refresh this section.")
w("")
w(f"- Machine: {cpu}, {ncpu} logical CPUs, **shared with other jobs while this ran** (1-minute load average "
  f"before each run: {', '.join(loads.split())}). (a) is one run; (b) and (c) give the median of {rounds} rounds "
  "(each round runs every configuration once, one after the other) with the rounds' range in brackets. A loaded "
  "machine slows the 2-rank runs most (a rank that falls behind makes the other wait inside the collective).")
w("- All ranks on this one host, Open MPI over shared memory (`--mca btl self,vader`). Each rank of 2 takes 1 kernel "
  "thread and 1 engine worker (its share of the cores); the single process takes 2 of each.")
w("")
w("### (a) Communication per step against a bare MPI_Allreduce")
w("")
w(f"From rank 0's timeline (`fit.profile`, batches {prof_batches} for LeNet): the MPI thread's gradient "
  "collectives (`allreduce of key(s) ...`, from the start of the collective to its completion) per training step, "
  f"against `scripts/bench/allreduce.c` summing the same bytes in one `MPI_Allreduce` (mean of {reps} calls, 2 ranks). "
  "\"ours ms per step\" includes the time a rank waits for the other to reach the collective (their compute differs "
  "on a loaded machine), which the bare loop does not have; \"from both ranks in\" counts each collective from the "
  "moment both ranks had started it (both files share one clock) to its completion, and is what the goal compares. "
  "\"lib/comm alone\" is `scripts/bench/comm_allreduce.c`: the same bytes through lib/comm's MPI thread in one "
  "request per call, with no training beside it (what our layer adds to MPI, apart from sharing the cores).")
w("")
w("| net | steps profiled | collectives per step | bytes per step | ours ms per step | ours ms, from both ranks in | bare MPI_Allreduce ms | ours (both in) / bare | goal | lib/comm alone ms | lib/comm alone / bare | communication hidden behind computation |")
w("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|")
for line in open(f"{work}/steps.txt"):
    net, steps, calls, nbytes, ms, alone = line.split()
    bare = float(re.search(r"allreduce_ms ([0-9.]+)", open(f"{work}/bare-{net}.txt").read()).group(1))
    lone = re.search(r"comm_allreduce_ms ([0-9.]+)", open(f"{work}/comm-{net}.txt").read())
    lone = float(lone.group(1)) if lone else float("nan")
    f, per_rank = overlap(f"{work}/{net}-prof.log")
    name = {"lenet": "LeNet", "resnet20": "ResNet-20"}[net]
    ratio = float(alone) / bare if bare > 0 else float("nan")
    hidden = f"{f:.3f} {per_rank}" if f is not None else "?"
    w(f"| {name} | {steps} | {calls} | {int(nbytes)} | {float(ms):.3f} | {float(alone):.3f} | {bare:.3f} | {ratio:.2f} | <= 1.10 | {lone:.3f} | {lone / bare if bare > 0 else float('nan'):.2f} | {hidden} |")
w("")
R = range(1, rounds + 1)
one = over_rounds([speeds(f"{work}/one.r{r}.log") for r in R])
two = over_rounds([speeds(f"{work}/two.r{r}.log") * 2 for r in R])
w("### (b) LeNet: 2 ranks of 1 thread against 1 process of 2 threads")
w("")
w(f"`mxtrain configs/lenet.conf` one epoch; 1 process: `train.num_parts={parts // 2}` with `OMP_NUM_THREADS=2 "
  f"MXNET_CPU_WORKER_NTHREADS=2`; 2 ranks: `mpirun -np 2 ... fit.kvstore=dist_sync train.num_parts={parts}` "
  "(each rank its 1/N; the same global samples). samples/s: mean of the `Speed:` lines after the first; rank 0 "
  "logs its own samples, so the job's figure is 2x that.")
w("")
w("| run | samples/s | ratio to 1 process (medians) | goal |")
w("|---|---:|---:|---|")
w(f"| 1 process x 2 threads | {cell(one)} | 1.00 | |")
w(f"| 2 ranks x 1 thread, dist_sync | {cell(two)} | {two[0] / one[0] if one[0] else 0:.2f} | >= 0.9 |")
two_async = (None, "")
if not async_note:
    two_async = over_rounds([speeds(f"{work}/two-async.r{r}.log") * 2 for r in R])
    w(f"| 2 ranks x 1 thread, dist_async | {cell(two_async)} | {two_async[0] / one[0] if one[0] else 0:.2f} | |")
else:
    w(f"| 2 ranks x 1 thread, dist_async | {async_note} | | |")
w("")
w("### (c) Beside MXNet 1.9.1's distributed kvstore")
w("")
if mx_note:
    w(f"Skipped: {mx_note}.")
else:
    w(f"MXNet 1.9.1 (PyPI wheel, MKLDNN): `scripts/bench/mxnet_dist_lenet.py`, the same LeNet, batch 64 a worker, "
      f"SGD momentum 0.9, 2 workers of 1 thread (`OMP_NUM_THREADS=1 MXNET_CPU_WORKER_NTHREADS=1`) each on its half "
      f"of Fashion-MNIST held in memory (NDArrayIter), plus 1 server and the scheduler on 127.0.0.1; {mx_batches} "
      "batches a worker, the first 20 untimed; samples/s summed over the workers.")
    w("")
    w("| kvstore | ours samples/s | MXNet samples/s | ours / MXNet (medians) | goal |")
    w("|---|---:|---:|---:|---|")
    for kv, ours in (("dist_sync", two), ("dist_async", two_async)):
        m = over_rounds([mxnet(kv, r) for r in R])
        o = cell(ours) if ours[0] is not None else async_note
        ratio = f"{ours[0] / m[0]:.2f}" if ours[0] is not None and m[0] else ""
        w(f"| {kv} | {o} | {cell(m) if m[0] else 'failed (see the logs)'} | {ratio} | >= 3 |")
w("")
w("<!-- END distributed-training -->")
text = "\n".join(rows) + "\n"
print(text)
if write == "1":
    old = open(out).read() if os.path.exists(out) else ""
    B, E = "<!-- BEGIN distributed-training", "<!-- END distributed-training -->"
    if B in old and E in old:
        head, rest = old.split(B, 1)
        tail = rest.split(E, 1)[1]
        new = head + text.rstrip("\n") + tail
    else:
        new = old.rstrip("\n") + "\n\n" + text
    open(out, "w").write(new)
    print(f"dist.sh: wrote {out}", file=sys.stderr)
EOF
