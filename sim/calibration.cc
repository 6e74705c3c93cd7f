#include "sim/calibration.h"

#include <algorithm>
#include <tuple>

#include "core/cpu_time.h"
#include "core/file.h"
#include "core/spin_wait.h"
#include "graph/text_proto.h"
#include "placement/device_name.h"

namespace troupe::sim {

std::string input_signature(const tensor& t) {
  std::string out = str_cat(dtype_name(t.type()), "[");
  for (int d = 0; d < t.rank(); ++d) out += str_cat(d == 0 ? "" : ",", t.dim(d));
  return out + "]";
}

std::vector<std::string> input_signatures(std::span<const tensor> inputs) {
  std::vector<std::string> out;
  out.reserve(inputs.size());
  for (const tensor& t : inputs) out.push_back(input_signature(t));
  return out;
}

std::vector<std::string> cost_attrs(const tf::NodeDef& def) {
  std::vector<std::string> out;
  for (const auto& [name, v] : def.attr()) {
    if (name.empty() || name[0] == '_') continue;  // the runtime's own
    // A transfer's ends' lives (random per server process) say nothing of its cost.
    if (name == "send_device_incarnation" || name == "recv_device_incarnation") continue;
    switch (v.value_case()) {
      case tf::AttrValue::kB: out.push_back(str_cat(name, "=", v.b() ? "true" : "false")); break;
      case tf::AttrValue::kI: out.push_back(str_cat(name, "=", v.i())); break;
      case tf::AttrValue::kS:
        if (v.s().size() <= 32) out.push_back(str_cat(name, "=", v.s()));
        break;
      case tf::AttrValue::kList:
        if (v.list().i_size() > 0 && v.list().i_size() <= 8) {
          std::string list;
          for (std::int64_t x : v.list().i()) list += str_cat(list.empty() ? "" : ",", x);
          out.push_back(str_cat(name, "=[", list, "]"));
        }
        break;
      default: break;  // types (the inputs say them), shapes, tensors, functions
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void calibration_recorder::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  samples_.clear();
  runs_ = 0;
  accounted_cpu_ns_ = 0;
  kernel_cpu_ns_ = 0;
  cpu_points_.clear();
  traffic_ = {};
  parts_seen_.clear();
  transits_.clear();
  handed_.clear();
  recorded_.clear();
  if (recording_) recorded_.emplace_back(clock::now(), clock::time_point::max());
}

void calibration_recorder::pause() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (recording_ && !cpu_points_.empty() && cpu_points_.back().kernels < runs_) read_cpu();
  if (recording_ && !recorded_.empty()) recorded_.back().second = clock::now();
  recording_ = false;
}

void calibration_recorder::resume() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recording_) recorded_.emplace_back(clock::now(), clock::time_point::max());
  recording_ = true;
}

bool calibration_recorder::while_recording(clock::time_point at) const {
  return std::any_of(recorded_.begin(), recorded_.end(), [&](const auto& w) { return at >= w.first && at < w.second; });
}

void calibration_recorder::link_transit(const std::string& from, const std::string& to, std::int64_t bytes,
                                        clock::time_point sent, clock::time_point arrived, const std::string& key,
                                        std::int64_t step_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Kept only when it arrived while recording (a window opens at its resume, later than
  // anything that arrived before), so that the cap keeps the steady state's.
  if (while_recording(arrived) && transits_.size() < max_samples_) transits_.push_back({bytes, sent, arrived, from, to, key, step_id});
}

void calibration_recorder::transfer_sent(const std::string& key, std::int64_t step_id, const std::string&,
                                         const std::string&, clock::time_point at) {
  std::lock_guard<std::mutex> lock(mutex_);
  // (Handed over seconds late in mode REAL, like the transits: kept by when it happened.)
  if (while_recording(at) && handed_.size() < max_samples_) handed_.emplace(std::make_pair(key, step_id), at);
}

calibration_recorder::transits calibration_recorder::link_transits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  // Least squares of the transit (us) on the bytes.
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const transit& t : transits_) {
    const double x = static_cast<double>(t.bytes);
    const double y = std::chrono::duration<double, std::micro>(t.arrived - t.sent).count();
    n += 1;
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  transits out;
  if (n == 0) return out;
  out.count = static_cast<std::int64_t>(n);
  out.mean_bytes = sx / n;
  out.mean_us = sy / n;
  out.latency_us = out.mean_us;
  const double var = sxx / n - out.mean_bytes * out.mean_bytes;
  const double slope = var > 0 ? (sxy / n - out.mean_bytes * out.mean_us) / var : 0;  // us per byte
  if (slope > 0) {
    out.latency_us = out.mean_us - slope * out.mean_bytes;
    out.bandwidth_gbps = 8.0 / slope / 1e3;  // bits per us, in Gb/s
  }
  // The senders' waits, link by link in the order their tensors were first written.
  std::vector<const transit*> ordered;
  for (const transit& t : transits_) ordered.push_back(&t);
  std::stable_sort(ordered.begin(), ordered.end(), [](const transit* a, const transit* b) {
    return std::tie(a->from, a->to, a->sent) < std::tie(b->from, b->to, b->sent);
  });
  double waited_us = 0;
  for (std::size_t i = 0; i < ordered.size(); ++i) {
    const transit& t = *ordered[i];
    auto handed = t.key.empty() ? handed_.end() : handed_.find({t.key, t.step});
    if (handed == handed_.end() || handed->second > t.sent) continue;
    auto free = handed->second;  // the link was free for it then, or when the previous one was in
    if (i > 0 && ordered[i - 1]->from == t.from && ordered[i - 1]->to == t.to) free = std::max(free, ordered[i - 1]->arrived);
    waited_us += std::max(0.0, std::chrono::duration<double, std::micro>(t.sent - free).count());
    ++out.send_waits;
  }
  if (out.send_waits > 0) out.send_wait_us = waited_us / static_cast<double>(out.send_waits);
  return out;
}

