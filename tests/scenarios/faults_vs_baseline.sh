#!/bin/bash
# Issue 14's scenario check: scenarios/faults.pbtxt (kills of the PS and of a worker, a
# straggler, a corrupt checkpoint) must finish, recover from every fault, and end with a
# test accuracy no more than 1 point below the same run without its faults (--no-faults).
# (Recovery with RESTORE_LOST redoes the steps since the checkpoint, so the faulty run
# often ends slightly above the baseline; asynchronous runs vary by about half a point.)
# usage: faults_vs_baseline.sh TROUPE SCENARIO
set -euo pipefail
troupe=$1
scenario=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$troupe" run "$scenario" --summary "$out/faults.json"
"$troupe" run "$scenario" --no-faults --summary "$out/baseline.json"
python3 - "$out/faults.json" "$out/baseline.json" <<'PY'
import json, sys
faults, baseline = (json.load(open(p)) for p in sys.argv[1:3])
problems = []
if not faults["faults"]:
    problems.append("no fault was injected")
for f in faults["faults"]:
    if not f["recovered"]:
        problems.append(f"fault {f['kind']} {f['task']} at step {f['at_step']} was not recovered")
a, b = faults["test_accuracy"], baseline["test_accuracy"]
print(f"test accuracy with faults {a:.4f}, without {b:.4f}; restarts {faults['restarts']}")
if a < b - 0.01:
    problems.append(f"accuracy with faults {a:.4f} is more than 1 point below the baseline {b:.4f}")
if baseline["faults"]:
    problems.append("the baseline run injected faults")
for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)
PY
