// The device actor: owns one device (a CPU and its compute pool) and runs the
// partitions registered with it; it also holds the device's rendezvous, where tensors
// sent from other devices meet the Recvs waiting for them (actors/rendezvous.h).
//
// Protocol:
//   (prepare_atom, token, executable_spec)       -> uint64_t handle   kernels built once,
//       on the compute pool (preparing a large partition never holds the actor's thread)
//   (unprepare_atom, handle)                                          forgets a partition
//   (forget_atom, token)                         the requester gave up on the preparations
//       it sent with `token` (its request timed out): drops them, built or not
//   (run_atom, handle, step_id, vector<tensor>)  -> vector<tensor>    runs one step
//   (run_atom, handle, step_id, vector<tensor>, reply<vector<tensor>>)  the same, answered
//       through the reply and closed by the thread that ends the step (a kernel's, a link
//       reader's), with no hand-off to the actor's thread (a task service's runs from its
//       links; start_run below starts one without the actor)
//   (abort_step_atom, step_id, caf::error)                            aborts that step here:
//       its running partition stops, parked Recvs fail, later traffic for it is refused
//   (rv_send_atom, step_id, transfer_key_ptr, tensor)    a tensor from a _Send elsewhere
//       (one from another process comes straight into the rendezvous: deliver_transfer)
//   (rv_recv_atom, step_id, transfer_key_ptr, reply<tensor>)  a local _Recv asks (from
//       outside this actor's handlers; inside them it asks the rendezvous directly)
//   (rv_cancel_atom, step_id, transfer_key_ptr)          a local _Recv's step cancelled it
//   (stats_atom)                                 -> device_stats      what it holds now
//   (straggle_atom, int64 us)                    -> bool   each step partition starts this
//       much later from now on (0: no more): the fault injector's straggle, for a device
//       reached by message (a task in another process)
//   (link_fault_atom, to_task, int64 delay_us, double drop, uint64 seed) -> bool   faults
//       on this device's Sends to `to_task` (runtime_device::set_link_fault), likewise
//   (incarnation_atom)                           -> uint64_t  its task's current life
//       (runtime_device::incarnation; a stand-in answers once its task's hello said)
//
// Guarantees:
//  1. Every request is answered exactly once, also when the actor ends: its exit answers
//     the steps still running and the preparations still building with `unavailable`
//     naming the device (and cancels the running steps' waiting kernels).
//  1a. Partitions and steps have owners (whoever sent prepare and run, a session's
//     master), which the device monitors: when an owner goes down without cleaning up,
//     its partitions are dropped and its running steps aborted.
//  2. A step that ends here (done or failed) closes its rendezvous entries: tensors that
//     arrive for it later are dropped, not kept. A second tensor for one transfer fails
//     the step (internal: the partition is wrong). Tensors waiting for their Recv are
//     bounded in bytes (device_options::rendezvous_limit): one beyond it fails its step
//     with resource_exhausted naming the device.
//  3. No handler waits or runs unbounded work: cheap nodes of a step run in the handler
//     that starts or wakes them (the executor's rule), the rest on the compute pool.
//     Completion comes back as a message that answers the pending request (a run with a
//     reply is answered and closed where it ends). Errors come back as caf::error naming
//     the node.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <string>

#include "actors/rendezvous.h"
#include "actors/runtime_device.h"
#include "core/thread_pool.h"
#include "kernels/kernel_registry.h"

namespace troupe::actors {

using abort_step_atom = caf::atom_constant<caf::atom("abortstep")>;
using unprepare_atom = caf::atom_constant<caf::atom("unprepare")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using forget_atom = caf::atom_constant<caf::atom("forgetprep")>;
using straggle_atom = caf::atom_constant<caf::atom("straggle")>;
using link_fault_atom = caf::atom_constant<caf::atom("linkfault")>;
using incarnation_atom = caf::atom_constant<caf::atom("incarnat")>;

struct device_options {
  // REQUIRES: non-null and outliving the actor; its pool runs the steps.
  runtime_device* device = nullptr;
  const kernels::kernel_registry* kernels = &kernels::kernel_registry::builtin();
  // Bytes of arrived tensors the rendezvous keeps for Recvs that have not asked yet.
  std::int64_t rendezvous_limit = std::int64_t{1} << 30;
};

// What a device holds now.
struct device_stats {
  std::int64_t partitions = 0;       // registered (prepared) partitions
  std::int64_t preparing = 0;        // partitions being built on the pool
  std::int64_t running_steps = 0;    // steps running here
  std::int64_t rendezvous_entries = 0;  // tensors and Recvs waiting in the rendezvous
  std::int64_t rendezvous_bytes = 0;    // bytes of the tensors among them
  std::int64_t memory_in_use = 0;       // bytes its kernels' buffers hold (core/memory.h)
};

// Spawns the actor and records it as the device's self(), giving the device its
// rendezvous (runtime_device::rendezvous) first.
caf::actor spawn_device(caf::actor_system& system, device_options options);

// A tensor from a _Send in another process, delivered by the link's reader into the
// rendezvous of `dev` (spawned by spawn_device) on the reader's own thread, as the
// actor's rv_send_atom handler would: no hand-off to the actor (a thread's wake-up saved
// per tensor). A Recv it completes runs the cheap nodes it wakes on this thread (the
// executor's rule for threads off the compute pool). What the table refuses (guarantee
// 2) aborts the step in the table at once and then through the actor.
void deliver_transfer(runtime_device& dev, std::int64_t step_id, const transfer_key_ptr& key, tensor value);

// Starts partition `handle`'s run of step `step_id` on `dev` (spawned by spawn_device)
// from this thread, as the actor's run with a reply would, among the device's running
// steps (an abort, the device's end and `owner`'s, which prepared the partition, reach
// it): no hand-off to the actor before the step starts (a link's reader, for a run that
// came over it). Cheap nodes run on this thread. False, with `feeds` untouched and
// nothing started, when the actor must decide: a partition it does not have, a step
// aborted here, feeds that do not fit, an injected delay, a simulation, a device killed
// or ended; then send it the run.
bool start_run(runtime_device& dev, std::uint64_t handle, std::int64_t step_id, std::vector<tensor>& feeds,
               const reply<std::vector<tensor>>& answer, const caf::actor_addr& owner);

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::device_stats)
