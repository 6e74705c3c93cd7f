#!/usr/bin/env bash
# The GPU checks of issue 19, as one prepared script for a GPU machine lent through the
# device tool (at most 8 minutes there). That machine has CUDA, cuBLAS, cuDNN and PyTorch
# but none of troupe's Debian libraries: the programs come from tools/gpu_bundle.sh.
#
#   here:  cmake -G Ninja -B build-gpu -DTROUPE_CUDA=ON -DTROUPE_NATIVE=OFF && ninja -C build-gpu test_gpu_consistency_test test_gpu_session_test bench_gpu
#          tools/gpu_bundle.sh build-gpu            # writes .gpu-bundle/troupe-gpu.tar.xz
#   there: tools/gpu_check.sh                       # (device run, carry .gpu-bundle)
#
# It runs the consistency test (every GPU kernel against its CPU kernel), the session test
# (an MLP trained on the GPU against the CPU, with each optimizer), bench_gpu with exact
# float32 (kernels and the AlexNet and LSTM training steps) and with TensorFloat-32
# (kernels), the PyTorch peers of the same kernels (bench/peers/gpu_ops_torch.py) and
# training steps (bench/peers/gpu_models_torch.py), and writes their logs and summary.md to $OUT (default
# ./gpu-check-out). Exit status: 0 when both tests passed, 77 without a GPU,
# 1 otherwise.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$here/gpu-check-out}"
bundle="${TROUPE_GPU_BUNDLE:-$here/.gpu-bundle/troupe-gpu.tar.xz}"
mkdir -p "$out"
summary="$out/summary.md"
say() { echo "$*" | tee -a "$summary"; }
: >"$summary"
start=$(date +%s)

say "# troupe GPU check ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  say "no GPU here (nvidia-smi finds none): nothing to check"
  exit 77
fi
say "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader)"
say "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
[ -f "$bundle" ] || { say "no bundle at $bundle: run tools/gpu_bundle.sh first"; exit 1; }
work="$(mktemp -d)"
tar -C "$work" -xJf "$bundle"
bin="$work/troupe-gpu/bin"

# cuBLAS and cuDNN are the machine's: PyTorch's wheels first (the versions PyTorch runs
# on, so that both are measured on the same libraries), else the toolkit's folder.
original_library_path="${LD_LIBRARY_PATH:-}"
libs="$work/troupe-gpu/lib"
for package in cublas cudnn; do
  dir="$(python3 -c "import nvidia.$package as p; print(list(p.__path__)[0] + '/lib')" 2>/dev/null)"
  [ -n "$dir" ] && [ -d "$dir" ] || dir=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -z "$dir" ] && ls "$d"/lib$package.so.* >/dev/null 2>&1 && dir="$d"
  done
  [ -n "$dir" ] && libs="$libs:$dir"
done
export LD_LIBRARY_PATH="$libs${original_library_path:+:$original_library_path}"
say "- libraries: $LD_LIBRARY_PATH"
missing="$(ldd "$bin"/* | grep 'not found' | sort -u)"
[ -z "$missing" ] || say "- missing libraries: $missing"

say ""
say "## Consistency test (GPU kernels against CPU kernels)"
timeout 240 "$bin/test_gpu_consistency_test" --durations yes >"$out/consistency.log" 2>&1
consistency=$?
say "- exit status $consistency ($([ $consistency = 0 ] && echo passed || echo FAILED)); $(grep -E '^(All tests passed|test cases:)' "$out/consistency.log" | tail -1)"
grep -E "^(  case: |  output |.*FAILED|.*elements differ|.*kernel failed)" "$out/consistency.log" | head -40 | tee -a "$summary"

say ""
say "## Session test (an MLP trained on the GPU and on the CPU)"
timeout 120 "$bin/test_gpu_session_test" >"$out/session.log" 2>&1
session=$?
say "- exit status $session ($([ $session = 0 ] && echo passed || echo FAILED)); $(grep -E '^(All tests passed|test cases:)' "$out/session.log" | tail -1)"
grep -E "(FAILED|step [0-9]+|with [0-9] GPUs)" "$out/session.log" | head -20 | tee -a "$summary"

