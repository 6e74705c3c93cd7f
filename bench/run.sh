#!/usr/bin/env bash
# Runs the whole benchmark suite against its peers and writes a report a person can read:
#
#   bench/run.sh [--quick] [--rounds N] [--build-dir DIR] [--out DIR] [--no-peers]
#                [--no-pypi-peers] [--models-only] [--avx2]
#
#   --quick        a few minutes: one round, shorter timings, Figure 6 with fewer workers
#                  and a 256 MB embedding, no per-layer convolution comparison
#   --rounds N     rounds of (troupe, peer) runs; figures are medians over rounds
#                  (default 3, --quick 1)
#   --build-dir    where troupe is built (default build/, Release; configured by
#                  tools/setup.sh when missing)
#   --out DIR      results folder (default bench/results/<date>-<time>)
#   --no-peers     troupe only (no PyTorch, nothing installed)
#   --no-pypi-peers  without TensorFlow and the newest PyTorch (which step 2 otherwise
#                  installs from PyPI into bench/.venv, git-ignored)
#   --models-only  the training steps against every peer and nothing else: no per-layer
#                  convolutions, products, runtime micro-benchmarks, Figures 6 and 8,
#                  graph set-up, checkpoints or simulation (for performance work on the
#                  models; the report says n/a for what was not measured)
#   --avx2         every system held to AVX2 on a processor that has AVX-512, as an
#                  AVX2-only processor runs them: troupe built for x86-64-v3 in build-avx2/
#                  (-DTROUPE_NATIVE=OFF, configured when missing) and run with
#                  TROUPE_HIDE_AVX512=1; oneDNN capped at AVX2 (ONEDNN_MAX_CPU_ISA), MKL
#                  (MKL_ENABLE_INSTRUCTIONS), PyTorch's own kernels (ATEN_CPU_CAPABILITY) and
#                  OpenBLAS (OPENBLAS_CORETYPE=Haswell) for troupe and peers alike; the
#                  report's machine table says so
#
# Steps: (1) build the benchmark programs; (2) install the peers when missing
# (python3-torch, libgoogle-perftools4 for tcmalloc, python3-matplotlib for the plots:
# Debian packages, installed only here, never by set-up or CI; TensorFlow 2.21 and the
# newest PyTorch from PyPI into git-ignored virtual environments, also only here); (3) record the machine
# (lscpu, free, OPENBLAS_CORETYPE, compiler); (4) for each round run every model with
# troupe and then its PyTorch peer (the order flips every other round so drift hits both
# alike), then the machine ceilings (FMA peak, sgemm) and runtime micro-benchmarks;
# (5) the paper's Figures 6 and 8 once, graph set-up, checkpoints, and how close the
# simulation's step times come to measured ones (bench/sim_fidelity.py), how fast it
# runs 200 workers (bench/sim_scale.py) and the paper's Figures 7 and 8 in it
# (bench/sim_figures.py); (6)
# bench/report.py writes report.md, ratios.png,
# figure6.png and figure8.png into the results folder. Raw JSON and logs stay beside them.
#
# Peers run at their best (../shared/notes/baselines.md): tcmalloc preloaded, inter-op
# threads off, 1 and 2 intra-op threads tried and the better kept; troupe's programs also
# run at 1 and 2 compute threads. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are left as the
# environment sets them, for troupe and peers alike, and the report says which.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode=full
rounds=""
build_dir="$root/build"
out=""
peers=1
pypi_peers=1
models_only=0
avx2=0
build_dir_given=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) mode=quick ;;
    --rounds) rounds="${2:?--rounds needs a number}"; shift ;;
    --build-dir) build_dir="${2:?--build-dir needs a folder}"; build_dir_given=1; shift ;;
    --out) out="${2:?--out needs a folder}"; shift ;;
    --no-peers) peers=0; pypi_peers=0 ;;
    --no-pypi-peers) pypi_peers=0 ;;
    --models-only) models_only=1 ;;
    --avx2) avx2=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (valid: --quick, --rounds N, --build-dir DIR, --out DIR, --no-peers, --no-pypi-peers, --models-only, --avx2)" >&2; exit 2 ;;
  esac
  shift
