#!/usr/bin/env bash
# Old commit against the working tree, in one run: builds the Google Benchmark programs of
# REV in a git worktree (build outputs under $TMPDIR, nothing committed), then runs each
# benchmark of both builds in alternation, ROUNDS times, and prints the median time of
# each side and new/old (below 1: the working tree is faster). Same machine, same moment:
# the ratio is what counts, never the absolute times.
#
#   bench/compare_commits.sh REV [ROUNDS] [PROGRAM:FILTER ...]
#   bench/compare_commits.sh 55a8884 5 executor:run_session sendrecv:transfers:100 mlp_step
#
# PROGRAM is a bench_PROGRAM built by both sides; FILTER a --benchmark_filter regex.
# Defaults: 5 rounds; executor, sendrecv, mlp, lenet and variable, every benchmark of each.
# Builds take the build lock when TROUPE_BUILD_LOCK names one (as tools/fuzz.sh does).
set -euo pipefail
rev="${1:?usage: bench/compare_commits.sh REV [ROUNDS] [PROGRAM:FILTER ...]}"
shift
rounds=5
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
  rounds="$1"
  shift
fi
specs=("$@")
[ ${#specs[@]} -eq 0 ] && specs=(executor:. sendrecv:. mlp:. lenet:. variable:.)
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="${TMPDIR:-/tmp}/troupe-compare-$(git -C "$root" rev-parse --short "$rev")"
lock=()
[ -n "${TROUPE_BUILD_LOCK:-}" ] && lock=(flock "$TROUPE_BUILD_LOCK")

if [ ! -d "$work/src" ]; then
  git -C "$root" worktree add --detach "$work/src" "$rev" >/dev/null
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
for side in old new; do
  src="$work/src"; build="$work/build"
  if [ "$side" = new ]; then src="$root"; build="$root/build"; fi
  [ -f "$build/build.ninja" ] || cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER=g++ "${launcher[@]}" >/dev/null
  targets=()
  for spec in "${specs[@]}"; do targets+=("bench_${spec%%:*}"); done
  "${lock[@]}" cmake --build "$build" -j "${TROUPE_JOBS:-$(nproc)}" --target "${targets[@]}" >/dev/null
done

out="$work/results"
rm -rf "$out" && mkdir -p "$out"
for ((r = 1; r <= rounds; r++)); do
  for spec in "${specs[@]}"; do
    program="${spec%%:*}"
    filter="${spec#*:}"
    [ "$filter" = "$spec" ] && filter=.
    for side in old new; do
      bin="$work/build/bench/bench_$program"
      [ "$side" = new ] && bin="$root/build/bench/bench_$program"
      "$bin" --benchmark_filter="$filter" --benchmark_min_time=0.2 --benchmark_format=json \
        >"$out/$program.$side.$r.json" 2>/dev/null
    done
  done
done

python3 - "$out" "$rounds" "${specs[@]}" <<'EOF'
import json, statistics, sys
out, rounds, specs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"{'benchmark':60s} {'old':>12s} {'new':>12s} {'new/old':>8s}")
for spec in specs:
    program = spec.split(':')[0]
    times = {}
    for side in ('old', 'new'):
        for r in range(1, rounds + 1):
            with open(f"{out}/{program}.{side}.{r}.json") as f:
                for b in json.load(f)['benchmarks']:
                    if b.get('run_type', 'iteration') != 'iteration' or b.get('error_occurred'):
                        continue
                    times.setdefault(b['name'], {}).setdefault(side, []).append(b['real_time'])
    for name, sides in times.items():
        if 'old' not in sides or 'new' not in sides:
            continue
        old, new = statistics.median(sides['old']), statistics.median(sides['new'])
        print(f"{program + ' ' + name:60s} {old:12.1f} {new:12.1f} {new / old:8.2f}")
EOF
