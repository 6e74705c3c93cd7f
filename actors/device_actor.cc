#include "actors/device_actor.h"

#include <map>

#include "actors/messages.h"
#include "actors/rendezvous.h"
#include "kernels/cancellation.h"

namespace troupe::actors {
namespace {

struct device_state {
  device_options options;
  std::map<std::uint64_t, std::shared_ptr<const executable>> partitions;
  // Running steps by request: the client's promise, and the step's cancellation, so an
  // abort from the master (by step id) or the device's exit can reach them.
  struct running_step {
    std::int64_t step_id;
    caf::response_promise promise;
    std::shared_ptr<kernels::cancellation_manager> cancel;
  };
  std::map<std::uint64_t, running_step> running;
  rendezvous_table rendezvous;
  std::uint64_t next_handle = 1;
  std::uint64_t next_request = 1;
  static inline const char* name = "troupe-device";
};

using device_actor = caf::stateful_actor<device_state>;

caf::behavior device_behavior(device_actor* self, device_options options) {
  self->state.options = std::move(options);
  // When the device goes, its running steps are cancelled: kernels waiting on other
  // actors fail now instead of finishing against a device that is gone.
  self->set_exit_handler([self](caf::exit_msg& msg) {
    for (auto& [request, step] : self->state.running) step.cancel->start_cancel();
    self->quit(msg.reason);
  });
  // Answers the request of a finished step with its fetches or its error.
  auto finish = [self](std::uint64_t request, auto&& outcome) {
    auto it = self->state.running.find(request);
    if (it == self->state.running.end()) return;
    it->second.promise.deliver(std::move(outcome));
    self->state.running.erase(it);
  };
  return {
      [=](prepare_atom, executable_spec& spec) -> caf::result<std::uint64_t> {
        spec.device = self->state.options.device;
        spec.tracer = self->state.options.device->tracer();
        spec.trace_task = self->state.options.device->task();
        spec.trace_device = self->state.options.device->short_name();
        auto exec = executable::create(spec, *self->state.options.kernels);
        if (!exec.ok()) return to_caf_error(exec.error());
        std::uint64_t handle = self->state.next_handle++;
        self->state.partitions.emplace(handle, std::move(*exec));
        return handle;
      },
      [=](run_atom, std::uint64_t handle, std::int64_t step_id,
          std::vector<tensor>& feeds) -> caf::result<std::vector<tensor>> {
        auto& st = self->state;
        rendezvous_table::active_scope active(st.rendezvous, st.options.device);
        const std::string& device_name = st.options.device->name();
        auto it = st.partitions.find(handle);
        if (it == st.partitions.end()) {
          return to_caf_error(not_found_error("device ", device_name, " has no partition ", handle));
        }
        if (st.rendezvous.is_aborted(step_id)) {
          return to_caf_error(aborted_error("step ", step_id, " was aborted before it started on ", device_name));
        }
        std::shared_ptr<const executable> exec = it->second;
        status s = exec->check_feeds(feeds);
        if (!s.ok()) return to_caf_error(s);
        std::uint64_t request = st.next_request++;
        auto promise = self->make_response_promise<std::vector<tensor>>();
        auto cancel = std::make_shared<kernels::cancellation_manager>();
        st.running.emplace(request, device_state::running_step{step_id, promise, cancel});
        caf::actor me = caf::actor_cast<caf::actor>(self);
        // The completion keeps the partition alive: the actor may exit (and drop its
        // partitions) while a step still waits in an asynchronous kernel.
        exec->run(step_id, std::move(feeds), st.options.device->pool(),
                  [me, request, cancel, exec](result<std::vector<tensor>> r) {
                    if (r.ok()) {
                      caf::anon_send(me, step_done_atom::value, request, std::move(*r));
                    } else {
                      caf::anon_send(me, step_fail_atom::value, request, to_caf_error(r.error()));
                    }
                  },
                  cancel.get());
        return promise;
      },
      [=](step_done_atom, std::uint64_t request, std::vector<tensor>& fetches) {
        finish(request, std::move(fetches));
      },
      [=](step_fail_atom, std::uint64_t request, caf::error& error) {
        finish(request, std::move(error));
      },
      [=](abort_step_atom, std::int64_t step_id, const caf::error& reason) {
        auto& st = self->state;
        st.rendezvous.abort(step_id, to_status(reason));
        std::vector<std::shared_ptr<kernels::cancellation_manager>> cancels;
        for (auto& [request, step] : st.running) {
          if (step.step_id == step_id) cancels.push_back(step.cancel);
        }
        for (auto& c : cancels) c->start_cancel();
      },
      // A tensor's arrival or a Recv's request may complete a Recv, and the nodes it wakes
      // run here: the rendezvous is active so that Recvs among them ask it directly.
      [=](rv_send_atom, std::int64_t step_id, const transfer_key_ptr& key, tensor& value) {
        auto& st = self->state;
        rendezvous_table::active_scope active(st.rendezvous, st.options.device);
        st.rendezvous.send(step_id, key, std::move(value));
      },
      [=](rv_recv_atom, std::int64_t step_id, const transfer_key_ptr& key, reply<tensor>& r) {
        auto& st = self->state;
        rendezvous_table::active_scope active(st.rendezvous, st.options.device);
        st.rendezvous.recv(step_id, key, std::move(r));
      },
      [=](rv_cancel_atom, std::int64_t step_id, const transfer_key_ptr& key) {
        self->state.rendezvous.cancel(step_id, key);
      },
  };
}

}  // namespace

caf::actor spawn_device(caf::actor_system& system, device_options options) {
  runtime_device* dev = options.device;
  caf::actor a = system.spawn(device_behavior, std::move(options));
  dev->set_self(a);
  return a;
}

}  // namespace troupe::actors
