#!/usr/bin/env bash
# CI smoke run of the benchmark suite (CTest entry bench/smoke): every benchmark program
# once, at tiny sizes (TROUPE_BENCH_SMOKE=1 shrinks the models) and minimal times, to prove
# it still builds, runs its graph and writes what bench/report.py reads. Never checks a
# timing. Fails when a program fails or a benchmark reports an error (the queue benchmark
# may skip itself while the queue ops have no kernel).
#
#   bench/smoke.sh BUILD/bench
set -euo pipefail
bin="${1:?usage: bench/smoke.sh BUILD_DIR/bench}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$(mktemp -d)"
trap '[ -n "${TROUPE_SMOKE_KEEP:-}" ] || rm -rf "$out"' EXIT
export TROUPE_BENCH_SMOKE=1

# gbench NAME FILTER: runs bench_NAME; its JSON goes where bench/run.sh puts it
# (NAME.troupe.r1.json) so that report.py is checked on it too.
gbench() {
  local name="$1" filter="$2" json="$out/$1.troupe.r1.json"
  echo "== bench_$name ($filter)"
  "$bin/bench_$name" --benchmark_filter="$filter" --benchmark_min_time=0.001 \
    --benchmark_out="$json" --benchmark_out_format=json >/dev/null 2>"$out/$name.log" \
    || { cat "$out/$name.log" >&2; echo "smoke: bench_$name failed" >&2; exit 1; }
  if grep -q '"error_occurred": true' "$json"; then
    if [ "$name" = queue ] && ! grep '"error_message"' "$json" | grep -qv 'queue ops do not run yet'; then
      echo "   skipped: $(grep -m1 '"error_message"' "$json")"
      return 0
    fi
    grep '"error_message"' "$json" >&2
    echo "smoke: bench_$name reported an error" >&2
    exit 1
  fi
}

echo "== bench_fma_peak"
"$bin/bench_fma_peak" --threads=1 --seconds=0.01 >"$out/fma_peak.r1.json"
gbench matmul 'N:256/threads:1'
gbench conv 'lenet_conv1'
gbench executor 'null_step'
gbench mlp 'threads:1'
gbench lenet 'threads:1'
gbench alexnet 'threads:1'
gbench lstm 'threads:1'
gbench sendrecv 'transfers:100/actor_threads:1'
gbench variable 'elements:1/cycles:100'
gbench queue '.'
echo "== bench_figure6"
"$bin/bench_figure6" --workers=1,3 --ps=4 --seconds=0.05 --warmup=0.01 --embedding_mb=1 \
  >"$out/figure6.json" 2>"$out/figure6.log" || { cat "$out/figure6.log" >&2; exit 1; }

echo "== bench_figure8"
"$bin/bench_figure8" --aggregate=4 --backups=0,1 --steps=3 --warmup=1 --base_ms=1 \
  >"$out/figure8.json" 2>"$out/figure8.log" || { cat "$out/figure8.log" >&2; exit 1; }
grep -q '"normalized_speedup"' "$out/figure8.json" || { echo "smoke: bench_figure8 wrote no speedup" >&2; exit 1; }

echo "== bench_graph_setup"
"$bin/bench_graph_setup" --nodes=1000 >"$out/graph_setup.json" 2>"$out/graph_setup.log" \
  || { cat "$out/graph_setup.log" >&2; exit 1; }
grep -q '"total_s"' "$out/graph_setup.json" || { echo "smoke: bench_graph_setup wrote no total" >&2; exit 1; }
echo "== bench_checkpoint"
"$bin/bench_checkpoint" --megabytes=8 >"$out/checkpoint.json" 2>"$out/checkpoint.log" \
  || { cat "$out/checkpoint.log" >&2; exit 1; }
grep -q '"restore_s"' "$out/checkpoint.json" || { echo "smoke: bench_checkpoint wrote no restore" >&2; exit 1; }
echo "== bench_transport"
"$bin/bench_transport" --megabytes=16 --rounds=1 --slow_sends=2 >"$out/transport.json" 2>"$out/transport.log" \
  || { cat "$out/transport.log" >&2; exit 1; }
grep -q '"link_over_raw_64_mb"' "$out/transport.json" || { echo "smoke: bench_transport wrote no ratio" >&2; exit 1; }
echo "== bench_remote_step"
"$bin/bench_remote_step" --steps=20 >"$out/remote_step.json" 2>"$out/remote_step.log" \
  || { cat "$out/remote_step.log" >&2; exit 1; }
grep -q '"remote_p50_us"' "$out/remote_step.json" || { echo "smoke: bench_remote_step wrote no latency" >&2; exit 1; }

# bench_gpu exists where troupe was built with CUDA; without a GPU it says so and exits 77.
if [ -x "$bin/bench_gpu" ]; then
  echo "== bench_gpu"
  status=0
  "$bin/bench_gpu" --smoke --repeats=2 >"$out/gpu.json" 2>"$out/gpu.log" || status=$?
  case "$status" in
    0) grep -q '"models"' "$out/gpu.json" || { echo "smoke: bench_gpu wrote no model steps" >&2; exit 1; } ;;
    77) echo "   skipped: $(cat "$out/gpu.json")" ;;
    *) cat "$out/gpu.log" >&2; echo "smoke: bench_gpu failed" >&2; exit 1 ;;
  esac
  # Its training steps' harness, on the CPU (runs without a GPU).
  "$bin/bench_gpu" --smoke --models-on-cpu >"$out/gpu_models_cpu.json" 2>"$out/gpu.log" \
    || { cat "$out/gpu.log" >&2; echo "smoke: bench_gpu --models-on-cpu failed" >&2; exit 1; }
  grep -q '"lstm_lm_full"' "$out/gpu_models_cpu.json" || { echo "smoke: bench_gpu --models-on-cpu wrote no LSTM step" >&2; exit 1; }
fi

# The report builder reads what the programs wrote (no peers here; plots only when
# matplotlib is installed).
if command -v python3 >/dev/null; then
  echo "== report.py"
  python3 "$here/report.py" --results "$out" --quiet
  grep -q '^| MLP [^|]* | [0-9]' "$out/report.md" || { cat "$out/report.md" >&2; echo "smoke: report lacks the MLP row" >&2; exit 1; }
  grep -q '^| 1 | 5 | [0-9]' "$out/report.md" || { cat "$out/report.md" >&2; echo "smoke: report lacks Figure 8's rows" >&2; exit 1; }
fi
echo "smoke: ok"
