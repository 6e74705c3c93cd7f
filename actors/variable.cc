#include "actors/variable.h"

#include <deque>
#include <functional>

#include "actors/messages.h"
#include "actors/spawn.h"
#include "kernels/kernel.h"

namespace troupe::actors {

namespace {

// What a request does once its turn comes: the part under the cell's lock, which returns
// what runs after it is released (the reply: it may come back to the variable).
using action = std::function<std::function<void()>(variable_cell&)>;

struct variable_state {
  std::string var;
  dtype type = dtype::invalid;
  partial_shape shape;
  std::shared_ptr<variable_cell> cell;  // the value and its lease (variable.h)
  // Requests that arrived during a lease, in order: what to do, how to refuse it, and its
  // id (a lease request's, for withdrawal; 0 otherwise). Their count is the cell's
  // `waiting`, which keeps direct leases away while any wait.
  struct waiting_request {
    std::uint64_t id;
    action act;
    std::function<void(status)> refuse;
  };
  std::deque<waiting_request> waiting;
  ~variable_state() {
    if (cell == nullptr) return;
    std::lock_guard<std::mutex> lock(cell->mutex);
    cell->alive = false;  // no direct lease, read or release from now on
  }
  static inline const char* name = "troupe-variable";
};

using variable_actor = caf::stateful_actor<variable_state>;

status uninitialized(const std::string& var) {
  return failed_precondition_error("variable '", var,
                                   "' is uninitialized: run its initializer (an AssignVariableOp) first");
}

caf::behavior variable_behavior(variable_actor* self, std::string name, dtype type, partial_shape shape,
                                std::shared_ptr<variable_cell> cell) {
  self->state.var = std::move(name);
  self->state.type = type;
  self->state.shape = std::move(shape);
  self->state.cell = cell != nullptr ? std::move(cell) : std::make_shared<variable_cell>();
  // Serves a request now, or after the current lease ends, keeping arrival order; refuses
  // it when too many wait already.
  auto when_free = [self](std::uint64_t id, action act, std::function<void(status)> refuse) {
    auto& s = self->state;
    std::function<void()> after;
    {
      std::lock_guard<std::mutex> lock(s.cell->mutex);
      if (!s.cell->leased && s.waiting.empty()) {
        after = act(*s.cell);
      } else if (s.waiting.size() >= k_max_waiting) {
        after = [refuse, e = resource_exhausted_error("variable '", s.var, "' has ", s.waiting.size(),
                                                      " requests waiting behind its lease already")] { refuse(e); };
      } else {
        s.waiting.push_back({id, std::move(act), std::move(refuse)});
        s.cell->waiting = s.waiting.size();
      }
    }
    if (after) after();
  };
  auto drain = [self] {
    auto& s = self->state;
    for (;;) {
      std::function<void()> after;
      {
        std::lock_guard<std::mutex> lock(s.cell->mutex);
        if (s.cell->leased || s.waiting.empty()) return;
        auto next = std::move(s.waiting.front());
        s.waiting.pop_front();
        s.cell->waiting = s.waiting.size();
        after = next.act(*s.cell);
      }
      if (after) after();
    }
  };
  const std::string var = self->state.var;
  return {
      [=](var_read_atom, const reply<tensor>& r) {
        when_free(
            0,
            [r, var](variable_cell& c) -> std::function<void()> {
              if (!c.value.initialized()) return [r, var] { r(uninitialized(var)); };
              return [r, value = c.value] { r(value); };
            },
            r);
      },
      [=](var_assign_atom, const tensor& value, const status_reply& r) {
        when_free(
            0,
            [self, value, r](variable_cell& c) -> std::function<void()> {
              auto& s = self->state;
              if (value.type() != s.type) {
                return [r, e = invalid_argument_error("cannot assign a ", dtype_name(value.type()),
                                                      " tensor to variable '", s.var, "' of dtype ",
                                                      dtype_name(s.type))] { r(e); };
              }
              if (!s.shape.is_compatible_with(value.shape())) {
                return [r, e = invalid_argument_error("cannot assign a tensor of shape ", value.shape().to_string(),
                                                      " to variable '", s.var, "' of shape ", s.shape.to_string())] {
                  r(e);
                };
              }
              c.value = value;
              return [r] { r(done_t{}); };
            },
            r);
      },
      [=](var_init_atom, const reply<bool>& r) {
        when_free(
            0, [r](variable_cell& c) -> std::function<void()> { return [r, v = c.value.initialized()] { r(v); }; },
            r);
      },
      [=](var_lease_atom, std::uint64_t id, const reply<tensor>& r) {
        when_free(
            id,
            [r, var](variable_cell& c) -> std::function<void()> {
              if (!c.value.initialized()) return [r, var] { r(uninitialized(var)); };
              // The value as it is, though readers may still share it: the update copies
              // it first when they do (readers keep their snapshots), on the update's
              // thread, the compute pool for a large variable (a copy of one here held
              // every request behind it: variable_kernels.cc, variable_update_kernel).
              tensor leased = std::move(c.value);
              c.value = tensor();
              c.leased = true;
              return [r, leased = std::move(leased)]() mutable { r(std::move(leased)); };
            },
            r);
      },
      [=](var_withdraw_atom, std::uint64_t id) {
        auto& s = self->state;
        std::function<void(status)> refuse;
        {
          std::lock_guard<std::mutex> lock(s.cell->mutex);
          for (auto it = s.waiting.begin(); it != s.waiting.end(); ++it) {
            if (it->id != id) continue;
            refuse = std::move(it->refuse);
            s.waiting.erase(it);
            s.cell->waiting = s.waiting.size();
            break;
          }
        }
        // (Not waiting any more: already served.)
        if (refuse) refuse(cancelled_error("the lease of variable '", s.var, "' was withdrawn: its step aborted"));
      },
      [=](var_release_atom, tensor& value, const status_reply& r) {
        auto& s = self->state;
        {
          std::lock_guard<std::mutex> lock(s.cell->mutex);
          s.cell->value = std::move(value);
          s.cell->leased = false;
        }
        r(done_t{});
        drain();
      },
      [=](var_drain_atom) { drain(); },
  };
}

}  // namespace

caf::actor spawn_variable(caf::actor_system& system, std::string name, dtype type, partial_shape shape,
                          std::shared_ptr<variable_cell> cell) {
  return spawn_unpinned(system, variable_behavior, std::move(name), type, std::move(shape), std::move(cell));
}

bool variable_cell::free() const { return alive && !leased && waiting == 0 && value.initialized(); }

bool variable_cell::try_read(tensor* out) {
  std::lock_guard<std::mutex> lock(mutex);
  if (!free()) return false;
  *out = value;
  return true;
}

bool variable_cell::try_release(tensor value, bool* drain) {
  std::lock_guard<std::mutex> lock(mutex);
  if (!alive) return false;
  this->value = std::move(value);
  leased = false;
  *drain = waiting > 0;
  return true;
}

bool variable_cell::try_lease(tensor* out) {
  std::lock_guard<std::mutex> lock(mutex);
  if (!free()) return false;
  *out = std::move(value);
  value = tensor();
  leased = true;
  return true;
}

}  // namespace troupe::actors
