// The device actor: owns one device (a CPU and its compute pool) and runs the
// partitions registered with it.
//
// Protocol (request/response):
//   (prepare_atom, executable_spec)            -> uint64_t handle   instantiates kernels once
//   (run_atom, handle, step_id, vector<tensor>) -> vector<tensor>    runs one step
//
// A step runs on the compute pool, never on a CAF worker thread; its completion comes
// back to the actor as a message, which answers the pending request. Any number of
// steps may run at once. Errors come back as caf::error (see messages.h) naming the node.
#pragma once

#include <caf/all.hpp>

#include <string>

#include "core/thread_pool.h"
#include "kernels/kernel_registry.h"

namespace troupe::actors {

struct device_options {
  std::string name = "/job:localhost/replica:0/task:0/device:CPU:0";
  compute_pool* pool = nullptr;  // REQUIRES: non-null and outliving the actor's steps
  const kernels::kernel_registry* kernels = &kernels::kernel_registry::builtin();
};

caf::actor spawn_device(caf::actor_system& system, device_options options);

}  // namespace troupe::actors
