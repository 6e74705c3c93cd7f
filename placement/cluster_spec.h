// cluster_spec: the jobs of a cluster, their tasks, and the devices each task holds.
//
// A cluster has named jobs ("ps", "worker"); job J has tasks 0..n-1; each task holds some
// devices, given as (type, count) pairs: {"CPU", 1} gives /device:CPU:0, {"GPU", 2} adds
// /device:GPU:0 and /device:GPU:1. Every task of a cluster built from task counts holds
// one CPU:0. Device names always carry replica 0.
//
//   auto cluster = cluster_spec::from_task_counts({{"ps", 2}, {"worker", 3}});
//   cluster->device_names();   // "/job:ps/replica:0/task:0/device:CPU:0", ... (5 devices)
//
// Invariants of a built cluster_spec (create() checks them and names the offender):
//  1. at least one job; job names are unique identifiers ([A-Za-z][A-Za-z0-9_]*);
//  2. every job has at least one task; every task at least one device;
//  3. device types are identifiers, stored upper case, listed at most once per task,
//     with a count of at least 1.
// Jobs are kept sorted by name, so devices() is deterministic. Immutable once built;
// thread-safe to read.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "placement/device_name.h"

namespace troupe::placement {

struct device_count {
  std::string type = "CPU";
  int count = 1;
};

struct task_spec {
  std::vector<device_count> devices = {device_count{}};
};

struct job_spec {
  std::string name;
  std::vector<task_spec> tasks;
};

class cluster_spec {
 public:
  // Validates and builds a cluster (see the invariants above).
  static result<cluster_spec> create(std::vector<job_spec> jobs);
  // Jobs with that many tasks, each task holding one CPU:0.
  static result<cluster_spec> from_task_counts(const std::map<std::string, int>& tasks_per_job);
  // One job "localhost" with one task holding CPU:0: the single-process cluster.
  static cluster_spec local();

  const std::vector<job_spec>& jobs() const { return jobs_; }
  std::vector<std::string> job_names() const;
  // not_found naming the job and the jobs there are.
  result<int> num_tasks(std::string_view job) const;
  // not_found naming the job or the task and the valid range.
  result<const task_spec*> task(std::string_view job, int task) const;

  // Every device, complete names, ordered by job name, task, then device type and id as
  // listed in the task.
  std::vector<device_name> devices() const;
  std::vector<std::string> device_names() const;
  // "/job:ps/replica:0/task:0", ... in the same order.
  std::vector<std::string> task_names() const;
  bool has_device(const device_name& device) const;

 private:
  cluster_spec() = default;
  std::vector<job_spec> jobs_;
};

}  // namespace troupe::placement
