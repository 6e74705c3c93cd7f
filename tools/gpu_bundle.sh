#!/usr/bin/env bash
# Packs what tools/gpu_check.sh runs on a GPU machine that has CUDA, cuBLAS and cuDNN but
# none of troupe's Debian libraries: the consistency and session tests and bench_gpu, stripped, with
# every shared library they need except the C library's own and CUDA's (found there), in
# one xz tarball of a few tens of megabytes.
#
#   tools/gpu_bundle.sh BUILD_DIR [OUT_DIR]   # default OUT_DIR: .gpu-bundle (git-ignored)
#
# BUILD_DIR must be configured with -DTROUPE_CUDA=ON; build it with -DTROUPE_NATIVE=OFF so
# that the programs run on the GPU machine's processor too (doc/gpu.md).
set -euo pipefail
build="${1:?usage: tools/gpu_bundle.sh BUILD_DIR [OUT_DIR]}"
out="${2:-.gpu-bundle}"
programs=("$build/tests/test_gpu_consistency_test" "$build/tests/test_gpu_session_test" "$build/bench/bench_gpu")
for p in "${programs[@]}"; do
  [ -x "$p" ] || { echo "gpu_bundle: $p is missing: build it first (ninja test_gpu_consistency_test test_gpu_session_test bench_gpu)" >&2; exit 1; }
done
if grep -q "TROUPE_NATIVE:BOOL=ON" "$build/CMakeCache.txt"; then
  echo "gpu_bundle: warning: $build is built for this processor (-march=native); the GPU machine's may lack its instructions" >&2
fi
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/troupe-gpu/bin" "$stage/troupe-gpu/lib"
for p in "${programs[@]}"; do
  cp "$p" "$stage/troupe-gpu/bin/"
  strip "$stage/troupe-gpu/bin/$(basename "$p")"
done
# The C library, the loader and the GPU driver are the machine's; CUDA's libraries too.
ldd "${programs[@]}" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*|libcublas*|libcudnn*|libcudart*) ;;
    *) cp -L "$lib" "$stage/troupe-gpu/lib/" ;;
  esac
done
mkdir -p "$out"
XZ_OPT="-T2 -6" tar -C "$stage" -cJf "$out/troupe-gpu.tar.xz" troupe-gpu
echo "gpu_bundle: $out/troupe-gpu.tar.xz ($(du -h "$out/troupe-gpu.tar.xz" | cut -f1)): $(ls "$stage/troupe-gpu/bin" | tr '\n' ' ')+ $(ls "$stage/troupe-gpu/lib" | wc -l) libraries"