done

if [ "$mode" = quick ]; then
  : "${rounds:=1}"
  min_time=0.3           # Google Benchmark seconds per figure
  peer_args=(--seconds 1 --repeats 3)
  figure6_args=(--workers=1,2,5,10,25 --seconds=0.5 --warmup=0.2 --embedding_mb=256)
  figure6_real_args=(--workers=1,2 --ps=16 --seconds=1 --warmup=0.3 --embedding_mb=16)
  figure8_args=(--aggregate=50 --backups=0,1,2,3,4,5 --base_ms=50 --steps=20 --warmup=3)
else
  : "${rounds:=3}"
  min_time=2
  peer_args=(--seconds 3 --repeats 5)
  figure6_args=(--workers=1,2,5,10,25,50,100 --seconds=2 --warmup=0.5 --embedding_mb=1024)
  figure6_real_args=(--workers=1,2,4,8 --ps=16 --seconds=2 --warmup=0.5 --embedding_mb=64)
  figure8_args=(--aggregate=50 --backups=0,1,2,3,4,5 --base_ms=100 --steps=60 --warmup=5)
fi
[ -n "$out" ] || out="$root/bench/results/$(date +%Y-%m-%d-%H%M%S)"
mkdir -p "$out/logs"
log() { echo "[run.sh $(date +%H:%M:%S)] $*" >&2; }
log "mode $mode, $rounds round(s), results in $out"

# --- 1. Build (Release) ---
if [ "$avx2" = 1 ]; then
  grep -qw avx2 /proc/cpuinfo || { log "--avx2: this processor has no AVX2"; exit 1; }
  [ "$build_dir_given" = 1 ] || build_dir="$root/build-avx2"
  if [ ! -f "$build_dir/build.ninja" ]; then
    log "configuring an AVX2 build (x86-64-v3) in $build_dir"
    launcher=()
    command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=g++ \
      -DTROUPE_NATIVE=OFF -DTROUPE_CUDA=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3 "${launcher[@]}" \
      >"$out/logs/configure.log" 2>&1 || { tail -30 "$out/logs/configure.log" >&2; exit 1; }
  fi
  grep -q 'CMAKE_CXX_FLAGS:STRING=.*x86-64-v3' "$build_dir/CMakeCache.txt" \
    || { log "--avx2: $build_dir is not an x86-64-v3 build (configure it with -DTROUPE_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3)"; exit 1; }
  # Read by troupe (cpu_features.h), oneDNN, MKL, PyTorch's ATen and OpenBLAS: every
  # program below, troupe's and the peers', inherits them.
  export TROUPE_HIDE_AVX512=1 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
    ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell
fi
if [ ! -f "$build_dir/build.ninja" ]; then
  log "no build in $build_dir: running tools/setup.sh"
  "$root/tools/setup.sh" --build-dir "$build_dir"
fi
build_type="$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build_dir/CMakeCache.txt")"
[ "$build_type" = Release ] || log "WARNING: $build_dir is a '$build_type' build, not Release: figures will be off"
log "building the benchmark programs"
cmake --build "$build_dir" --target troupe_all_benchmarks -j "${TROUPE_JOBS:-$(nproc)}" >"$out/logs/build.log" 2>&1 \
  || { tail -30 "$out/logs/build.log" >&2; log "build failed (log: $out/logs/build.log)"; exit 1; }
bin="$build_dir/bench"

