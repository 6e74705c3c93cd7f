#include "actors/variable.h"

#include <deque>
#include <functional>

#include "actors/messages.h"
#include "actors/spawn.h"
#include "kernels/kernel.h"

namespace troupe::actors {

namespace {

struct variable_state {
  std::string var;
  dtype type = dtype::invalid;
  partial_shape shape;
  tensor value;                                // uninitialized until assigned
  bool leased = false;
  // Requests that arrived during a lease, in order: how to serve one, how to refuse it,
  // and its id (a lease request's, for withdrawal; 0 otherwise).
  struct waiting_request {
    std::uint64_t id;
    std::function<void()> serve;
    std::function<void(status)> refuse;
  };
  std::deque<waiting_request> waiting;
  static inline const char* name = "troupe-variable";
};

using variable_actor = caf::stateful_actor<variable_state>;

status uninitialized(const variable_state& s) {
  return failed_precondition_error("variable '", s.var,
                                   "' is uninitialized: run its initializer (an AssignVariableOp) first");
}

caf::behavior variable_behavior(variable_actor* self, std::string name, dtype type, partial_shape shape) {
  self->state.var = std::move(name);
  self->state.type = type;
  self->state.shape = std::move(shape);
  // Serves a request now, or after the current lease ends, keeping arrival order; refuses
  // it when too many wait already.
  auto when_free = [self](std::uint64_t id, std::function<void()> serve, std::function<void(status)> refuse) {
    auto& s = self->state;
    if (!s.leased && s.waiting.empty()) return serve();
    if (s.waiting.size() >= k_max_waiting) {
      return refuse(resource_exhausted_error("variable '", s.var, "' has ", s.waiting.size(),
                                             " requests waiting behind its lease already"));
    }
    s.waiting.push_back({id, std::move(serve), std::move(refuse)});
  };
  auto drain = [self] {
    while (!self->state.leased && !self->state.waiting.empty()) {
      auto next = std::move(self->state.waiting.front());
      self->state.waiting.pop_front();
      next.serve();
    }
  };
  return {
      [=](var_read_atom, const reply<tensor>& r) {
        when_free(
            0,
            [self, r] {
              auto& s = self->state;
              if (!s.value.initialized()) return r(uninitialized(s));
              r(s.value);
            },
            r);
      },
      [=](var_assign_atom, const tensor& value, const status_reply& r) {
        when_free(
            0,
            [self, value, r] {
              auto& s = self->state;
              if (value.type() != s.type) {
                return r(invalid_argument_error("cannot assign a ", dtype_name(value.type()), " tensor to variable '",
                                                s.var, "' of dtype ", dtype_name(s.type)));
              }
              if (!s.shape.is_compatible_with(value.shape())) {
                return r(invalid_argument_error("cannot assign a tensor of shape ", value.shape().to_string(),
                                                " to variable '", s.var, "' of shape ", s.shape.to_string()));
              }
              s.value = value;
              r(done_t{});
            },
            r);
      },
      [=](var_init_atom, const reply<bool>& r) {
        when_free(0, [self, r] { r(self->state.value.initialized()); }, r);
      },
      [=](var_lease_atom, std::uint64_t id, const reply<tensor>& r) {
        when_free(
            id,
            [self, r] {
              auto& s = self->state;
              if (!s.value.initialized()) return r(uninitialized(s));
              // The value as it is, though readers may still share it: the update copies
              // it first when they do (readers keep their snapshots), on the update's
              // thread, the compute pool for a large variable (a copy of one here held
              // every request behind it: variable_kernels.cc, variable_update_kernel).
              tensor exclusive = std::move(s.value);
              s.value = tensor();
              s.leased = true;
              r(std::move(exclusive));
            },
            r);
      },
      [=](var_withdraw_atom, std::uint64_t id) {
        auto& s = self->state;
        for (auto it = s.waiting.begin(); it != s.waiting.end(); ++it) {
          if (it->id != id) continue;
          auto withdrawn = std::move(*it);
          s.waiting.erase(it);
          withdrawn.refuse(cancelled_error("the lease of variable '", s.var, "' was withdrawn: its step aborted"));
          return;
        }  // not waiting any more: already served
      },
      [=](var_release_atom, tensor& value, const status_reply& r) {
        auto& s = self->state;
        s.value = std::move(value);
        s.leased = false;
        r(done_t{});
        drain();
      },
  };
}

}  // namespace

caf::actor spawn_variable(caf::actor_system& system, std::string name, dtype type, partial_shape shape) {
  return spawn_unpinned(system, variable_behavior, std::move(name), type, std::move(shape));
}

}  // namespace troupe::actors
