#include "actors/cluster.h"

#include <thread>

#include "actors/device_actor.h"
#include "actors/messages.h"
#include "actors/runtime_kernels.h"
#include "actors/simulation.h"
#include "actors/spawn.h"
#include "core/env.h"
#include "placement/device_name.h"

namespace troupe::actors {

int default_actor_threads() {
  // On 2 cores one scheduler thread is faster: a second mostly adds wake-ups and hand-offs
  // on CAF's shared job queue (measured: the MLP and LeNet in process 10-14% faster per
  // step with one, the MLP across processes 4%; doc/architecture.md).
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return cores <= 2 ? 1 : 2;
}

result<std::shared_ptr<cluster>> cluster::create(cluster_options options) {
  if (options.kernels == &kernels::kernel_registry::builtin()) ensure_runtime_kernels();
  if (options.memory_limit < 0) {
    return invalid_argument_error("cluster_options.memory_limit must be positive (or 0 for the default), not ",
                                  options.memory_limit);
  }
  if (options.memory_limit == 0) {
    auto limit = memory_limit_from_environment();
    if (!limit.ok()) return limit.error();
    options.memory_limit = *limit;
  }
  std::shared_ptr<cluster> c(new cluster(std::move(options)));
  const cluster_options& o = c->options_;
  int compute = o.compute_threads > 0 ? o.compute_threads : default_num_threads();
  // Simulated: no compute threads; the world runs kernels on its turns.
  c->pool_ = std::make_unique<compute_pool>(o.simulation != nullptr ? 0 : compute, "troupe-compute", o.compute_spin);
  c->config_ = std::make_unique<caf::actor_system_config>();
  int actor_threads = o.actor_threads > 0 ? o.actor_threads : default_actor_threads();
  c->config_->set("scheduler.max-threads", static_cast<std::size_t>(actor_threads));
  c->config_->set("scheduler.policy", caf::atom("sharing"));
  c->config_->set("logger.verbosity", caf::atom("quiet"));
  c->next_step_ = o.first_step_id;
  if (o.configure_system) o.configure_system(*c->config_);
  if (o.simulation != nullptr) o.simulation->configure(*c->config_);
  c->system_ = std::make_unique<caf::actor_system>(*c->config_);
  if (o.simulation != nullptr) o.simulation->attach(c->system_.get());
  c->directory_ = std::make_shared<device_directory>();
  for (const placement::device_name& d : o.spec.devices()) {
    if (*d.type == "CPU") continue;
    const std::string full = placement::to_string(d);
    auto made = o.make_accelerator ? o.make_accelerator(full, *d.type, *d.id)
                                   : kernels::make_accelerator(full, *d.type, *d.id);
    if (!made.ok()) return made.error();
    c->accelerators_.emplace(full, std::shared_ptr<kernels::device>(std::move(*made)));
  }
  if (o.hosted_tasks) {
    for (const std::string& task : *o.hosted_tasks) {
      if (c->canonical_task_of(task, o.spec).empty()) {
        return invalid_argument_error("cluster_options.hosted_tasks names task '", task, "', which the cluster spec lacks");
      }
    }
  }
  for (const std::string& full : o.spec.device_names()) {
    c->device_names_.push_back(full);
    const std::string task(placement::task_of_full_name(full));
    bool hosted = !o.hosted_tasks.has_value();
    for (const std::string& t : o.hosted_tasks.value_or(std::vector<std::string>{})) {
      hosted = hosted || c->canonical_task_of(t, o.spec) == task;
    }
    if (hosted) {
      c->devices_.emplace(full, c->start_device(full, 0));
      continue;
    }
    if (!o.remote_device) {
      return invalid_argument_error("device ", full, " is not hosted here and cluster_options.remote_device is not set");
    }
    auto stand_in = o.remote_device(*c->system_, full);
    if (!stand_in.ok()) return stand_in.error();
    c->directory_->set_remote(full, std::move(*stand_in));
  }
  // Constructing the system and spawning into it tied this thread to the system's
  // shutdown (actors/spawn.h); untie it, so that any thread may destroy the cluster.
  caf::logger::set_current_actor_system(nullptr);
  return c;
}

namespace {

// caf::anon_send_exit with an error of ours as the reason (it takes only exit_reason).
void send_exit(const caf::actor& dest, caf::error reason) {
  if (dest) dest->enqueue(nullptr, caf::make_message_id(), caf::make_message(caf::exit_msg{dest->address(), std::move(reason)}), nullptr);
}

}  // namespace

std::uint64_t task_incarnation(std::uint64_t seed, std::string_view task, int life) {
  // splitmix64's finalizer over the seed, the task's name and the life.
  auto mix = [](std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  std::uint64_t h = mix(seed + 0x9e3779b97f4a7c15ULL);
  for (char ch : task) h = mix(h ^ static_cast<unsigned char>(ch));
  h = mix(h ^ static_cast<std::uint64_t>(life));
  return h == 0 ? 1 : h;
}

std::unique_ptr<runtime_device> cluster::start_device(const std::string& full, int life) {
  // The spec's own device names always parse.
  const placement::device_name name = *placement::parse_full_device_name(full, "a device of the cluster spec");
  auto accelerator = accelerators_.find(full);
  auto dev = std::make_unique<runtime_device>(full, *name.type, placement::task_prefix(name), *system_, *pool_,
                                              accelerator == accelerators_.end() ? nullptr : accelerator->second);
  dev->set_tracer(options_.tracer);
  dev->set_simulation(options_.simulation);
  dev->set_sync_watcher(options_.sync_watcher);
  dev->set_memory_limit(options_.memory_limit);
  dev->set_directory(directory_);
  dev->set_incarnation(task_incarnation(options_.incarnation_seed, placement::task_of_full_name(full), life));
  device_options d;
  d.device = dev.get();
  d.kernels = options_.kernels;
  directory_->set(full, spawn_device(*system_, d), /*remote=*/false, dev->incarnation());
  return dev;
}

std::vector<std::string> cluster::task_names() const {
  std::vector<std::string> out;
  for (const auto& full : device_names_) {
    std::string task(placement::task_of_full_name(full));
    if (out.empty() || out.back() != task) out.push_back(task);
  }
  return out;
}

std::string cluster::canonical_task(std::string_view task) const { return canonical_task_of(task, options_.spec); }

std::string cluster::canonical_task_of(std::string_view task, const placement::cluster_spec& spec) {
  // "/job:ps/task:0" and "/job:ps/replica:0/task:0" name the same task.
  std::string wanted(task);
  if (wanted.find("/replica:") == std::string::npos) {
    auto at = wanted.find("/task:");
    if (at != std::string::npos) wanted.insert(at, "/replica:0");
  }
  for (const auto& full : spec.device_names()) {
    if (placement::task_of_full_name(full) == wanted) return wanted;
  }
  return "";
}

bool cluster::hosts(std::string_view task) const {
  const std::string canonical = canonical_task(task);
  if (canonical.empty()) return false;
  std::lock_guard<std::mutex> lock(tasks_mutex_);
  for (const auto& [name, dev] : devices_) {
    if (placement::task_of_full_name(name) == canonical) return true;
  }
  return false;
}

result<std::vector<std::string>> cluster::devices_of(std::string_view task) const {
  std::string canonical = canonical_task(task);
  if (canonical.empty()) return not_found_error("no task '", task, "' in the cluster");
  std::vector<std::string> out;
  for (const auto& full : device_names_) {
    if (placement::task_of_full_name(full) == canonical) out.push_back(full);
  }
  return out;
}

const cluster_options::remote_task_control* cluster::remote_control(std::string_view task) const {
  if (options_.remote_tasks == nullptr || canonical_task(task).empty() || hosts(task)) return nullptr;
  return options_.remote_tasks.get();
}

status cluster::for_each_device(std::string_view task,
                                const std::function<void(const std::string&, std::unique_ptr<runtime_device>&)>& fn) {
  auto devices = devices_of(task);
  if (!devices.ok()) return devices.error();
  if (!hosts(task)) return failed_precondition_error("task '", task, "' runs in another process, not in this one");
  std::lock_guard<std::mutex> lock(tasks_mutex_);
  for (const auto& full : *devices) fn(full, devices_.find(full)->second);
  return status();
}

status cluster::kill_task(std::string_view task) {
  const caf::error reason = to_caf_error(unavailable_error("task ", canonical_task(task), " was killed"));
  if (const auto* control = remote_control(task)) {
    if (!control->kill) return failed_precondition_error("task '", task, "' runs in another process, which cannot be killed");
    TROUPE_RETURN_IF_ERROR(control->kill(canonical_task(task)));
    for (const caf::actor& a : task_actors(task)) send_exit(a, reason);
    return status();
  }
  return for_each_device(task, [&](const std::string& full, std::unique_ptr<runtime_device>& dev) {
    dev->mark_killed(str_cat("task ", canonical_task(task), " was killed"));
    dev->resources().clear();  // variables and queues end, their state lost
    send_exit(directory_->find(full), reason);
  });
}

bool cluster::task_down(std::string_view task) {
  if (remote_control(task) != nullptr) return false;
  bool down = false;
  const status s = for_each_device(task, [&](const std::string&, std::unique_ptr<runtime_device>& dev) {
    down = down || !dev->alive().ok();
  });
  return s.ok() && down;
}

result<int> cluster::restart_task(std::string_view task) {
  const caf::error reason = to_caf_error(unavailable_error("task ", canonical_task(task), " was restarted"));
  if (const auto* control = remote_control(task)) {
    for (const caf::actor& a : task_actors(task)) send_exit(a, reason);
    if (!control->restart) {
      return failed_precondition_error("task '", task, "' runs in another process, which cannot be restarted from here");
    }
    TROUPE_RETURN_IF_ERROR(control->restart(canonical_task(task)));
    auto devices = devices_of(task);
    if (!devices.ok()) return devices.error();
    for (const std::string& full : *devices) {
      auto stand_in = options_.remote_device(*system_, full);
      if (!stand_in.ok()) return stand_in.error();
      directory_->set_remote(full, std::move(*stand_in));
    }
    std::lock_guard<std::mutex> lock(tasks_mutex_);
    return ++incarnations_[canonical_task(task)];
  }
  TROUPE_RETURN_IF_ERROR(for_each_device(task, [&](const std::string& full, std::unique_ptr<runtime_device>& dev) {
    dev->mark_killed(str_cat("task ", canonical_task(task), " was restarted"));
    dev->resources().clear();
    send_exit(directory_->find(full), reason);  // no-op when already down
    retired_.push_back(std::move(dev));
    dev = start_device(full, incarnations_[canonical_task(task)] + 1);  // tasks_mutex_ is held
  }));
  std::lock_guard<std::mutex> lock(tasks_mutex_);
  return ++incarnations_[canonical_task(task)];
}

// Asks every device actor of `task` (the stand-ins of a task in another process, which
// forward it) to take an injected fault, and waits for each answer.
template <typename... Ts>
status cluster::ask_task_devices(std::string_view task, const char* what, Ts... xs) {
  unpinned_use use(*system_);  // outlives the scoped actor
  caf::scoped_actor self{*system_};
  for (const caf::actor& a : task_actors(task)) {
    status out = internal_error("no answer");
    self->request(a, std::chrono::seconds(10), xs...)
        .receive([&](bool) { out = status(); },
                 [&](caf::error& e) {
                   out = unavailable_error("task ", canonical_task(task), " did not take the ", what, ": ", to_status(e).message());
                 });
    if (!out.ok()) return out;
  }
  return status();
}

status cluster::set_straggle(std::string_view task, std::chrono::microseconds per_step) {
  if (!canonical_task(task).empty() && !hosts(task)) {
    return ask_task_devices(task, "straggle", straggle_atom::value, static_cast<std::int64_t>(per_step.count()));
  }
  return for_each_device(task, [&](const std::string&, std::unique_ptr<runtime_device>& dev) {
    dev->set_straggle(per_step);
  });
}

status cluster::stall_task(std::string_view task, std::chrono::milliseconds duration) {
  if (const auto* control = remote_control(task)) {
    if (!control->stall) return failed_precondition_error("task '", task, "' runs in another process, which cannot be stalled");
    return control->stall(canonical_task(task), duration);
  }
  const auto until = env::now() + duration;
  return for_each_device(task, [&](const std::string&, std::unique_ptr<runtime_device>& dev) { dev->stall_until(until); });
}

status cluster::set_link_fault(std::string_view from, std::string_view to, runtime_device::link_fault fault) {
  const std::string destination = canonical_task(to);
  if (destination.empty()) return not_found_error("no task '", to, "' in the cluster");
  if (!canonical_task(from).empty() && !hosts(from)) {
    return ask_task_devices(from, "link fault", link_fault_atom::value, destination,
                            static_cast<std::int64_t>(fault.delay.count()), fault.drop, fault.seed);
  }
  return for_each_device(from, [&](const std::string&, std::unique_ptr<runtime_device>& dev) {
    dev->set_link_fault(destination, fault);
  });
}

std::vector<caf::actor> cluster::task_actors(std::string_view task) const {
  std::vector<caf::actor> out;
  auto devices = devices_of(task);
  if (!devices.ok()) return out;
  for (const auto& full : *devices) out.push_back(directory_->find(full));
  return out;
}

cluster::~cluster() {
  // Resources first (their destructors tell their actors to exit), then the devices: a
  // device cancels the steps still running on it as it exits, and resource actors that
  // a parked step still holds end with their device (they monitor it).
  for (auto& [name, dev] : devices_) dev->resources().clear();
  for (auto& [name, actor] : directory_->entries()) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  if (options_.simulation != nullptr) {
    // Only the world's turns run actors: give it turns until every actor has ended, each
    // pause of virtual time twice the last (at most an hour): an actor waiting for a
    // kernel of the compute model that has hours or years of work left (a rate near 0)
    // is reached in a few thousand turns, not one per millisecond.
    auto pause = std::chrono::milliseconds(1);
    while (system_->registry().running() > 0) {
      env::sleep_for(pause);
      pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::hours(1));
    }
    options_.simulation->attach(nullptr);
  } else {
    system_->registry().await_running_count_equal(0);  // every actor has ended
  }
  // The directory only now: an actor still handling a message before its exit may look
  // a device up (a task service aborting a step did, once, after the directory was gone).
  for (auto& [name, dev] : devices_) dev->set_directory(nullptr);
  for (auto& dev : retired_) dev->set_directory(nullptr);
  directory_.reset();
  // The compute threads go before the system: a custom kernel that spawned an actor
  // from one of them without spawn_unpinned tied that thread to the system, and
  // ~actor_system would wait for it forever (actors/spawn.h).
  pool_.reset();    // finishes queued work, joins
  system_.reset();
}

runtime_device* cluster::find_device(std::string_view name) const {
  std::lock_guard<std::mutex> lock(tasks_mutex_);
  auto it = devices_.find(name);
  return it == devices_.end() ? nullptr : it->second.get();
}

caf::actor cluster::device_actor(std::string_view name) const {
  auto* d = find_device(name);
  return d == nullptr ? caf::actor() : d->self();
}

result<device_stats> cluster::stats(std::string_view device, std::chrono::milliseconds timeout) {
  caf::actor a = device_actor(device);
  if (!a) return not_found_error("no device '", device, "' in the cluster");
  unpinned_use use(*system_);  // outlives the scoped actor
  caf::scoped_actor self{*system_};
  result<device_stats> out = internal_error("no answer");
  self->request(a, timeout, stats_atom::value)
      .receive([&](device_stats& s) { out = s; },
               [&](caf::error& e) { out = unavailable_error("device ", device, " did not report: ", caf::to_string(e)); });
  return out;
}

}  // namespace troupe::actors
