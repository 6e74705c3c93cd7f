#include "actors/variable.h"

#include <deque>
#include <functional>

#include "actors/messages.h"
#include "actors/spawn.h"

namespace troupe::actors {

variable_resource::~variable_resource() {
  // The last handle is gone: nothing can reach the actor any more.
  caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
}

namespace {

struct variable_state {
  std::string var;
  dtype type = dtype::invalid;
  partial_shape shape;
  tensor value;                                // uninitialized until assigned
  bool leased = false;
  std::deque<std::function<void()>> waiting;   // requests that arrived during a lease
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
  // Runs `fn` now, or after the current lease ends, keeping arrival order.
  auto when_free = [self](std::function<void()> fn) {
    if (self->state.leased || !self->state.waiting.empty()) {
      self->state.waiting.push_back(std::move(fn));
    } else {
      fn();
    }
  };
  auto drain = [self] {
    while (!self->state.leased && !self->state.waiting.empty()) {
      auto fn = std::move(self->state.waiting.front());
      self->state.waiting.pop_front();
      fn();
    }
  };
  return {
      [=](var_read_atom, const reply<tensor>& r) {
        when_free([self, r] {
          auto& s = self->state;
          if (!s.value.initialized()) return r(uninitialized(s));
          r(s.value);
        });
      },
      [=](var_assign_atom, const tensor& value, const status_reply& r) {
        when_free([self, value, r] {
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
        });
      },
      [=](var_init_atom, const reply<bool>& r) {
        when_free([self, r] { r(self->state.value.initialized()); });
      },
      [=](var_lease_atom, const reply<tensor>& r) {
        when_free([self, r] {
          auto& s = self->state;
          if (!s.value.initialized()) return r(uninitialized(s));
          // Hand out a buffer no reader shares: the value itself when we hold the only
          // reference, a copy otherwise (readers keep their snapshots).
          tensor exclusive = s.value.ref_count_is_one() ? std::move(s.value) : s.value.deep_copy();
          s.value = tensor();
          s.leased = true;
          r(std::move(exclusive));
        });
      },
      [=](var_release_atom, tensor& value) {
        auto& s = self->state;
        s.value = std::move(value);
        s.leased = false;
        drain();
      },
  };
}

}  // namespace

caf::actor spawn_variable(caf::actor_system& system, std::string name, dtype type, partial_shape shape) {
  return spawn_unpinned(system, variable_behavior, std::move(name), type, std::move(shape));
}

}  // namespace troupe::actors
