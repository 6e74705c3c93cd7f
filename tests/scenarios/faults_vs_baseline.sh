#!/bin/bash
# Issue 14's scenario check: scenarios/faults.pbtxt (kills of the PS and of a worker, a
# straggler, a corrupt checkpoint) must finish, recover from every fault, and end with a
# test accuracy no more than 1 point below the same run without its faults (--no-faults).
# (Recovery with RESTORE_LOST redoes the steps since the checkpoint.) An asynchronous
# run's final accuracy is one snapshot of a noisy process: on a loaded 2-core machine
# single runs of either kind ranged over 2.5 points (0.864 to 0.889), and a median of 3
# runs each failed CI once (faulty 0.8866, 0.8745, 0.8741 against 0.8852, 0.8813, 0.8850),
# a trimmed mean of 5 once more (faulty 0.8825, 0.8782, 0.872, 0.8727, 0.8735 against
# 0.8847, 0.8876, 0.8868, 0.8865, 0.8815). 15 runs of each gave means 0.8785 and 0.8830:
# the faults cost about half a point, and 5 runs left the difference of the trimmed means
# a spread of about 0.4 points. So each side is the trimmed mean of 9 runs (the highest
# and the lowest dropped), the runs alternate, CTest runs this test alone (RUN_SERIAL:
# asynchronous staleness grows with the machine's load, which would favour whichever side
# ran on a quieter machine), and every faulty run must recover from every fault.
# usage: faults_vs_baseline.sh TROUPE SCENARIO
set -euo pipefail
troupe=$1
scenario=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
runs=9
for i in $(seq $runs); do
  "$troupe" run "$scenario" --summary "$out/faults$i.json"
  "$troupe" run "$scenario" --no-faults --summary "$out/baseline$i.json"
done
python3 - "$out" "$runs" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
faults = [json.load(open(f"{out}/faults{i}.json")) for i in range(1, runs + 1)]
baselines = [json.load(open(f"{out}/baseline{i}.json")) for i in range(1, runs + 1)]

def trimmed_mean(values):
    return statistics.mean(sorted(values)[1:-1])

problems = []
for run, f in enumerate(faults, 1):
    if not f["faults"]:
        problems.append(f"run {run}: no fault was injected")
    for fault in f["faults"]:
        if not fault["recovered"]:
            problems.append(f"run {run}: fault {fault['kind']} {fault['task']} at step {fault['at_step']} was not recovered")
for run, b in enumerate(baselines, 1):
    if b["faults"]:
        problems.append(f"baseline run {run} injected faults")
a = trimmed_mean([f["test_accuracy"] for f in faults])
b = trimmed_mean([r["test_accuracy"] for r in baselines])
print("test accuracy with faults", [round(f["test_accuracy"], 4) for f in faults],
      "without", [round(r["test_accuracy"], 4) for r in baselines],
      f"(trimmed means {a:.4f}, {b:.4f}); restarts {faults[0]['restarts']}")
if a < b - 0.01:
    problems.append(f"trimmed mean accuracy with faults {a:.4f} is more than 1 point below the baseline's {b:.4f}")
for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)
PY
