// actor_resource: a resource (core/resource.h) whose state lives in an actor, the way a
// variable, a queue or a custom op's shared state (examples/throttle_op.cc) does. The
// device's resource manager holds it under (container, name); when its last holder lets
// go (the entry is erased, or the cluster shuts down) the actor is told to exit, and the
// requests still parked in it fail with `unavailable` (actors/reply.h).
//
//   auto bucket = find_or_make<my_resource>(*device, container, name, [&] {
//     return std::make_shared<my_resource>(spawn_unpinned(device->system(), my_behavior), ...);
//   });                                       // result<std::shared_ptr<my_resource>>
//   caf::anon_send((*bucket)->actor(), my_request{..., reply<T>(fn, (*bucket)->peer())});
//
// Thread safety: immutable once made; find_or_make may be called from any thread.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "actors/runtime_device.h"
#include "actors/withdrawable.h"
#include "core/resource.h"
#include "core/status.h"
#include "kernels/kernel.h"

namespace troupe::actors {

class actor_resource : public resource {
 public:
  // `kind` names what it is in messages ("variable", "queue", "throttle").
  actor_resource(std::string kind, std::string name, caf::actor actor)
      : kind_(std::move(kind)), name_(std::move(name)), actor_(std::move(actor)),
        peer_(std::make_shared<const std::string>(str_cat(kind_, " '", name_, "'"))) {}
  ~actor_resource() override { caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown); }
  actor_resource(const actor_resource&) = delete;
  actor_resource& operator=(const actor_resource&) = delete;

  std::string_view kind() const override { return kind_; }
  const std::string& name() const { return name_; }
  const caf::actor& actor() const { return actor_; }
  // "queue 'q'": how messages name it, and whom a reply names when the actor is gone
  // before answering.
  const std::string& label() const { return *peer_; }
  const std::shared_ptr<const std::string>& peer() const { return peer_; }
  // A fresh id (never 0) for a request its users may withdraw (actors/withdrawable.h).
  std::uint64_t next_request_id() { return next_request_id_.fetch_add(1, std::memory_order_relaxed) + 1; }

 private:
  std::string kind_;
  std::string name_;
  caf::actor actor_;
  std::shared_ptr<const std::string> peer_;
  std::atomic<std::uint64_t> next_request_id_{0};
};

// The R under (container, name) on `device`, made by `make()` (a std::shared_ptr<R>) when
// absent; the manager's lock makes concurrent first callers get the same one. Errors:
// another kind of resource already under that name (naming both kinds), or make()'s.
template <class R, class Make>
result<std::shared_ptr<R>> find_or_make(runtime_device& device, const std::string& container, const std::string& name,
                                        Make make) {
  TROUPE_RETURN_IF_ERROR(device.alive());
  auto found = device.resources().lookup_or_create(container, name, [&]() -> result<std::shared_ptr<resource>> {
    result<std::shared_ptr<R>> made = make();
    if (!made.ok()) return made.error();
    return std::shared_ptr<resource>(std::move(*made));
  });
  if (!found.ok()) return found.error();
  auto typed = std::dynamic_pointer_cast<R>(*found);
  if (typed != nullptr) return typed;
  return invalid_argument_error("resource '", name, "' in container '", container, "' on ", device.name(), " is a ",
                                (*found)->kind(), ", not a ", R::kind_name, "; give this node another shared_name");
}

// The R under (container, name) on `device`; not_found naming it (and `hint`, what makes
// one) when there is none or it is another kind.
template <class R>
result<std::shared_ptr<R>> find_existing(runtime_device& device, const std::string& container, const std::string& name,
                                         std::string_view hint) {
  TROUPE_RETURN_IF_ERROR(device.alive());
  auto found = std::dynamic_pointer_cast<R>(device.resources().lookup(container, name));
  if (found != nullptr) return found;
  return not_found_error("no ", R::kind_name, " '", name, "' in container '", container, "' on ", device.name(), ": ",
                         hint);
}

// The runtime device a kernel is being built for; null, with `c` failed (naming the op),
// when it runs outside the actor runtime (run_kernel), where no actor can be reached.
inline runtime_device* require_runtime(kernels::kernel_construction& c) {
  auto* dev = runtime_device::from(c.device());
  if (dev == nullptr) {
    c.fail(failed_precondition_error(c.node().op(), " '", c.node().name(), "' keeps its state in an actor, so it needs "
                                     "the actor runtime: run it through actors::session or a cluster, not on its own"));
  }
  return dev;
}

// Where a kernel's actor resource lives, as TensorFlow's resource ops say it: the device,
// and the key in its resource manager from the node's `container` and `shared_name`
// attributes (an empty shared_name meaning the node's own name).
struct resource_key {
  runtime_device* device = nullptr;
  std::string container, name;

  // False (with `c` failed) when an attribute is missing, or outside the actor runtime.
  bool read(kernels::kernel_construction& c) {
    if (!c.get_attrs("container", &container, "shared_name", &name)) return false;
    if (name.empty()) name = c.node().name();
    device = require_runtime(c);
    return device != nullptr;
  }
  template <class R, class Make>
  result<std::shared_ptr<R>> find_or_make(Make make) const {
    return actors::find_or_make<R>(*device, container, name, std::move(make));
  }
  template <class R>
  result<std::shared_ptr<R>> find_existing(std::string_view hint) const {
    return actors::find_existing<R>(*device, container, name, hint);
  }
};

// The R behind input `index` (a resource handle scalar), or null after failing ctx with
// an error that says what the input holds instead.
template <class R>
R* resolve_input(kernels::kernel_context& ctx, int index) {
  const tensor& h = ctx.input(index);
  if (!h.initialized() || h.type() != dtype::resource || h.num_elements() != 1) {
    ctx.fail_invalid_argument("input ", index, " must be a ", R::kind_name, " handle (a resource scalar) but is ",
                              h.debug_string(4));
    return nullptr;
  }
  auto* r = h.resource_value().template get<R>();
  if (r == nullptr) {
    ctx.fail_invalid_argument("input ", index, " must be a ", R::kind_name, " handle but is ",
                              h.resource_value().debug_string());
  }
  return r;
}

// A kernel that asks an existing R a question its actor answers at once (statistics, a
// size), whose answer's tensors are the node's outputs: it sends (Atom,
// reply<std::vector<tensor>>) to the R its `container` and `shared_name` name (which
// must be given). Register it as the op's kernel: make_kernel<query_kernel<R, Atom>>.
template <class R, class Atom>
class query_kernel final : public kernels::async_op_kernel {
 public:
  explicit query_kernel(kernels::kernel_construction& c) : async_op_kernel(c) {
    std::string name;
    if (c.get_attr("shared_name", &name) && name.empty()) {
      c.fail(invalid_argument_error("shared_name must name the ", R::kind_name, " to read"));
    } else {
      key_.read(c);
    }
  }
  void compute_async(kernels::kernel_context& ctx, done_callback done) override {
    auto found = key_.find_existing<R>(str_cat("a node with that shared_name on this device creates it"));
    if (!found.ok()) return ctx.fail(found.error()), done();
    ask_for_outputs(ctx, std::move(done), (*found)->peer(), [&](reply<std::vector<tensor>> r) {
      caf::anon_send((*found)->actor(), Atom::value, std::move(r));
    });
  }

 private:
  resource_key key_;
};

}  // namespace troupe::actors
