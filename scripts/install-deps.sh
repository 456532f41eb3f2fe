#!/usr/bin/env bash
# Installs the Debian packages the toolchain needs to build, test and train.
# Idempotent: packages already installed are skipped, so a warm machine pays
# only a dpkg query. Exits non-zero with a clear message when it cannot install.
set -euo pipefail

packages=(
  build-essential pkg-config
  libopenblas-dev          # BLAS for the CPU kernels
  libturbojpeg0-dev        # JPEG decode/encode (TurboJPEG API)
  libpng-dev zlib1g-dev    # PNG images, gzip'd idx files
  libinih-dev              # INI net configs
  libopenmpi-dev openmpi-bin  # distributed KVStore
  check libsubunit-dev     # unit tests
  clang libclang-rt-dev    # libFuzzer + sanitizers for make fuzz / fuzz-replay
  graphviz                 # mxviz rendering
  gnuplot-nox              # scripts/plot-metrics.sh training curves
  dataset-fashion-mnist    # default training data
  python3                  # scripts/fashion-mnist-to-images.py (stdlib only)
)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo_cmd=(sudo)
  else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
if ! "${sudo_cmd[@]}" apt-get update -qq >/dev/null; then
  echo "install-deps: 'apt-get update' failed; cannot install ${missing[*]}" >&2
  exit 1
fi
if ! "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
  echo "install-deps: 'apt-get install' failed for: ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: done" >&2
