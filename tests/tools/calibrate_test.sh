#!/usr/bin/env bash
# `troupe calibrate` from the command line (issue 17, doc/simulation.md): a table of a
# two-worker scenario measured in the steady state, each kernel's time alone from a pass
# with one worker, the variable updates' CPU time; for a REAL scenario also what transfers
# between two server processes cost (the table's loopback); a scenario that is not there
# is refused naming it.
#
#   tests/tools/calibrate_test.sh BUILD/troupe
set -uo pipefail
unset TROUPE_LINK_SHARED_MEMORY_MB  # the links' transits are timed over shared memory
troupe="${1:?usage: calibrate_test.sh TROUPE}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

scenario() {  # MODE
  cat <<SCENARIO
name: "calibrate_test"
cluster { mode: $1 job { name: "ps" tasks: 1 } job { name: "worker" tasks: 2 } }
model { name: "mlp" hidden_units: [16] }
dataset { name: "fashion-mnist" reader_threads: 1 }
training { optimizer { name: "momentum" learning_rate: 0.01 momentum: 0.9 } steps: 40 batch_size: 16 seed: 3 replication: ASYNC eval_every: 20 }
report { progress: OFF }
SCENARIO
}

# Checks table $1 with Debian's python3: kernels with their CPU time and time alone, the
# variable updates among them; a loopback section when $2 is "loopback", none otherwise.
check_table() {
  /usr/bin/python3 - "$1" "$2" <<'PY' || fail "table $1"
import json, sys
t = json.load(open(sys.argv[1]))
kernels = t["kernels"]
matmuls = [k for k in kernels if k["op"] == "MatMul"]
assert matmuls and all(k.get("mean_cpu_ns", 0) > 0 and k.get("alone_ns", 0) > 0 for k in matmuls), matmuls
updates = [k for k in kernels if k["op"] == "ResourceApplyMomentum"]
assert len(updates) == 4 and all(k.get("mean_cpu_ns", 0) > 0 for k in updates), updates
# The same training untraced: its CPU per step, and the runtime's cost per kernel from it.
assert t["cpu_us_per_step"] > 0 and t["kernels_per_step"] > 0, t
assert t.get("runtime_ns_per_kernel", 0) >= 0 and t["runtime_traced_ns_per_kernel"] > 0, t
# The crowding of tasks in one process: the scenario (3 tasks) again and with three times
# its workers (7 tasks), the parts of steps a global step has, the growth per part and task.
assert t["tasks"] == 3 and t["crowded_tasks"] == 7 and t["parts_per_step"] >= 2, t
assert t["uncrowded_cpu_us_per_step"] > 0 and t["crowded_cpu_us_per_step"] > 0 and t.get("task_cpu_us", 0) >= 0, t
grown = t["crowded_cpu_us_per_step"] - t["uncrowded_cpu_us_per_step"]
assert abs(t.get("task_cpu_us", 0) - max(0, grown) / t["parts_per_step"] / 4) < 1e-6 * max(1, abs(grown)), t
if sys.argv[2] == "loopback":
    lb = t["loopback"]
    assert lb["bandwidth_gbps"] > 0 and lb["step_cpu_us"] > 0 and lb["null_step_us"] > 0, lb
    # In situ: both modes' CPU per step, what a step moves between tasks, and the
    # transfers' CPU at least what the probe found between idle servers.
    assert lb["real_cpu_us_per_step"] > 0 and lb["in_process_cpu_us_per_step"] > 0, lb
    assert lb["transfers_per_step"] >= 4 and lb["bytes_per_step"] > 4 * 784 * 16 and lb["parts_per_step"] >= 2, lb
    assert lb["message_cpu_us"] >= lb["message_cpu_quiet_us"] > 0, lb
    # The links' transits timed in a traced REAL run: at least the steady state's
    # transfers (4 a step over 30 steps), the latency at least the probe's.
    assert int(lb["transits"]) >= 4 * 30 and lb["transit_mean_us"] > 0 and lb["transit_mean_bytes"] > 0, lb
    # (The probe's own latency may come out 0 on a busy machine: noise hid it.)
    assert lb["latency_us"] >= lb.get("latency_quiet_us", 0) >= 0 and lb["latency_us"] > 0, lb
    # The senders' waits: every transit paired by its key with its hand-off.
    assert int(lb.get("send_waits", 0)) >= 4 * 30 and lb.get("send_wait_us", 0) >= 0, lb
    # The crowding of processes: the scenario again with three times its workers.
    assert lb["processes"] == 4 and lb["crowded_processes"] == 8 and lb["real_cpu_us_per_step_crowded"] > 0, lb
    assert lb.get("process_cpu_us", 0) >= 0, lb
    # The in-situ latency's excess as waiting for a busy core: the scenario simulated
    # finds a share of its messages arriving so, which wait busy_wait_us on average.
    excess = lb["latency_us"] - lb.get("latency_quiet_us", 0)
    # The scenario's simulation ran (the share without waits at least).
    assert 0 <= lb.get("busy_share", 0) <= 1, lb
    if lb.get("busy_wait_us", 0) > 0:
        # The fixed point: with its wait the simulation's busy arrivals wait the excess
        # on average (the last simulation's share).
        assert lb["busy_share"] > 0 and excess > 0 and lb["busy_wait_us"] <= 1e6, lb
        assert 0.67 * excess <= lb["busy_wait_us"] * lb["busy_share"] <= 1.5 * excess, lb
    # The senders' waits the same way: the share of the transfers handed over while the
    # kernels, some of them the sender's, keep every core busy, and their wait.
    assert 0 <= lb.get("send_busy_share", 0) <= 1, lb
    if lb.get("send_busy_wait_us", 0) > 0:
        waited = lb["send_wait_us"]
        assert lb["send_busy_share"] > 0 and waited > 0 and lb["send_busy_wait_us"] <= 1e6, lb
        assert 0.67 * waited <= lb["send_busy_wait_us"] * lb["send_busy_share"] <= 1.5 * waited, lb
else:
    assert "loopback" not in t, t["loopback"]
PY
}