# --- 2. Peers (installed only here) ---
python=/usr/bin/python3
tcmalloc=""
if [ "$peers" = 1 ]; then
  missing=()
  for p in python3-torch libgoogle-perftools4 python3-matplotlib; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing peers: ${missing[*]}"
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    { $sudo_cmd apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"; } >"$out/logs/apt.log" 2>&1 \
      || log "WARNING: could not install ${missing[*]} (log: $out/logs/apt.log)"
  fi
  tcmalloc="$(ldconfig -p 2>/dev/null | sed -n 's/.*libtcmalloc.so.4 .*=> //p' | head -1)"
  [ -n "$tcmalloc" ] || for f in /usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 /usr/lib/*/libtcmalloc.so.4; do
    [ -f "$f" ] && { tcmalloc="$f"; break; }
  done
  [ -n "$tcmalloc" ] || log "WARNING: no libtcmalloc.so.4: peers run with glibc malloc (not at their best)"
  if ! "$python" -c 'import torch' 2>/dev/null; then
    log "WARNING: PyTorch is not importable: running troupe only"
    peers=0
  fi
fi
command -v "$python" >/dev/null || { log "need $python for the report"; exit 1; }

# --- 2b. PyPI peers: TensorFlow (graph mode) and the newest PyTorch, in bench/.venv ---
tf_python="" torch2_python=""
if [ "$pypi_peers" = 1 ]; then
  venv="$root/bench/.venv"
  if ! "$venv/bin/python" -c "import tensorflow, torch" 2>/dev/null; then
    log "installing tensorflow-cpu==2.21.0, torch and numpy into bench/.venv (PyPI)"
    { python3 -m venv "$venv" && "$venv/bin/pip" install -q tensorflow-cpu==2.21.0 torch numpy; } \
      >>"$out/logs/pip.log" 2>&1 || log "WARNING: could not install the PyPI peers (log: $out/logs/pip.log)"
  fi
  "$venv/bin/python" -c "import tensorflow" 2>/dev/null && tf_python="$venv/bin/python"
  "$venv/bin/python" -c "import torch" 2>/dev/null && torch2_python="$venv/bin/python"
fi

# --- 3. The machine ---
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
torch_version=""
[ "$peers" = 1 ] && torch_version="$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)"
MACHINE_DATE="$(date '+%Y-%m-%d %H:%M:%S %Z')" \
MACHINE_COMMIT="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')" \
MACHINE_MODE="$mode" MACHINE_ROUNDS="$rounds" MACHINE_TORCH="$torch_version" \
MACHINE_PRELOAD="$tcmalloc" MACHINE_LOAD="$load_before" MACHINE_BUILD_TYPE="$build_type" \
MACHINE_COMPILER="$(g++ --version | head -1)" MACHINE_ISA_CAP="$([ "$avx2" = 1 ] && echo 'AVX2 (--avx2: x86-64-v3 build, TROUPE_HIDE_AVX512=1 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell)')" \
"$python" - "$out/machine.json" <<'EOF'
import json, os, re, subprocess, sys
def run(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    except OSError:
        return ""
lscpu = run("lscpu")
model = re.search(r"Model name:\s*(.*)", lscpu)
flags = re.search(r"Flags:\s*(.*)", lscpu)
vector = sorted({f for f in (flags.group(1).split() if flags else []) if re.fullmatch(r"avx512f|avx512bw|avx512_bf16|avx2|fma|avx_vnni", f)})
free = run("free", "-h")
mem = re.search(r"Mem:\s+(\S+)", free)
e = os.environ
json.dump({
    "date": e["MACHINE_DATE"], "commit": e["MACHINE_COMMIT"], "mode": e["MACHINE_MODE"],
    "rounds": int(e["MACHINE_ROUNDS"]), "cpu_model": model.group(1).strip() if model else "unknown",
    "nproc": os.cpu_count(), "memory": (mem.group(1) + " total") if mem else "unknown",
    "vector_flags": " ".join(vector), "openblas_coretype": e.get("OPENBLAS_CORETYPE", ""),
    "openblas_l2_size": e.get("OPENBLAS_L2_SIZE", ""), "compiler": e["MACHINE_COMPILER"],
    "build_type": e["MACHINE_BUILD_TYPE"], "torch": e["MACHINE_TORCH"],
    "peer_preload": e["MACHINE_PRELOAD"], "load_before": e["MACHINE_LOAD"],
    "isa_cap": e["MACHINE_ISA_CAP"],
    "lscpu": lscpu, "free": free,
}, open(sys.argv[1], "w"), indent=1)
EOF

# --- 4. Rounds ---
failures=0
# troupe NAME PROGRAM [ARGS...]: a Google Benchmark program, JSON to NAME.troupe.r<round>.json.
troupe() {
  local name="$1" program="$2"
  shift 2
  log "round $round: troupe $name"
  "$bin/$program" --benchmark_min_time="$min_time" --benchmark_out="$out/$name.troupe.r$round.json" \
    --benchmark_out_format=json --benchmark_counters_tabular=true "$@" >>"$out/logs/$name.troupe.log" 2>&1 \
    || { log "  FAILED (log: $out/logs/$name.troupe.log)"; failures=$((failures + 1)); }
}
# peer NAME SCRIPT [ARGS...]: a PyTorch peer, JSON to NAME.peer.r<round>.json.
peer() {
  local name="$1" script="$2"
  shift 2
  [ "$peers" = 1 ] || return 0
  log "round $round: peer $name"
  env ${tcmalloc:+LD_PRELOAD="$tcmalloc"} "$python" "$root/bench/peers/$script" "$@" \
    >"$out/$name.peer.r$round.json" 2>>"$out/logs/$name.peer.log" \
    || { log "  FAILED (log: $out/logs/$name.peer.log)"; rm -f "$out/$name.peer.r$round.json"; failures=$((failures + 1)); }
}
# pypi_peer KIND NAME SCRIPT [ARGS...]: TensorFlow (KIND tf) or PyTorch 2 (KIND torch2),
# JSON to NAME.KIND.r<round>.json.
pypi_peer() {
  local kind="$1" name="$2" script="$3" py
  shift 3
  py="$tf_python"; [ "$kind" = torch2 ] && py="$torch2_python"
  [ -n "$py" ] || return 0
  log "round $round: $kind $name"
  local rc=0
  env ${tcmalloc:+LD_PRELOAD="$tcmalloc"} "$py" "$root/bench/peers/$script" "$@" \
    >"$out/$name.$kind.r$round.json" 2>>"$out/logs/$name.$kind.log" || rc=$?
  if [ "$rc" -gt 128 ] && [ "$kind" = torch2 ]; then
    # Killed by a signal: a torch.compile'd step can crash the whole process (Inductor's
    # kernels for AlexNet under ATEN_CPU_CAPABILITY=avx2); the uncompiled variants still count.
    log "  crashed (signal $((rc - 128))): again without torch.compile"
    rc=0
    env ${tcmalloc:+LD_PRELOAD="$tcmalloc"} TROUPE_PEER_NO_COMPILE=1 "$py" "$root/bench/peers/$script" "$@" \
      >"$out/$name.$kind.r$round.json" 2>>"$out/logs/$name.$kind.log" || rc=$?
  fi
  [ "$rc" -eq 0 ] || { log "  FAILED (log: $out/logs/$name.$kind.log)"; rm -f "$out/$name.$kind.r$round.json"; failures=$((failures + 1)); }
}
# pair: troupe then peer, or the other way round in even rounds.
pair() {
  local troupe_call="$1" peer_call="$2"
  if [ $((round % 2)) -eq 1 ]; then eval "$troupe_call"; eval "$peer_call"; else eval "$peer_call"; eval "$troupe_call"; fi
}

for round in $(seq 1 "$rounds"); do
  log "round $round of $rounds"
  "$bin/bench_fma_peak" --threads=1,2 --seconds=0.5 >"$out/fma_peak.r$round.json" 2>>"$out/logs/fma_peak.log" \
    || { log "  bench_fma_peak FAILED"; failures=$((failures + 1)); }
  pair 'troupe mlp bench_mlp' 'peer mlp mlp_peer.py "${peer_args[@]}"'
  pair 'troupe lenet bench_lenet' 'peer lenet lenet_peer.py "${peer_args[@]}"'
  pair 'troupe alexnet bench_alexnet' 'peer alexnet alexnet_peer.py "${peer_args[@]}"'
  pair 'troupe lstm bench_lstm' \
       'peer lstm_full lstm_peer.py --loss full "${peer_args[@]}"; peer lstm_sampled lstm_peer.py --loss sampled "${peer_args[@]}"'
  if [ "$models_only" = 1 ]; then
    :
  elif [ "$mode" = full ]; then
    pair 'troupe conv bench_conv' 'peer conv conv_peer.py --json --seconds=0.5'
    troupe matmul bench_matmul
  else
    troupe matmul bench_matmul --benchmark_filter='N:1024'
  fi
  for m in mlp lenet alexnet lstm_full lstm_sampled; do
    pypi_peer tf "$m" tf_peer.py --model "$m" "${peer_args[@]}"
  done
  [ "$models_only" = 1 ] || pypi_peer tf null_ops tf_peer.py --model null_ops "${peer_args[@]}"
  pypi_peer torch2 mlp mlp_peer.py "${peer_args[@]}"
  pypi_peer torch2 lenet lenet_peer.py "${peer_args[@]}"
  pypi_peer torch2 alexnet alexnet_peer.py "${peer_args[@]}"
  pypi_peer torch2 lstm_full lstm_peer.py --loss full "${peer_args[@]}"
  pypi_peer torch2 lstm_sampled lstm_peer.py --loss sampled "${peer_args[@]}"
  if [ "$models_only" = 0 ]; then
    troupe executor bench_executor
    troupe sendrecv bench_sendrecv
    troupe variable bench_variable
    troupe queue bench_queue
  fi
done

# --- 6. Report (after step 5, or right away with --models-only) ---
write_report() {
  "$python" - "$out/machine.json" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1])); m["load_after"] = sys.argv[2]
json.dump(m, open(sys.argv[1], "w"), indent=1)
EOF
  "$python" "$root/bench/report.py" --results "$out" --quiet
  log "report: $out/report.md ($failures failure(s))"
  [ "$failures" -eq 0 ]
}
if [ "$models_only" = 1 ]; then
  write_report
  exit
fi

# --- 5. Figure 6 (once: it measures scaling, not a ratio) ---
log "Figure 6: ${figure6_args[*]}"
"$bin/bench_figure6" "${figure6_args[@]}" >"$out/figure6.json" 2>"$out/logs/figure6.log" \
  || { log "  bench_figure6 FAILED (log: $out/logs/figure6.log)"; failures=$((failures + 1)); }

# --- 5'. Figure 6 across processes: troupe's REAL mode and TensorFlow's gRPC runtime ---
log "Figure 6 across processes: ${figure6_real_args[*]}"
"$bin/bench_figure6" --real="$build_dir/troupe" "${figure6_real_args[@]}" >"$out/figure6_real.json" \
  2>"$out/logs/figure6_real.log" \
  || { log "  bench_figure6 --real FAILED (log: $out/logs/figure6_real.log)"; failures=$((failures + 1)); }
if [ -n "$tf_python" ]; then
  # The same flags, spelled as the script takes them.
  "$tf_python" "$root/bench/peers/tf_distributed_peer.py" --figure6 \
    $(printf '%s\n' "${figure6_real_args[@]}" | sed 's/^--\([a-z_]*\)=/--\1 /') \
    >"$out/tf_figure6.json" 2>"$out/logs/tf_figure6.log" \
    || { log "  tf_distributed_peer --figure6 FAILED (log: $out/logs/tf_figure6.log)"; failures=$((failures + 1)); }
fi

# --- 5a. Figure 8: synchronous replication with backup workers (issue 15) ---
log "Figure 8: ${figure8_args[*]}"
"$bin/bench_figure8" "${figure8_args[@]}" >"$out/figure8.json" 2>"$out/logs/figure8.log" \
  || { log "  bench_figure8 FAILED (log: $out/logs/figure8.log)"; failures=$((failures + 1)); }

# --- 5a'. A small step on another process, troupe's REAL transport and TensorFlow's gRPC ---
log "remote step: troupe (REAL) and TensorFlow's distributed runtime on loopback"
"$bin/bench_remote_step" --steps=2000 >"$out/remote_step.json" 2>"$out/logs/remote_step.log" \
  || { log "  bench_remote_step FAILED (log: $out/logs/remote_step.log)"; failures=$((failures + 1)); }
if [ -n "$tf_python" ]; then
  "$tf_python" "$root/bench/peers/tf_distributed_peer.py" --steps 2000 >"$out/tf_distributed.json" \
    2>"$out/logs/tf_distributed.log" \
    || { log "  tf_distributed_peer FAILED (log: $out/logs/tf_distributed.log)"; failures=$((failures + 1)); }
fi

# --- 5b. Graph set-up at scale (issue 13: <= 1.5 s and <= 150 MB for 100,000 nodes) ---
log "graph set-up: 100,000 Neg nodes"
"$bin/bench_graph_setup" --nodes=100000 >"$out/graph_setup.json" 2>"$out/logs/graph_setup.log" \
  || { log "  bench_graph_setup FAILED (log: $out/logs/graph_setup.log)"; failures=$((failures + 1)); }

# --- 5c. Checkpoints (issue 14: save and restore of 1 GB at >= 80% of the disk's bandwidth) ---
log "checkpoint: 1 GB save and restore against raw sequential write and read"
"$bin/bench_checkpoint" --megabytes=1024 >"$out/checkpoint.json" 2>"$out/logs/checkpoint.log" \
  || { log "  bench_checkpoint FAILED (log: $out/logs/checkpoint.log)"; failures=$((failures + 1)); }

# --- 5d. Simulation fidelity (issue 17: simulated step times within 10% of measured) ---
log "simulation fidelity: MLP and LeNet, 1 to 8 workers, IN_PROCESS and REAL against SIMULATED"
fidelity_args=()
[ "$mode" = quick ] && fidelity_args=(--quick --workers 1,4)
"$python" "$root/bench/sim_fidelity.py" --troupe "$build_dir/troupe" --out "$out" "${fidelity_args[@]}" \
  >"$out/logs/sim_fidelity.log" 2>&1 \
  || { log "  sim_fidelity FAILED (log: $out/logs/sim_fidelity.log)"; failures=$((failures + 1)); }

# --- 5e. Simulation at scale (issue 17: 200 workers, 16 PS, 1000 steps shape-only in <= 60 s) ---
log "simulation at scale: 200 workers and 16 PS tasks, shape-only and with kernels"
scale_args=()
[ "$mode" = quick ] && scale_args=(--quick)
"$python" "$root/bench/sim_scale.py" --troupe "$build_dir/troupe" --out "$out" "${scale_args[@]}" \
  >"$out/logs/sim_scale.log" 2>&1 \
  || { log "  sim_scale FAILED (log: $out/logs/sim_scale.log)"; failures=$((failures + 1)); }

# --- 5f. The paper's Figures 7 and 8 in simulation (issue 17) ---
log "figures 7 and 8 in simulation: 25-200 workers sync and async, 50 workers with 0-5 backups"
figures_args=()
[ "$mode" = quick ] && figures_args=(--quick)
"$python" "$root/bench/sim_figures.py" --troupe "$build_dir/troupe" --out "$out" "${figures_args[@]}" \
  >"$out/logs/sim_figures.log" 2>&1 \
  || { log "  sim_figures FAILED (log: $out/logs/sim_figures.log)"; failures=$((failures + 1)); }

write_report
