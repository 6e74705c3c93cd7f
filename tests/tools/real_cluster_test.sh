#!/usr/bin/env bash
# A real cluster of three processes from the command line (issue 16, doc/cluster.md): two
# `troupe server`s (a PS and a worker) and `troupe eval --cluster` running a step whose
# nodes are split between them; then the refusals: a port in use, a task that is not
# there, a non-loopback address without --listen-all; SIGTERM stops a server cleanly.
#
#   tests/tools/real_cluster_test.sh BUILD/troupe tests/tools/data/two_task_graph.pbtxt
set -uo pipefail
troupe="${1:?usage: real_cluster_test.sh TROUPE GRAPH}"
graph="${2:?usage: real_cluster_test.sh TROUPE GRAPH}"
dir="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$dir"/*.log; do echo "== $f" >&2; cat "$f" >&2; done; exit 1; }
# Waits up to $2 seconds for process $1 to end; its exit code, or fails naming $3.
wait_for_exit() {
  local pid="$1" seconds="$2" what="$3"
  for _ in $(seq $((seconds * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    if command -v gdb >/dev/null; then gdb -p "$pid" -batch -ex "thread apply all bt 25" >"$dir/hang.log" 2>&1; fi
    fail "$what did not end within $seconds s"
  fi
  wait "$pid"
}

# Two free loopback ports below the ephemeral range (32768 and up), so that the outgoing
# connections and port-0 listeners of tests running beside this one never take them.
read -r ps_port worker_port < <(/usr/bin/python3 -c '
import random, socket
found = []
while len(found) < 2:
    port = random.randrange(20000, 32000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        if port not in found: found.append(port)
    except OSError:
        pass
    s.close()
print(*found)')
cat >"$dir/cluster.pbtxt" <<END
job { name: "ps" tasks { key: 0 value: "127.0.0.1:$ps_port" } }
job { name: "worker" tasks { key: 0 value: "127.0.0.1:$worker_port" } }
END

"$troupe" server --cluster "$dir/cluster.pbtxt" --job ps --task 0 >"$dir/ps.log" 2>&1 &
ps_pid=$!; pids+=("$ps_pid")
"$troupe" server --cluster "$dir/cluster.pbtxt" --job worker --task 0 --compute-threads 1 >"$dir/worker.log" 2>&1 &
worker_pid=$!; pids+=("$worker_pid")
for _ in $(seq 100); do
  grep -q "serving on" "$dir/ps.log" && grep -q "serving on" "$dir/worker.log" && break
  sleep 0.1
done
grep -q "loopback only" "$dir/ps.log" || fail "the PS server did not say it serves on loopback only"

# A step across the three processes: y = a * a on the worker, z = -y on the PS.
"$troupe" eval --cluster "$dir/cluster.pbtxt" --graph "$graph" --fetch y --fetch z --out "$dir/out" >"$dir/eval.log" 2>&1 &
wait_for_exit $! 30 "troupe eval --cluster" || fail "troupe eval --cluster failed"
values=$(/usr/bin/python3 -c "
import struct, sys
for f in ['y', 'z']:
    b = open('$dir/out/' + f + '.npy', 'rb').read()
    print(*struct.unpack('<3f', b[-12:]))")
[ "$values" = "$(printf '1.0 4.0 9.0\n-1.0 -4.0 -9.0')" ] || fail "wrong values: $values"

# The PS's port is in use: a second server of it says so.
"$troupe" server --cluster "$dir/cluster.pbtxt" --job ps --task 0 >"$dir/second.log" 2>&1 &
second=$!; pids+=("$second")
wait_for_exit "$second" 10 "a second server on the PS's port"; [ $? -eq 1 ] || fail "a second server on the PS's port did not exit with 1"
grep -q "$ps_port" "$dir/second.log" || fail "the refusal does not name the port"

# A pool of no threads is refused, naming the flag.
timeout 30 "$troupe" server --cluster "$dir/cluster.pbtxt" --job ps --task 0 --compute-threads 0 >"$dir/threads.log" 2>&1
[ $? -eq 2 ] && grep -q -- "--compute-threads" "$dir/threads.log" || fail "--compute-threads 0 was not refused"

# A task the cluster lacks; an address that is not loopback, without --listen-all.
timeout 30 "$troupe" server --cluster "$dir/cluster.pbtxt" --job ps --task 3 >"$dir/missing.log" 2>&1
[ $? -eq 1 ] && grep -q "ps" "$dir/missing.log" || fail "a missing task was not refused"
sed "s/127.0.0.1:$ps_port/10.11.12.13:$ps_port/" "$dir/cluster.pbtxt" >"$dir/remote.pbtxt"
timeout 30 "$troupe" server --cluster "$dir/remote.pbtxt" --job ps --task 0 >"$dir/remote.log" 2>&1
[ $? -eq 1 ] && grep -q -- "--listen-all" "$dir/remote.log" || fail "a non-loopback address was served without --listen-all"

# SIGTERM: each server stops cleanly (exit 0).
kill -TERM "$ps_pid" "$worker_pid"
wait_for_exit "$ps_pid" 20 "the PS server after SIGTERM"; ps_code=$?
wait_for_exit "$worker_pid" 20 "the worker server after SIGTERM"; worker_code=$?
[ "$ps_code" -eq 0 ] && [ "$worker_code" -eq 0 ] || fail "SIGTERM exits: ps $ps_code, worker $worker_code"
grep -q "stopped" "$dir/ps.log" || fail "the PS server did not say it stopped"

# With the servers gone, a step fails in seconds with an error naming a task.
start=$(date +%s)
"$troupe" eval --cluster "$dir/cluster.pbtxt" --graph "$graph" --fetch y --out "$dir/out2" >"$dir/gone.log" 2>&1 &
wait_for_exit $! 30 "troupe eval with the servers gone"; code=$?
[ "$code" -ne 0 ] || fail "a step without servers succeeded"
grep -q "/job:" "$dir/gone.log" || fail "the error does not name a task"
[ $(( $(date +%s) - start )) -le 15 ] || fail "a step without servers took over 15 s to fail"
echo "real cluster: ok"