say ""
say "## Kernels against cuBLAS / cuDNN alone (bench_gpu; ratio = library time / troupe time)"
TROUPE_ALLOW_TF32=0 timeout 210 "$bin/bench_gpu" >"$out/bench_fp32.json" 2>>"$out/bench.log"
say "- float32: exit $? ($(wc -c <"$out/bench_fp32.json") bytes)"
TROUPE_ALLOW_TF32=1 timeout 150 "$bin/bench_gpu" --no-models >"$out/bench_tf32.json" 2>>"$out/bench.log"
say "- TF32: exit $? ($(wc -c <"$out/bench_tf32.json") bytes)"
python3 - "$out/bench_fp32.json" "$out/bench_tf32.json" <<'PY' | tee -a "$summary"
import json, sys
for path in sys.argv[1:]:
    try:
        r = json.load(open(path))
    except Exception as e:
        print(f"- {path}: unreadable ({e})"); continue
    print(f"\n{'TF32' if r['tf32'] else 'float32'} on {r['device']} (median of {r['repeats']}):\n")
    print("| kernel | troupe ms | library ms | troupe TFLOP/s | ratio |\n|---|---|---|---|---|")
    for k in r["kernels"]:
        print(f"| {k['name']} | {k['troupe_ms']:.3f} | {k['library_ms']:.3f} | {k['troupe_tflops']:.1f} | {k['ratio']:.3f} |")
    d = r["dispatch"]
    print(f"\ndispatch: {d['us_per_kernel']:.2f} us per one-element kernel ({d['kernels_per_second']:.0f}/s), host {d['host_us_per_enqueue']:.2f} us per enqueue")
    e = r["executor"]
    print(f"executor: {e['gpu_us_per_node']:.2f} us per node on the GPU, {e['cpu_us_per_node']:.2f} on the CPU (chain of {e['nodes']} Neg nodes, one step)")
PY

say ""
say "## PyTorch on the same kernels (bench/peers/gpu_ops_torch.py)"
LD_LIBRARY_PATH="$original_library_path" PYTHONUNBUFFERED=1 timeout 150 python3 "$here/bench/peers/gpu_ops_torch.py" >"$out/torch.json" 2>"$out/torch.log"
say "- exit $?"
python3 - "$out/torch.json" <<'PY' | tee -a "$summary"
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"- unreadable ({e})"); sys.exit(0)
print(f"torch {r['torch']}, cuDNN {r['cudnn']}; eager neg chain {r['neg_chain_us_per_op']:.2f} us per op\n\n| kernel | float32 ms | TF32 ms |\n|---|---|---|")
for k in r["kernels"]:
    print(f"| {k['name']} | {k['float32_ms']:.3f} | {k['tf32_ms']:.3f} |")
PY
say ""
say "## Training steps against PyTorch (AlexNet batch 128, the LSTM language model; float32)"
LD_LIBRARY_PATH="$original_library_path" PYTHONUNBUFFERED=1 timeout 150 python3 "$here/bench/peers/gpu_models_torch.py" >"$out/torch_models.json" 2>"$out/torch_models.log"
say "- PyTorch: exit $?"
python3 - "$out/bench_fp32.json" "$out/torch_models.json" <<'PY' | tee -a "$summary"
import json, sys
def load(path):
    try:
        return json.load(open(path))
    except Exception as e:
        print(f"- {path}: unreadable ({e})")
        return {}
troupe, torch = load(sys.argv[1]), load(sys.argv[2])
mine = {m["name"]: m for m in troupe.get("models", [])}
theirs = {m["name"]: m for m in torch.get("models", [])}
print(f"\ntroupe on {troupe.get('device', '?')}, PyTorch {torch.get('torch', '?')} on {torch.get('device', '?')}; "
      "ms per step (median), ratio = PyTorch / troupe (above 1: troupe faster)\n")
print("| step | troupe ms | PyTorch ms | ratio |\n|---|---|---|---|")
for name in sorted(set(mine) | set(theirs)):
    a, b = mine.get(name, {}).get("ms_per_step"), theirs.get(name, {}).get("ms_per_step")
    ratio = f"{b / a:.2f}" if a and b else "-"
    print(f"| {name} | {a if a is None else round(a, 2)} | {b if b is None else round(b, 2)} | {ratio} |")
print("\nFor history: the TensorFlow paper's Table 1 gives AlexNet 81 ms per step (batch 128) on a Titan X (2016).")
PY

say ""
say "total $(( $(date +%s) - start )) s"
[ $consistency = 0 ] && [ $session = 0 ] || exit 1
