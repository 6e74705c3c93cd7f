#include "cluster/supervisor.h"

#include "actors/messages.h"
#include "actors/spawn.h"
#include "core/env.h"

namespace troupe::cluster {

namespace {

using watch_atom = caf::atom_constant<caf::atom("watch")>;
using seconds = std::chrono::duration<double>;

// The supervisor's eyes: monitors device actors and reports those that go down (but for
// a shutdown, and but for earlier incarnations that a restart replaced) to `report`.
struct monitor_state {
  std::map<caf::actor_addr, std::pair<std::string, int>> tasks;  // the task and its life
  static inline const char* name = "troupe-supervisor-monitor";
};
using monitor_actor = caf::stateful_actor<monitor_state>;

caf::behavior monitor_behavior(monitor_actor* self, std::shared_ptr<actors::cluster> cluster,
                               std::function<void(supervisor::down_notice)> report) {
  self->set_down_handler([self, cluster, report](caf::down_msg& msg) {
    auto it = self->state.tasks.find(msg.source);
    if (it == self->state.tasks.end()) return;
    auto [task, life] = std::move(it->second);
    self->state.tasks.erase(it);
    if (msg.reason == caf::exit_reason::user_shutdown || msg.reason == caf::exit_reason::normal) return;
    bool current = false;
    for (const auto& a : cluster->task_actors(task)) current = current || a.address() == msg.source;
    if (!current) return;  // an incarnation already replaced
    status why = actors::to_status(msg.reason);
    supervisor::down_notice n{task, why.message().empty() ? caf::to_string(msg.reason) : why.message()};
    n.life = life;
    report(std::move(n));
  });
  return {
      [self](watch_atom, const std::vector<caf::actor>& actors, const std::string& task, int life) {
        for (const auto& a : actors) {
          self->state.tasks[a.address()] = {task, life};
          self->monitor(a);
        }
      },
  };
}

}  // namespace

result<std::unique_ptr<supervisor>> supervisor::create(std::shared_ptr<actors::cluster> cluster,
                                                       supervisor_options options) {
  if (options.max_restarts < 0) {
    return invalid_argument_error("supervisor: max_restarts must be >= 0, not ", options.max_restarts);
  }
  if (!(options.within_seconds > 0)) {
    return invalid_argument_error("supervisor: within_seconds must be > 0, not ", options.within_seconds);
  }
  std::unique_ptr<supervisor> s(new supervisor(cluster, std::move(options)));
  supervisor* self = s.get();
  s->monitor_ = actors::spawn_unpinned(cluster->system(), monitor_behavior, cluster, [self](down_notice n) {
    {
      std::lock_guard<std::mutex> lock(self->mutex_);
      if (self->stopping_) return;
      // Each life's loss once (a task's devices each report it); a later life's loss
      // (killed again after its restart, its recovery not over) is recovered after.
      auto [at, added] = self->down_.emplace(n.task, n.life);
      if (!added && at->second >= n.life) return;
      at->second = n.life;
      self->pending_.push_back(std::move(n));
    }
    self->changed_.notify_all();
  });
  for (const auto& task : cluster->task_names()) s->watch(task, 0);
  s->thread_ = env::thread([self] { self->recovery_loop(); });
  return s;
}

supervisor::~supervisor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
  // The monitor reports to this object: it must be gone first.
  caf::anon_send_exit(monitor_, caf::exit_reason::user_shutdown);
  actors::await_exit(monitor_);
}

void supervisor::watch(const std::string& task, int life) {
  caf::anon_send(monitor_, watch_atom::value, cluster_->task_actors(task), task, life);
}

void supervisor::log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

status supervisor::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

std::map<std::string, int> supervisor::restarts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return restarts_;
}

std::vector<recovery_record> supervisor::recoveries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return recoveries_;
}

bool supervisor::wait_for_recoveries(std::size_t count, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return recoveries_.size() >= count; });
}

void supervisor::recovery_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
    if (stopping_) {
      for (const down_notice& n : pending_) drop(n);
      return;
    }
    down_notice notice = std::move(pending_.front());
    pending_.pop_front();
    if (!failure_.ok()) {  // given up: nothing more is restarted
      drop(notice);
      continue;
    }
    lock.unlock();
    std::optional<down_notice> later = recover(notice);
    lock.lock();
    if (later) {
      // After the recovery of the task whose loss caught it: given time to be reported.
      changed_.wait_for(lock, k_report_wait, [&] { return stopping_ || !pending_.empty(); });
      pending_.push_back(std::move(*later));  // still down_: its recovery is not over
    } else if (auto at = down_.find(notice.task); at != down_.end() && at->second <= notice.life) {
      down_.erase(at);  // (a later life's loss, pending, keeps it)
    }
    changed_.notify_all();
  }
}