scenario IN_PROCESS > "$dir/in_process.pbtxt"
out="$("$troupe" calibrate "$dir/in_process.pbtxt" --steps 40 --out "$dir/in_process.json" 2>&1)" || fail "calibrate: $out"
grep -q "again with one worker task, each kernel alone" <<<"$out" || fail "no pass alone: $out"
grep -q "calibrate: CPU per global step .* us untraced (.* traced), .* kernels per step: runtime_ns_per_kernel" <<<"$out" ||
  fail "no untraced line: $out"
grep -Eq "calibrate: CPU per global step [0-9.e+-]+ us in process with 7 tasks against [0-9.e+-]+ with 3, [0-9.e+-]+ parts of steps per step: task_cpu_us " <<<"$out" ||
  fail "no crowding of tasks line: $out"
check_table "$dir/in_process.json" none

scenario REAL > "$dir/real.pbtxt"
mkdir -p "$dir/tmp"
out="$(TMPDIR="$dir/tmp" "$troupe" calibrate "$dir/real.pbtxt" --steps 40 --out "$dir/real.json" 2>&1)" ||
  fail "calibrate REAL: $out"
# Its temporary files (the probe's servers' directory, the simulation's table) are gone.
[[ -z "$(ls -A "$dir/tmp")" ]] || fail "calibrate left $(ls -A "$dir/tmp") in TMPDIR"
grep -q "calibrate: loopback: network { latency_us: " <<<"$out" || fail "no loopback line: $out"
grep -q "calibrate: CPU per global step .* in mode REAL" <<<"$out" || fail "no in-situ line: $out"
grep -q "calibrate: [0-9]* transits between the servers" <<<"$out" || fail "no transits line: $out"
grep -q "calibrate: CPU per global step .* with 8 processes against .* with 4: process_cpu_us" <<<"$out" ||
  fail "no crowding line: $out"
# The scenario simulated with the table (shape-only: its evaluations left out), the
# shares of its messages and transfers that found the cores busy, the waits that follow,
# and the network to paste.
grep -Eq "calibrate: simulated with busy_wait_us 0 and send_busy_wait_us 0: [0-9]+ of [1-9][0-9]* messages arrived .*, [0-9]+ of [1-9][0-9]* transfers were handed over" <<<"$out" ||
  fail "the scenario was not simulated: $out"
grep -Eq "calibrate: busy_wait_us [0-9.e+-]+: " <<<"$out" || fail "no busy_wait_us line: $out"
grep -Eq "calibrate: send_busy_wait_us [0-9.e+-]+: the senders' " <<<"$out" || fail "no send_busy_wait_us line: $out"
grep -q "calibrate: for the simulation: network { latency_us: .* busy_wait_us: .* send_busy_wait_us: " <<<"$out" ||
  fail "no network line to paste: $out"
check_table "$dir/real.json" loopback

out="$("$troupe" calibrate "$dir/none.pbtxt" 2>&1)" && fail "a missing scenario was taken"
grep -q "none.pbtxt" <<<"$out" || fail "the refusal does not name the file: $out"
echo "calibrate_test: passed"
