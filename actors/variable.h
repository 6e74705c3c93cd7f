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
//   (var_lease_atom, reply<tensor>)         exclusive use for an update: the reply gets a
//                                           tensor no one else holds; the variable answers
//                                           nothing else until
//   (var_release_atom, tensor)              gives the (updated) value back.
// Requests that arrive during a lease wait, in order, inside the actor (no thread waits).
// An update touching several variables (Adam: var, m, v) leases them in the global
// order of lease_order(), so two such updates cannot deadlock.
//
// Thread safety: messages may come from any thread.
#pragma once

#include <caf/all.hpp>

#include <string>

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

class variable_resource final : public resource {
 public:
  variable_resource(std::string name, dtype type, partial_shape shape, caf::actor actor)
      : name_(std::move(name)), dtype_(type), shape_(std::move(shape)), actor_(std::move(actor)) {}
  ~variable_resource() override;

  std::string_view kind() const override { return "variable"; }
  const std::string& name() const { return name_; }
  dtype value_type() const { return dtype_; }
  const partial_shape& declared_shape() const { return shape_; }
  const caf::actor& actor() const { return actor_; }
  // The global order in which multi-variable updates lease their variables.
  std::uintptr_t lease_order() const { return reinterpret_cast<std::uintptr_t>(this); }

 private:
  std::string name_;
  dtype dtype_;
  partial_shape shape_;
  caf::actor actor_;
};

// Spawns the actor of variable `name` holding values of `type` (uninitialized).
caf::actor spawn_variable(caf::actor_system& system, std::string name, dtype type,
                          partial_shape shape);

}  // namespace troupe::actors
