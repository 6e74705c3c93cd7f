// Variable shards as actors.
//
// Each resource variable is one actor holding the current value (in a variable_cell it
// shares with its updates, below). Updates to it are serialized by its lease; a read
// hands out the current tensor, which the reader may keep: an update never writes into a
// buffer a reader still holds (it copies first: copy on write), so a read is a snapshot.
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
//   (var_drain_atom)                        a lease came back directly: serve the
//                                           requests that wait for it
//   (var_withdraw_atom, id)                 the lease request `id` belongs to a step that
//                                           aborted: if it still waits, it fails `cancelled`
// Requests that arrive during a lease wait, in order, inside the actor (no thread waits);
// at most k_max_waiting of them, beyond which a request fails with resource_exhausted
// naming the variable. An update kernel takes a lease directly through the variable's
// cell (variable_cell::try_lease, on its own thread, no message) while nothing waits in
// the actor, and asks the actor otherwise, so requests keep their order; it gives the
// lease back directly too (variable_cell::try_release), and tells the actor
// (var_drain_atom) when requests wait for it. A direct release fails once the variable
// is gone: its actor ended, or its resource let go of it (which tells the actor to end);
// one by message, once the actor ended. Reads (ReadVariableOp, ResourceGather) take the
// value directly the same way (variable_cell::try_read). Not under a simulation (its
// world orders every exchange with an actor in virtual time), nor with
// TROUPE_VARIABLE_DIRECT=0.
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
#include <mutex>
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
using var_drain_atom = caf::atom_constant<caf::atom("vardrain")>;

// How many requests may wait behind a lease.
constexpr std::size_t k_max_waiting = 100000;

// A variable's value and lease, shared by its actor and its kernels: an update takes the
// lease, a read the value, directly, on its own thread, when nothing waits in the actor
// (no message, no hand-off to the actor's thread); otherwise it asks the actor, which
// serves requests in their order. The actor's handlers take the same lock.
struct variable_cell {
  // The value for an update, when the variable has one, is not leased and no request
  // waits: true, `*out` set and the lease held (give it back with try_release, or by
  // var_release_atom). False: ask the actor (var_lease_atom).
  bool try_lease(tensor* out);
  // The value for a read (a snapshot, as var_read_atom's), under the same conditions:
  // true and `*out` set, or false: ask the actor.
  bool try_read(tensor* out);
  // Gives a lease back (taken either way) with the updated value: true, with `*drain`
  // set when requests wait in the actor (send it var_drain_atom); false when the
  // variable is gone (the value with it: the update fails `unavailable`).
  bool try_release(tensor value, bool* drain);

  // The state, under `mutex`: for the variable's actor (actors/variable.cc) alone.
  std::mutex mutex;
  tensor value;             // uninitialized until assigned
  bool leased = false;
  std::size_t waiting = 0;  // requests waiting in the actor
  bool alive = true;        // false once the actor has ended or its resource let go of it

 private:
  // Whether the value may be taken without the actor: alive, not leased, no request
  // waiting, initialized (under `mutex`).
  bool free() const;
};

class variable_resource final : public actor_resource {
 public:
  static constexpr const char* kind_name = "variable";
  // `lease_key` orders this variable among all others for multi-variable updates. `cell`:
  // the one its actor was spawned with (null: updates always ask the actor).
  variable_resource(std::string name, std::string lease_key, dtype type, partial_shape shape, caf::actor actor,
                    std::shared_ptr<variable_cell> cell = nullptr)
      : actor_resource(kind_name, std::move(name), std::move(actor)), lease_key_(std::move(lease_key)), dtype_(type),
        shape_(std::move(shape)), cell_(std::move(cell)) {}
  // The variable is gone for its updates before its actor is told to end.
  ~variable_resource() override {
    if (cell_ == nullptr) return;
    std::lock_guard<std::mutex> lock(cell_->mutex);
    cell_->alive = false;
  }
  variable_cell* cell() const { return cell_.get(); }

  dtype value_type() const { return dtype_; }
  const partial_shape& declared_shape() const { return shape_; }
  // The global order in which multi-variable updates lease their variables.
  const std::string& lease_key() const { return lease_key_; }
 private:
  std::string lease_key_;
  dtype dtype_;
  partial_shape shape_;
  std::shared_ptr<variable_cell> cell_;
};

// Spawns the actor of variable `name` holding values of `type` (uninitialized) in `cell`
// (null: a cell of its own, which no update reaches directly).
caf::actor spawn_variable(caf::actor_system& system, std::string name, dtype type, partial_shape shape,
                          std::shared_ptr<variable_cell> cell = nullptr);

}  // namespace troupe::actors
