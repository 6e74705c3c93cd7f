#include "actors/device_actor.h"

#include <map>

#include "actors/messages.h"

namespace troupe::actors {
namespace {

struct device_state {
  device_options options;
  std::map<std::uint64_t, std::shared_ptr<const executable>> partitions;
  std::map<std::uint64_t, caf::response_promise> pending;
  std::uint64_t next_handle = 1;
  std::uint64_t next_request = 1;
  static inline const char* name = "troupe-device";
};

caf::behavior device_behavior(caf::stateful_actor<device_state>* self, device_options options) {
  self->state.options = std::move(options);
  return {
      [=](prepare_atom, const executable_spec& spec) -> caf::result<std::uint64_t> {
        auto exec = executable::create(spec, *self->state.options.kernels);
        if (!exec.ok()) return to_caf_error(exec.error());
        std::uint64_t handle = self->state.next_handle++;
        self->state.partitions.emplace(handle, std::move(*exec));
        return handle;
      },
      [=](run_atom, std::uint64_t handle, std::int64_t step_id,
          std::vector<tensor>& feeds) -> caf::result<std::vector<tensor>> {
        auto it = self->state.partitions.find(handle);
        if (it == self->state.partitions.end()) {
          return to_caf_error(not_found_error("device ", self->state.options.name,
                                              " has no partition ", handle));
        }
        std::shared_ptr<const executable> exec = it->second;
        status s = exec->check_feeds(feeds);
        if (!s.ok()) return to_caf_error(s);
        std::uint64_t request = self->state.next_request++;
        auto promise = self->make_response_promise<std::vector<tensor>>();
        self->state.pending.emplace(request, promise);
        compute_pool* pool = self->state.options.pool;
        caf::actor me = caf::actor_cast<caf::actor>(self);
        pool->schedule([exec, pool, me, request, step_id, feeds = std::move(feeds)]() mutable {
          exec->run(step_id, std::move(feeds), *pool, [me, request](result<std::vector<tensor>> r) {
            if (r.ok()) {
              caf::anon_send(me, step_done_atom::value, request, std::move(*r));
            } else {
              caf::anon_send(me, step_fail_atom::value, request, to_caf_error(r.error()));
            }
          });
        });
        return promise;
      },
      [=](step_done_atom, std::uint64_t request, std::vector<tensor>& fetches) {
        auto it = self->state.pending.find(request);
        if (it == self->state.pending.end()) return;
        it->second.deliver(std::move(fetches));
        self->state.pending.erase(it);
      },
      [=](step_fail_atom, std::uint64_t request, caf::error& error) {
        auto it = self->state.pending.find(request);
        if (it == self->state.pending.end()) return;
        it->second.deliver(std::move(error));
        self->state.pending.erase(it);
      },
  };
}

}  // namespace

caf::actor spawn_device(caf::actor_system& system, device_options options) {
  return system.spawn(device_behavior, std::move(options));
}

}  // namespace troupe::actors
