#!/usr/bin/env bash
# The libFuzzer harnesses (tests/fuzz/, docs/fuzzing.md), driven by make:
#   fuzz.sh toolchain CC        fail loudly unless CC builds libFuzzer + ASan programs
#   fuzz.sh run DIR SECONDS     fuzz each harness in DIR for SECONDS (make fuzz)
#   fuzz.sh replay DIR [SECS]   replay the kept corpora and every reproducer, then
#                               fuzz each harness briefly (make fuzz-replay, CI)
# FUZZ_ONLY="config json" restricts run/replay to those harnesses; FUZZ_ARGS
# adds libFuzzer options to run (e.g. -max_len=4096).
# A crash, leak, sanitizer report or broken round trip fails the command;
# `run` leaves the input in build-fuzz/artifacts/NAME/ (copy it into
# tests/fuzz/reproducers/NAME/ once fixed, so CI replays it for ever).
set -uo pipefail
cd "$(dirname "$0")/.."

FUZZ_DIR=tests/fuzz
# Per input: 10 s and 2 GiB at most (a hang or a huge allocation is a bug).
COMMON=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1)
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

die() { echo "fuzz: $*" >&2; exit 1; }

harnesses() {
  local dir=$1 b name
  for b in "$dir"/fuzz_*; do
    [ -x "$b" ] || continue
    name=${b##*/fuzz_}
    if [ -n "${FUZZ_ONLY:-}" ] && [[ " $FUZZ_ONLY " != *" $name "* ]]; then continue; fi
    echo "$name"
  done
}

dict_args() {
  local name=$1
  if [ -f "$FUZZ_DIR/dict/$name.dict" ]; then echo "-dict=$FUZZ_DIR/dict/$name.dict"; fi
}

case "${1:-}" in
toolchain)
  cc=${2:-clang}
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' > "$tmp/t.c"
  if ! command -v "$cc" >/dev/null 2>&1 ||
     ! "$cc" -fsanitize=fuzzer,address,undefined "$tmp/t.c" -o "$tmp/t" >"$tmp/log" 2>&1; then
    echo "==================================================================" >&2
    echo "fuzz: '$cc' cannot build libFuzzer programs (-fsanitize=fuzzer)." >&2
    echo "fuzz: the fuzz targets need clang with libFuzzer from Debian's" >&2
    echo "fuzz: packages: apt-get install clang libclang-rt-dev (make deps)." >&2
    [ -s "$tmp/log" ] && sed 's/^/fuzz:   /' "$tmp/log" | head -5 >&2
    echo "==================================================================" >&2
    exit 1
  fi
  ;;
run)
  dir=${2:?build dir}; secs=${3:-60}
  failed=()
  for name in $(harnesses "$dir"); do
    work=build-fuzz/corpus/$name art=build-fuzz/artifacts/$name/
    mkdir -p "$work" "$art" "$FUZZ_DIR/corpus/$name"
    echo "== fuzz_$name for ${secs}s"
    # New inputs go to the scratch corpus (first directory), not into git.
    if ! "$dir/fuzz_$name" "${COMMON[@]}" $(dict_args "$name") ${FUZZ_ARGS:-} -max_total_time="$secs" \
         -artifact_prefix="$art" "$work" "$FUZZ_DIR/corpus/$name" 2>"build-fuzz/fuzz_$name.log"; then
      tail -40 "build-fuzz/fuzz_$name.log" >&2
      failed+=("$name")
    fi
    grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "build-fuzz/fuzz_$name.log" || true
  done
  if [ ${#failed[@]} -ne 0 ]; then
    die "FAILED: ${failed[*]} (inputs in build-fuzz/artifacts/, logs in build-fuzz/fuzz_NAME.log)"
  fi
  echo "fuzz: every harness ran ${secs}s without a finding"
  ;;
replay)
  dir=${2:?build dir}; secs=${3:-${FUZZ_REPLAY_SECONDS:-3}}
  failed=()
  for name in $(harnesses "$dir"); do
    inputs=()
    for d in "$FUZZ_DIR/corpus/$name" "$FUZZ_DIR/reproducers/$name"; do
      [ -d "$d" ] && inputs+=("$d")
    done
    scratch=$(mktemp -d); mkdir -p "build-fuzz/artifacts/$name"
    log=$scratch/log
    # -runs=0: execute every kept input once, then stop.
    if [ ${#inputs[@]} -gt 0 ] &&
       ! "$dir/fuzz_$name" "${COMMON[@]}" -runs=0 "${inputs[@]}" >"$log" 2>&1; then
      echo "== fuzz_$name: a kept input fails" >&2
      tail -40 "$log" >&2
      failed+=("$name")
    # A brief run from the kept corpus; new inputs go to the scratch dir.
    elif ! "$dir/fuzz_$name" "${COMMON[@]}" $(dict_args "$name") -max_total_time="$secs" \
           -artifact_prefix="build-fuzz/artifacts/$name/" "$scratch" "${inputs[@]}" >"$log" 2>&1; then
      echo "== fuzz_$name: the brief run found a crash" >&2
      tail -40 "$log" >&2
      echo "fuzz: the input is in build-fuzz/artifacts/$name/" >&2
      failed+=("$name")
    else
      echo "fuzz_$name: replayed ${#inputs[@]} dirs, $(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$') executions"
    fi
    rm -rf "$scratch"
  done
  if [ ${#failed[@]} -ne 0 ]; then die "FAILED: ${failed[*]}"; fi
  echo "fuzz-replay: every kept input and brief run passed"
  ;;
*)
  die "usage: fuzz.sh toolchain CC | run DIR SECONDS | replay DIR [SECONDS]"
  ;;
esac
