#!/usr/bin/env bash
# Issue 16: a real cluster across network namespaces. A PS and two workers, each a
# `troupe server` in a namespace of its own joined by veth pairs to a bridge, with 2 ms of
# latency and 1% packet loss on every namespace's link (tc netem); `troupe run` in this
# namespace trains a small MLP on them (mode REAL, addresses given) and must reach the
# accuracy its scenario expects. Skipped (exit 77) where namespaces cannot be made (not
# root, no iproute2, a container without the capability) or the kernel has no netem.
# TROUPE_NETNS_WITHOUT_NETEM=1 runs it without the delay and loss (to check the rest
# where netem is missing: it then proves less than its name says).
#
#   tests/tools/netns_cluster_test.sh build/troupe
set -uo pipefail
troupe="$1"
tag="tr$$"
bridge="${tag}br"
work="$(mktemp -d)"
pids=()
skip() { echo "SKIPPED: $*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "not root: network namespaces need it"
command -v ip >/dev/null && command -v tc >/dev/null || skip "no ip or tc (iproute2)"

cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  for i in 0 1 2; do ip netns del "${tag}n$i" 2>/dev/null; done
  ip link del "$bridge" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

ip netns add "${tag}n0" 2>/dev/null || skip "cannot make a network namespace here"
ip link add "$bridge" type bridge 2>/dev/null || skip "cannot make a bridge here"
ip addr add 10.231.0.1/24 dev "$bridge" && ip link set "$bridge" up || skip "cannot configure the bridge"
for i in 0 1 2; do
  ns="${tag}n$i"
  [ "$i" = 0 ] || ip netns add "$ns" || skip "cannot make namespace $ns"
  ip link add "${tag}v$i" type veth peer name eth0 netns "$ns" || skip "cannot make a veth pair"
  ip link set "${tag}v$i" master "$bridge" up
  ip netns exec "$ns" ip addr add "10.231.0.1$i/24" dev eth0
  ip netns exec "$ns" ip link set eth0 up
  ip netns exec "$ns" ip link set lo up
  if [ -n "${TROUPE_NETNS_WITHOUT_NETEM:-}" ]; then
    echo "TROUPE_NETNS_WITHOUT_NETEM: no delay or loss on $ns (checks the rest of this test only)"
  else
    ip netns exec "$ns" tc qdisc add dev eth0 root netem delay 2ms loss 1% || skip "no tc netem (the kernel lacks sch_netem)"
  fi
done

cat >"$work/cluster.pbtxt" <<EOF
job { name: "ps" tasks { key: 0 value: "10.231.0.10:2222" } }
job { name: "worker" tasks { key: 0 value: "10.231.0.11:2222" } tasks { key: 1 value: "10.231.0.12:2222" } }
EOF
cat >"$work/scenario.pbtxt" <<EOF
name: "netns"
cluster {
  mode: REAL
  job { name: "ps" tasks: 1 addresses: ["10.231.0.10:2222"] }
  job { name: "worker" tasks: 2 addresses: ["10.231.0.11:2222", "10.231.0.12:2222"] }
}
model { name: "mlp" hidden_units: [64] }
training { optimizer { name: "adam" } steps: 300 batch_size: 32 seed: 5 }
report { progress: PLAIN progress_every: 100 expect { min_test_accuracy: 0.70 } }
EOF

start_server() {  # namespace, job, task
  ip netns exec "$1" "$troupe" server --cluster "$work/cluster.pbtxt" --job "$2" --task "$3" --listen-all \
    >"$work/$2-$3.log" 2>&1 &
  pids+=($!)
}
start_server "${tag}n0" ps 0
start_server "${tag}n1" worker 0
start_server "${tag}n2" worker 1
for f in ps-0 worker-0 worker-1; do
  for _ in $(seq 100); do grep -q "serving" "$work/$f.log" 2>/dev/null && break; sleep 0.1; done
  grep -q "serving" "$work/$f.log" || { echo "server $f did not start:"; cat "$work/$f.log"; exit 1; }
done

# What the links look like (for the log).
ip netns exec "${tag}n1" tc qdisc show dev eth0

timeout 600 "$troupe" run "$work/scenario.pbtxt"
code=$?
if [ "$code" != 0 ]; then
  echo "troupe run failed ($code); the servers said:"
  for f in ps-0 worker-0 worker-1; do echo "--- $f"; cat "$work/$f.log"; done
  exit 1
fi
if [ -n "${TROUPE_NETNS_WITHOUT_NETEM:-}" ]; then
  echo "PASSED: trained across namespaces (without delay or loss: TROUPE_NETNS_WITHOUT_NETEM)"
else
  echo "PASSED: trained across namespaces with 2 ms latency and 1% loss on every link"
fi
