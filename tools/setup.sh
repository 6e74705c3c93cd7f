#!/usr/bin/env bash
# Sets up everything troupe needs on a fresh Debian 12 machine, then configures and builds.
#
#   tools/setup.sh [--sanitize] [--build-dir DIR]
#
# Idempotent: Debian packages are installed only when missing ('apt-get update' runs only
# then), and the CMake build directory is reused. Prints the path of the built binary.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$root/build"
sanitize=OFF
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) sanitize=ON; build_dir="$root/build-asan" ;;
    --build-dir) build_dir="$2"; shift ;;
    *) echo "setup.sh: unknown argument '$1' (valid: --sanitize, --build-dir DIR)" >&2; exit 2 ;;
  esac
  shift
done

packages=(
  build-essential g++ cmake ninja-build ccache pkg-config
  libcaf-dev libcaf-openssl0.17 libssl-dev libeigen3-dev libprotobuf-dev protobuf-compiler libhdf5-dev
  catch2 gdb iproute2 libbenchmark-dev libopenblas-dev libdnnl-dev zlib1g-dev dataset-fashion-mnist python3-h5py
)
source "$root/tools/install_packages.sh"
install_missing_packages setup "${packages[@]}"

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER=g++ -DTROUPE_SANITIZE="$sanitize" "${launcher[@]}"
fi
jobs="${TROUPE_JOBS:-$(nproc)}"
cmake --build "$build_dir" -j "$jobs"
