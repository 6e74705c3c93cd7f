#!/usr/bin/env bash
# Sets everything up (Debian packages, configure, build), then runs the whole test suite.
#
#   tools/test.sh              Release build in build/
#   tools/test.sh --sanitize   AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$root/build"
setup_args=()
if [ "${1:-}" = "--sanitize" ]; then
  build_dir="$root/build-asan"
  setup_args=(--sanitize)
  export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
fi
"$root/tools/setup.sh" "${setup_args[@]}"
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
