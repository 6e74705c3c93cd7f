#include "placement/cluster_spec.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace troupe::placement {

namespace {

bool is_identifier(std::string_view s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string list_jobs(const std::vector<job_spec>& jobs) {
  std::string out;
  for (const auto& j : jobs) out += str_cat(out.empty() ? "" : ", ", "'", j.name, "'");
  return out;
}

}  // namespace

result<cluster_spec> cluster_spec::create(std::vector<job_spec> jobs) {
  if (jobs.empty()) return invalid_argument_error("a cluster needs at least one job");
  std::set<std::string> names;
  for (auto& job : jobs) {
    if (job.name.empty()) {
      return invalid_argument_error(
          "a cluster job has an empty name; a job name is a letter "
          "followed by letters, digits and '_' (e.g. 'worker')");
    }
    if (!is_identifier(job.name)) {
      return invalid_argument_error("cluster job name '", job.name,
                                    "' is not valid; a job name is a "
                                    "letter followed by letters, digits and '_' (e.g. 'worker')");
    }
    if (!names.insert(job.name).second) {
      return invalid_argument_error("cluster job '", job.name, "' is listed twice");
    }
    if (job.tasks.empty()) {
      return invalid_argument_error("cluster job '", job.name,
                                    "' has 0 tasks; a job needs at least 1");
    }
    for (std::size_t t = 0; t < job.tasks.size(); ++t) {
      auto where = [&] { return str_cat("cluster job '", job.name, "' task ", t); };
      auto& devices = job.tasks[t].devices;
      if (devices.empty())
        return invalid_argument_error(where(),
                                      " has no devices; a task needs at least one (e.g. CPU x 1)");
      std::set<std::string> types;
      for (auto& d : devices) {
        if (!is_identifier(d.type)) {
          return invalid_argument_error(
              where(), ": device type '", d.type,
              "' is not valid; a device "
              "type is a letter followed by letters, digits and '_' (e.g. CPU, GPU)");
        }
        d.type = upper(d.type);
        if (!types.insert(d.type).second) {
          return invalid_argument_error(where(), " lists device type ", d.type,
                                        " twice; give one entry with the count");
        }
        if (d.count < 1) {
          return invalid_argument_error(where(), " has ", d.count, " devices of type ", d.type,
                                        "; the count must be at least 1");
        }
      }
    }
  }
  std::sort(jobs.begin(), jobs.end(),
            [](const job_spec& a, const job_spec& b) { return a.name < b.name; });
  cluster_spec out;
  out.jobs_ = std::move(jobs);
  return out;
}

result<cluster_spec> cluster_spec::from_task_counts(
    const std::map<std::string, int>& tasks_per_job) {
  std::vector<job_spec> jobs;
  for (const auto& [name, count] : tasks_per_job) {
    if (count < 0) {
      return invalid_argument_error("cluster job '", name, "' has ", count,
                                    " tasks; a job needs at least 1");
    }
    jobs.push_back(job_spec{name, std::vector<task_spec>(static_cast<std::size_t>(count))});
  }
  return create(std::move(jobs));
}

cluster_spec cluster_spec::local() {
  cluster_spec out;
  out.jobs_.push_back(job_spec{"localhost", {task_spec{}}});
  return out;
}

std::vector<std::string> cluster_spec::job_names() const {
  std::vector<std::string> out;
  for (const auto& j : jobs_) out.push_back(j.name);
  return out;
}

result<int> cluster_spec::num_tasks(std::string_view job) const {
  for (const auto& j : jobs_) {
    if (j.name == job) return static_cast<int>(j.tasks.size());
  }
  return not_found_error("the cluster has no job '", job, "'; its jobs are ", list_jobs(jobs_));
}

result<const task_spec*> cluster_spec::task(std::string_view job, int task) const {
  auto n = num_tasks(job);
  if (!n.ok()) return n.error();
  if (task < 0 || task >= *n) {
    return not_found_error("the cluster's job '", job, "' has no task ", task,
                           "; its tasks are 0..", *n - 1);
  }
  for (const auto& j : jobs_) {
    if (j.name == job) return &j.tasks[static_cast<std::size_t>(task)];
  }
  return internal_error("unreachable");
}

std::vector<device_name> cluster_spec::devices() const {
  std::vector<device_name> out;
  for (const auto& j : jobs_) {
    for (std::size_t t = 0; t < j.tasks.size(); ++t) {
      for (const auto& d : j.tasks[t].devices) {
        for (int i = 0; i < d.count; ++i) {
          out.push_back(device_name{j.name, 0, static_cast<int>(t), d.type, i});
        }
      }
    }
  }
  return out;
}

std::vector<std::string> cluster_spec::device_names() const {
  std::vector<std::string> out;
  for (const auto& d : devices()) out.push_back(to_string(d));
  return out;
}

std::vector<std::string> cluster_spec::task_names() const {
  std::vector<std::string> out;
  for (const auto& j : jobs_) {
    for (std::size_t t = 0; t < j.tasks.size(); ++t) {
      out.push_back(task_prefix(device_name{j.name, 0, static_cast<int>(t), {}, {}}));
    }
  }
  return out;
}

bool cluster_spec::has_device(const device_name& device) const {
  if (!is_complete(device)) return false;
  for (const auto& d : devices()) {
    if (d == device) return true;
  }
  return false;
}

}  // namespace troupe::placement
