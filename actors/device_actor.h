// The device actor: owns one device (a CPU and its compute pool) and runs the
// partitions registered with it; it also holds the device's rendezvous, where tensors
// sent from other devices meet the Recvs waiting for them (actors/rendezvous.h).
//
// Protocol:
//   (prepare_atom, executable_spec)              -> uint64_t handle   kernels built once
//   (run_atom, handle, step_id, vector<tensor>)  -> vector<tensor>    runs one step
//   (abort_step_atom, step_id, caf::error)                            aborts that step here:
//       its running partition stops, parked Recvs fail, later traffic for it is refused
//   (rv_send_atom, step_id, transfer_key_ptr, tensor)    a tensor from a _Send elsewhere
//   (rv_recv_atom, step_id, transfer_key_ptr, reply<tensor>)  a local _Recv asks (from
//       outside this actor's handlers; inside them it asks the rendezvous directly)
//   (rv_cancel_atom, step_id, transfer_key_ptr)          a local _Recv's step cancelled it
//
// Cheap nodes of a step run in the handler that starts it (the executor's rule), the
// rest on the compute pool; no handler ever waits. Completion comes back as a message
// that answers the pending request. Errors come back as caf::error naming the node.
#pragma once

#include <caf/all.hpp>

#include <string>

#include "actors/runtime_device.h"
#include "core/thread_pool.h"
#include "kernels/kernel_registry.h"

namespace troupe::actors {

using abort_step_atom = caf::atom_constant<caf::atom("abortstep")>;

struct device_options {
  // REQUIRES: non-null and outliving the actor; its pool runs the steps.
  runtime_device* device = nullptr;
  const kernels::kernel_registry* kernels = &kernels::kernel_registry::builtin();
};

// Spawns the actor and records it as the device's self().
caf::actor spawn_device(caf::actor_system& system, device_options options);

}  // namespace troupe::actors
