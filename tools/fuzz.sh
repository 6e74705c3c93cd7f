#!/usr/bin/env bash
# Fuzzes the parsers of files troupe reads from users (doc/fuzzing.md): builds the libFuzzer
# targets of fuzz/ with clang-14 under AddressSanitizer and UndefinedBehaviorSanitizer into
# build-fuzz/, then runs each for SECONDS (default 60), one at a time, over a copy of its
# seed corpus (fuzz/corpus/<target>/ and fuzz/regressions/<target>/).
#
#   tools/fuzz.sh [SECONDS] [TARGET...]     # targets: graphdef_text graphdef_binary npy idx scenario calibration cluster_file
#
# Prints, per target, the executions run, the coverage reached and what was found. A crash,
# hang (an input running over 10 s), memory blow-up (over 2 GiB) or failed invariant is
# copied into fuzz/regressions/<target>/, where the normal build's ctest replays it
# (fuzz/<target>_regression) once it is fixed; the script then exits 1.
#
# Installs clang-14 and libclang-rt-14-dev (and the build's Debian packages) only when
# missing, as tools/setup.sh does. Environment: TROUPE_JOBS (build jobs, default nproc),
# TROUPE_BUILD_LOCK (a file to flock(1) around the build, for machines that share cores).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$root/build-fuzz"
seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "fuzz.sh: SECONDS must be a positive whole number, not '$seconds'" >&2
  exit 2
fi
[ $# -gt 0 ] && shift
all_targets=(graphdef_text graphdef_binary npy idx scenario calibration cluster_file)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  if [ ! -f "$root/fuzz/${t}_fuzz.cc" ]; then
    echo "fuzz.sh: unknown target '$t' (valid: ${all_targets[*]})" >&2
    exit 2
  fi
done

# The longest input each target is given: room for its largest seed, small enough to keep
# executions fast.
declare -A max_len=([graphdef_text]=100000 [graphdef_binary]=40000 [npy]=4096 [idx]=4096 [scenario]=4096 [calibration]=16384 [cluster_file]=4096)

packages=(clang-14 libclang-rt-14-dev cmake ninja-build libprotobuf-dev protobuf-compiler
          libeigen3-dev zlib1g-dev)
source "$root/tools/install_packages.sh"
install_missing_packages fuzz "${packages[@]}"

lock=()
[ -n "${TROUPE_BUILD_LOCK:-}" ] && lock=(flock "$TROUPE_BUILD_LOCK")
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build_dir/build.ninja" ]; then
  "${lock[@]}" cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DTROUPE_FUZZ=ON \
    -DTROUPE_BUILD_TESTS=OFF -DTROUPE_BUILD_BENCH=OFF "${launcher[@]}"
fi
build_targets=()
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
"${lock[@]}" cmake --build "$build_dir" -j "${TROUPE_JOBS:-$(nproc)}" --target "${build_targets[@]}"

# Inputs that ask for more memory than this (a constant of 10^9 floats written as one
# value) get RESOURCE_EXHAUSTED, as in a real run over its limit (core/memory.h), and the
# fuzzer stays within -rss_limit_mb.
export TROUPE_MEMORY_LIMIT=1G
summary=()
found=0
for t in "${targets[@]}"; do
  work="$build_dir/run/$t"
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp "$root/fuzz/corpus/$t/"* "$work/corpus/"
  find "$root/fuzz/regressions/$t" -maxdepth 1 -type f ! -name '.*' -exec cp {} "$work/corpus/" \;
  seeds=$(find "$work/corpus" -type f | wc -l)
  dict=()
  [ -f "$root/fuzz/dict/$t.dict" ] && dict=("-dict=$root/fuzz/dict/$t.dict")
  echo "fuzz: $t for $seconds s from $seeds seeds (log: $work/log)"
  status=0
  # One process at a time; the outer timeout only guards against libFuzzer itself hanging.
  timeout --signal=KILL $((seconds + 300)) "$build_dir/fuzz_$t" "$work/corpus" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="${max_len[$t]}" \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/" "${dict[@]}" \
    >"$work/log" 2>&1 || status=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$' | tail -1 || true)
  if [ -z "$runs" ]; then  # killed before the final statistics: the last progress line
    runs=$(grep -o '^#[0-9]*' "$work/log" | tail -1 | tr -d '#' || true)
  fi
  cov=$(grep -o 'cov: [0-9]*' "$work/log" | tail -1 | grep -o '[0-9]*' || true)
  corpus=$(find "$work/corpus" -type f | wc -l)
  result="no crash"
  kept=()
  for f in "$work/artifacts/"*; do
    [ -f "$f" ] || continue
    name="$(basename "$f")"
    case "$name" in
      slow-unit-*) continue ;;  # slow but within the timeout: not a failure
    esac
    mkdir -p "$root/fuzz/regressions/$t"
    cp "$f" "$root/fuzz/regressions/$t/$name"
    kept+=("fuzz/regressions/$t/$name")
  done
  if [ ${#kept[@]} -gt 0 ] || [ "$status" -ne 0 ]; then
    found=1
    result="FOUND (exit $status): ${kept[*]:-no artifact, see the log}"
    echo "fuzz: $t: $(grep -m1 -E 'ERROR: |fuzz invariant failed|==[0-9]+==' "$work/log" || echo 'see the log')"
  fi
  summary+=("$(printf '%-16s %12s %8s %8s  %s' "$t" "${runs:-?}" "${cov:-?}" "$corpus" "$result")")
done

echo
printf '%-16s %12s %8s %8s  %s\n' target executions coverage corpus result
printf '%s\n' "${summary[@]}"
exit "$found"
