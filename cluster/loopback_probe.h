// loopback_probe: what moving tensors between the processes of a REAL cluster costs on
// this machine, in the terms of the simulation's network model (sim/simulation.h's
// network_model, doc/simulation.md): `troupe calibrate` measures it for a REAL scenario.
//
//   loopback_probe_options o;  o.executable = "/usr/local/bin/troupe";  o.dir = dir;
//   auto costs = measure_loopback(o);   // two `troupe server`s on loopback, this process the client
//
// Two server processes (a "ps" and a "worker" task, as task_processes starts them) and
// this process as the client run steps of four small graphs, each for about
// `seconds_per_graph`, one after another: a NoOp on each task (the control plane: the
// client's requests and answers), one scalar read on the ps and taken by an Identity on
// the worker (one transfer), sixteen of them (sixteen transfers in one step), and one
// tensor of `large_bytes`. Wall time per step, and the CPU time of all three processes
// per step (the servers' from /proc, at the clock tick's resolution), give:
//
// - latency_us: what one small transfer adds to a step's wall time (the first two graphs
//   alternate in five blocks, and the median of the blocks' differences is taken: the
//   machine's speed drifts between seconds; 0 when noise hid it);
// - transfer_us: what each further small transfer in the same step adds (the
//   transport's turn per message: transfers between two processes queue for it);
// - bandwidth_gbps: what the large tensor adds beyond a small one, as gigabits per second;
// - message_cpu_us: the CPU time each small transfer costs, per end (half of all of it);
// - copy_gbps: the CPU time each byte costs, as GB/s copied at each end;
// - step_cpu_us: the CPU time of the control plane per task and step (half the null
//   step's, client and task together).
//
// Blocks its caller for a few seconds (never on a CAF scheduler thread). Errors: the
// servers cannot start (their log quoted), a step fails.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace troupe::cluster {

struct loopback_probe_options {
  std::string executable;           // the troupe program; required
  std::string dir;                  // for the cluster file and the servers' logs; required
  double seconds_per_graph = 1.0;   // measuring time of each graph (after a warm-up)
  std::int64_t large_bytes = 4 << 20;
  // Mutual TLS between the processes (certificates made for the probe), as a cluster with
  // `tls: true` has: its costs are those of encrypted connections.
  bool tls = false;
};

struct loopback_costs {
  double null_step_us = 0;  // wall time of a step with a NoOp on each task
  double latency_us = 0;
  double transfer_us = 0;
  double bandwidth_gbps = 0;
  double message_cpu_us = 0;
  double copy_gbps = 0;
  double step_cpu_us = 0;
  std::int64_t steps = 0;  // steps run in all
};

result<loopback_costs> measure_loopback(const loopback_probe_options& options);

}  // namespace troupe::cluster
