#!/usr/bin/env python3
"""profile_summary.py - where the time of a training step goes, from the
Chrome trace mxtrain writes with fit.profile (lib/profile/profile.h).

Events are grouped by operator type and direction ("conv1 (Convolution) fwd"
counts under "Convolution fwd"; copies and the kvstore's operations under
their own names without the layer). Prints, per group, the summed duration
per batch, its share of all summed durations, the count per batch and the
mean duration. With MX_GPU_SYNC_OPS=1 each GPU operation waits for its
kernels, so its duration is the device's time (plus one synchronisation).

    usage: profile_summary.py TRACE.json BATCHES [--top N]
"""
import argparse
import json
import re
from collections import defaultdict


def group_name(name):
    m = re.match(r"^(.*?) \(([^)]+)\)\s*(.*)$", name)
    if m:
        return f"{m.group(2)} {m.group(3)}".strip()
    # no operator: strip numbers (keys, layer indices) so alike operations group
    return re.sub(r"\d+", "N", name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("batches", type=int)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    events = [e for e in json.load(open(a.trace))["traceEvents"] if e.get("ph") == "X"]
    if not events:
        raise SystemExit(f"{a.trace}: no events")
    total = defaultdict(float)
    count = defaultdict(int)
    cats = defaultdict(float)
    for e in events:
        g = group_name(e["name"])
        total[g] += e["dur"]
        count[g] += 1
        cats[e.get("cat", "?")] += e["dur"]
    span = max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)
    summed = sum(total.values())
    b = max(a.batches, 1)
    print(f"{a.trace}: {len(events)} events over {span / 1000:.1f} ms ({span / 1000 / b:.2f} ms per batch); "
          f"summed durations {summed / 1000 / b:.2f} ms per batch; by category: "
          + ", ".join(f"{c} {v / 1000 / b:.2f}" for c, v in sorted(cats.items(), key=lambda kv: -kv[1])))
    print(f"{'operation':40s} {'ms/batch':>9s} {'share':>6s} {'n/batch':>8s} {'mean us':>9s}")
    for g, t in sorted(total.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"{g[:40]:40s} {t / 1000 / b:9.3f} {100 * t / summed:5.1f}% {count[g] / b:8.1f} {t / count[g]:9.1f}")


if __name__ == "__main__":
    main()
