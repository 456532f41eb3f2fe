# lib.sh - helpers the benchmark scripts source.

# mxtrain_speed LOG: the median of mxtrain's "Speed: N samples/sec" lines
# after the first (the first window holds the warm-up); empty when none.
mxtrain_speed() {
    grep -o 'Speed: [0-9.]*' "$1" | awk 'NR > 1 {print $2}' | sort -n |
        awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'
}