calibration_recorder::kernel_runs calibration_recorder::kernels_run() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {runs_, kernel_cpu_ns_};
}

bool set_runtime_untraced(Calibration& table, const calibration_recorder::kernel_runs& runs, std::int64_t steps,
                          double cpu_us_per_step) {
  if (runs.runs <= 0 || steps <= 0 || cpu_us_per_step <= 0) return false;
  const double per_step = static_cast<double>(runs.runs) / static_cast<double>(steps);
  table.set_runtime_traced_ns_per_kernel(table.runtime_ns_per_kernel());
  table.set_cpu_us_per_step(cpu_us_per_step);
  table.set_kernels_per_step(per_step);
  double runtime_ns = std::max(0.0, cpu_us_per_step * 1e3 / per_step - runs.cpu_ns / static_cast<double>(runs.runs));
  // Untraced, the runtime does no more than traced (the recorder only adds work): more
  // says the machine was slower for the untraced run, not what the runtime costs.
  const double traced_ns = table.runtime_traced_ns_per_kernel();
  if (traced_ns > 0) runtime_ns = std::min(runtime_ns, traced_ns);
  table.set_runtime_ns_per_kernel(runtime_ns);
  return true;
}

bool traced_while_slow(double traced_us, double untraced_us) {
  return traced_us > 0 && untraced_us > 0 && traced_us > k_traced_over_untraced * untraced_us;
}

double untraced_cpu_us_per_step(double traced_us, const std::function<double()>& measure, int tries,
                                const std::function<void(double)>& rejected) {
  double lowest = 0;
  for (int i = 0; i < std::max(1, tries); ++i) {
    const double us = measure();
    if (us <= 0) return lowest;  // no steady state: nothing more to learn by running again
    if (lowest <= 0 || us < lowest) lowest = us;
    if (traced_us <= 0 || us <= traced_us) return lowest;
    if (rejected && i + 1 < tries) rejected(us);
  }
  return lowest;
}

calibration_recorder::traffic calibration_recorder::between_tasks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  traffic out = traffic_;
  out.parts = static_cast<std::int64_t>(parts_seen_.size());
  return out;
}

void calibration_recorder::count_traffic(const std::string& task, const std::string& op, std::int64_t step_id,
                                         const node_detail& detail) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recording_.load(std::memory_order_relaxed)) return;
  parts_seen_.emplace(step_id, task);
  if (op != "_Send" || detail.def == nullptr || detail.inputs.empty()) return;
  const auto& attrs = detail.def->attr();
  const auto from = attrs.find("send_device"), to = attrs.find("recv_device");
  if (from == attrs.end() || to == attrs.end() || placement::task_of_full_name(from->second.s()) == placement::task_of_full_name(to->second.s())) return;
  ++traffic_.transfers;
  const tensor& sent = detail.inputs[0];
  if (sent.initialized()) traffic_.bytes += static_cast<std::int64_t>(sent.byte_size());
}

