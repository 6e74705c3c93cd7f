// Variable shards as actors.
//
// Each resource variable is one actor holding the current value. Every update to it
// passes through its mailbox, so updates are serialized; a read hands out the current
// tensor, which the reader may keep: an update never writes into a buffer a reader still
// holds (it copies first: copy on write), so a read is a snapshot.
//
// Protocol (every request carries a reply, called exactly once; see actors/reply.h):
//   (var_read_atom, reply<tensor>)          the value; failed_precondition if uninitialized
//   (var_assign_atom, tensor, status_reply) replaces the value (dtype checked)
//   (var_init_atom, reply<bool>)            whether the variable has a value
//   (var_lease_atom, id, reply<tensor>)     exclusive use for an update: the reply gets the
//                                           value, which readers may still share: the
//                                           update copies it first when they do (on its
//                                           own thread, or its device), see
//                                           variable_kernels.cc; the variable
//                                           answers nothing else until
//   (var_release_atom, tensor, status_reply) gives the (updated) value back, answered once
//                                           it is stored (an update whose variable died
//                                           meanwhile fails: its write is not lost silently)
//   (var_withdraw_atom, id)                 the lease request `id` belongs to a step that
//                                           aborted: if it still waits, it fails `cancelled`
// Requests that arrive during a lease wait, in order, inside the actor (no thread waits);
// at most k_max_waiting of them, beyond which a request fails with resource_exhausted
// naming the variable.
//
// Leases have owners: a lease request waits no longer than its step (an abort withdraws
// it, and steps have a finite timeout), and a granted lease is held by one update
// operation that returns it on every path: after the update, after a failure, or when
// the operation is destroyed. An update touching several variables (Adam: var, m, v)
// leases them in the global order of lease_key() (device, container, name: the same in
// every run), so two such updates cannot deadlock.
//
// Thread safety: messages may come from any thread.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <memory>
#include <string>

#include "actors/actor_resource.h"
#include "actors/reply.h"
#include "core/resource.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace troupe::actors {

using var_read_atom = caf::atom_constant<caf::atom("varread")>;
using var_assign_atom = caf::atom_constant<caf::atom("varassign")>;
using var_init_atom = caf::atom_constant<caf::atom("varinit")>;
using var_lease_atom = caf::atom_constant<caf::atom("varlease")>;
using var_release_atom = caf::atom_constant<caf::atom("varrelease")>;
using var_withdraw_atom = caf::atom_constant<caf::atom("varwithdr")>;

// How many requests may wait behind a lease.
constexpr std::size_t k_max_waiting = 100000;

class variable_resource final : public actor_resource {
 public:
  static constexpr const char* kind_name = "variable";
  // `lease_key` orders this variable among all others for multi-variable updates.
  variable_resource(std::string name, std::string lease_key, dtype type, partial_shape shape, caf::actor actor)
      : actor_resource(kind_name, std::move(name), std::move(actor)), lease_key_(std::move(lease_key)), dtype_(type),
        shape_(std::move(shape)) {}

  dtype value_type() const { return dtype_; }
  const partial_shape& declared_shape() const { return shape_; }
  // The global order in which multi-variable updates lease their variables.
  const std::string& lease_key() const { return lease_key_; }
 private:
  std::string lease_key_;
  dtype dtype_;
  partial_shape shape_;
};

// Spawns the actor of variable `name` holding values of `type` (uninitialized).
caf::actor spawn_variable(caf::actor_system& system, std::string name, dtype type,
                          partial_shape shape);

}  // namespace troupe::actors