void supervisor::drop(const down_notice& notice) {
  if (notice.restarted && options_.gate != nullptr) options_.gate->open();  // its recovery held it
}

void supervisor::give_up(status why) {
  log("supervisor: giving up: " + why.message());
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_.ok()) failure_ = std::move(why);
  changed_.notify_all();
}

std::optional<supervisor::down_notice> supervisor::recover(const down_notice& notice) {
  const auto down_at = notice.restarted ? notice.down_at : env::now();
  recovery_record record{notice.task, notice.reason, down_at};
  auto finish = [&] {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      recoveries_.push_back(record);
    }
    changed_.notify_all();
  };
  if (!notice.restarted) {
    log(str_cat("supervisor: task ", notice.task, " went down (", notice.reason, ")"));
    std::lock_guard<std::mutex> lock(mutex_);
    auto& recent = recent_[notice.task];
    const auto window = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        seconds(options_.within_seconds));
    while (!recent.empty() && down_at - recent.front() > window) recent.pop_front();
    if (static_cast<int>(recent.size()) >= options_.max_restarts) {
      failure_ = aborted_error("task ", notice.task, " failed ", recent.size() + 1, " times within ",
                               options_.within_seconds, " s, more than supervision.max_restarts (",
                               options_.max_restarts, ") allows; last: ", notice.reason);
      recoveries_.push_back(record);
      changed_.notify_all();
      log("supervisor: giving up: " + failure_.message());
      return std::nullopt;
    }
    recent.push_back(down_at);
  }
  // A task slow to come back (its machine restarting): the steps that need it fail and
  // are retried meanwhile, the others go on.
  if (!notice.restarted && env::buggify("supervisor.slow_restart")) env::sleep_for(k_slow_restart);
  // (A restore done again holds the gate still: the task restarted empty stays out of steps.)
  if (options_.gate != nullptr && !notice.restarted) options_.gate->close();
  bool restarted = notice.restarted;
  status outcome = [&]() -> status {
    if (!restarted) {
      auto incarnation = cluster_->restart_task(notice.task);
      if (!incarnation.ok()) return incarnation.error();
      restarted = true;
      watch(notice.task, *incarnation);
      std::lock_guard<std::mutex> lock(mutex_);
      ++restarts_[notice.task];
    }
    checkpoint_manager* m = options_.checkpoints;
    if (m == nullptr) return status();
    const bool over = options_.finished && options_.finished();
    const bool all = options_.recovery == recovery_policy::rollback_all && !over;
    if (over) {
      log(str_cat("supervisor: the run has applied its last step: only what ", notice.task,
                  " held returns to the checkpoint"));
    }
    if (!all && !m->holds_variables(notice.task) && !m->holds_pipelines(notice.task)) return status();
    auto restored = all ? m->restore_latest() : m->restore_latest(notice.task);
    if (!restored.ok()) return restored.error().with_context(str_cat("restoring task ", notice.task));
    if (!restored->has_value()) {
      if (!all && !m->holds_variables(notice.task)) return status();  // only its input pipeline: starts afresh
      return failed_precondition_error("task ", notice.task, " lost its variables and no checkpoint is committed "
                                       "to restore them from");
    }
    record.restored_step = **restored;
    if ((all || m->holds_global_step(notice.task)) && !over && options_.global_step_restored) {
      options_.global_step_restored(**restored);
    }
    return status();
  }();
  if (!outcome.ok()) {
    // Restarted, but its restore was caught by another task going down meanwhile (a
    // ROLLBACK_ALL restore reads every task) or by a step failed as UNAVAILABLE: restored
    // again after that task's recovery, if any, the gate held closed until then (the
    // other recovery closes it too).
    if (restarted && is_retryable(outcome) && env::now() - down_at < k_restore_for) {
      log(str_cat("supervisor: restoring ", notice.task, " failed (", outcome.message(),
                  "); it is restored again after the tasks lost meanwhile are restarted"));
      return down_notice{notice.task, notice.reason, /*restarted=*/true, down_at, notice.life};
    }
    if (options_.gate != nullptr) options_.gate->open();
    // The failure first: whoever sees the record (wait_for_recoveries) sees why too.
    give_up(aborted_error("could not recover task ", notice.task, ": ", outcome.message()));
    finish();
    return std::nullopt;
  }
  record.recovered = true;
  record.seconds = seconds(env::now() - down_at).count();
  if (options_.gate != nullptr) options_.gate->open();
  finish();
  log(str_cat("supervisor: restarted ", notice.task, record.restored_step >= 0
                                                         ? str_cat(", restored from step ", record.restored_step)
                                                         : std::string(""),
              ", in ", std::to_string(record.seconds).substr(0, 5), " s"));
  return std::nullopt;
}

}  // namespace troupe::cluster
