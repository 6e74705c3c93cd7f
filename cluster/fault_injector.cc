#include "cluster/fault_injector.h"

#include <algorithm>

namespace troupe::cluster {

fault_injector::fault_injector(std::shared_ptr<actors::cluster> cluster, std::vector<fault_spec> faults,
                               std::function<void(const std::string&)> log)
    : cluster_(std::move(cluster)), log_(std::move(log)), faults_(std::move(faults)) {
  std::stable_sort(faults_.begin(), faults_.end(),
                   [](const fault_spec& a, const fault_spec& b) { return a.at_step < b.at_step; });
  done_.assign(faults_.size(), false);
}

void fault_injector::step_reached(std::int64_t global_step) {
  std::vector<injected_fault> now;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t i = 0; i < faults_.size() && faults_[i].at_step <= global_step; ++i) {
      if (done_[i]) continue;
      done_[i] = true;
      now.push_back({faults_[i], cluster_->canonical_task(faults_[i].task), global_step,
                     std::chrono::steady_clock::now(), status()});
    }
  }
  for (auto& f : now) {
    if (f.spec.kind == "kill") {
      f.outcome = cluster_->kill_task(f.spec.task);
    } else {
      f.outcome = unimplemented_error("fault kind '", f.spec.kind, "'");
    }
    if (log_) {
      log_(str_cat("fault: ", f.spec.kind, " ", f.task.empty() ? f.spec.task : f.task, " at step ", f.step,
                   f.outcome.ok() ? std::string("") : str_cat(" failed: ", f.outcome.message())));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    injected_.push_back(std::move(f));
  }
}

std::vector<injected_fault> fault_injector::injected() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return injected_;
}

int fault_injector::count(std::string_view kind) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(std::count_if(injected_.begin(), injected_.end(),
                                        [&](const injected_fault& f) { return f.spec.kind == kind; }));
}

}  // namespace troupe::cluster