void calibration_recorder::node_span(const std::string& task, const std::string& device, const std::string&,
                                     const std::string& op, std::int64_t step_id, clock::time_point start,
                                     clock::time_point end, const node_detail& detail) {
  if (!recording_.load(std::memory_order_relaxed)) return;
  // This recorder's own CPU time is not the runtime's (runtime_ns_per_kernel).
  const double own_start = thread_cpu_ns();
  count_traffic(task, op, step_id, detail);
  // An asynchronous kernel's time is mostly waiting: only the work it measured counts
  // (a variable update's), and only its CPU time.
  if (detail.asynchronous && detail.cpu_ns < 0) return;
  key k{op, device.substr(0, device.find(':')), input_signatures(detail.inputs),
        detail.def != nullptr ? cost_attrs(*detail.def) : std::vector<std::string>()};
  const double ns = std::chrono::duration<double, std::nano>(end - start).count();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!recording_.load(std::memory_order_relaxed)) return;
  // Begun before the recording (a reader's first step, loading its files): not the
  // steady state.
  if (!recorded_.empty() && start < recorded_.back().first) return;
  auto& s = samples_[std::move(k)];
  if (s.skipped < k_skipped_per_kernel) {
    ++s.skipped;
  } else if (s.ns.size() < max_samples_) {
    s.ns.push_back(ns);
    if (detail.cpu_ns >= 0) s.cpu_ns.push_back(detail.cpu_ns);
  }
  if (detail.cpu_ns < 0) return;
  ++runs_;
  kernel_cpu_ns_ += detail.cpu_ns;
  accounted_cpu_ns_ += detail.cpu_ns + (thread_cpu_ns() - own_start);
  if (runs_ >= k_window_after && (runs_ - k_window_after) % k_window_kernels == 0) read_cpu();
}

void calibration_recorder::read_cpu() { cpu_points_.push_back(cpu_point{working_cpu_ns(), accounted_cpu_ns_, runs_}); }

Calibration calibration_recorder::table() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Calibration out;
  std::vector<double> per_kernel;  // each window's
  for (std::size_t i = 1; i < cpu_points_.size(); ++i) {
    const cpu_point &from = cpu_points_[i - 1], &to = cpu_points_[i];
    if (to.kernels - from.kernels < k_window_kernels / 4) continue;
    per_kernel.push_back(((to.process_ns - from.process_ns) - (to.accounted_ns - from.accounted_ns)) /
                         static_cast<double>(to.kernels - from.kernels));
  }
  if (!per_kernel.empty()) {
    std::sort(per_kernel.begin(), per_kernel.end());
    const std::size_t n = per_kernel.size();
    const double median = n % 2 == 1 ? per_kernel[n / 2] : (per_kernel[n / 2 - 1] + per_kernel[n / 2]) / 2;
    out.set_runtime_ns_per_kernel(std::max(0.0, median));
  }
  for (const auto& [k, s] : samples_) {
    if (s.ns.empty()) continue;
    std::vector<double> sorted = s.ns;
    std::sort(sorted.begin(), sorted.end());
    KernelCost* c = out.add_kernels();
    c->set_op(k.op);
    c->set_device_type(k.device_type);
    for (const auto& in : k.inputs) c->add_inputs(in);
    for (const auto& a : k.attrs) c->add_attrs(a);
    c->set_count(static_cast<std::int32_t>(sorted.size()));
    c->set_median_ns(sorted[sorted.size() / 2]);
    double sum = 0;
    for (double x : sorted) sum += x;
    c->set_mean_ns(sum / static_cast<double>(sorted.size()));
    c->set_p90_ns(sorted[std::min(sorted.size() - 1, sorted.size() * 9 / 10)]);
    c->set_min_ns(sorted.front());
    if (!s.cpu_ns.empty()) {
      std::vector<double> cpu = s.cpu_ns;
      std::nth_element(cpu.begin(), cpu.begin() + static_cast<std::ptrdiff_t>(cpu.size() / 2), cpu.end());
      c->set_median_cpu_ns(cpu[cpu.size() / 2]);
      double cpu_sum = 0;
      for (double x : cpu) cpu_sum += x;
      c->set_mean_cpu_ns(cpu_sum / static_cast<double>(cpu.size()));
    }
  }
  return out;
}

int add_alone_times(Calibration& table, const Calibration& alone) {
  int found = 0;
  for (KernelCost& c : *table.mutable_kernels()) {
    const KernelCost* a = find_cost(alone, c.op(), c.device_type(), {c.inputs().begin(), c.inputs().end()},
                                    {c.attrs().begin(), c.attrs().end()});
    if (a == nullptr) continue;
    c.set_alone_ns(a->mean_ns());
    ++found;
  }
  return found;
}

}  // namespace troupe::sim
