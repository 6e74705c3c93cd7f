// Calibration: what each kernel costs on this machine, measured by running a model
// (troupe calibrate, doc/simulation.md), for the simulation's compute model.
//
//   calibration_recorder rec;                 // a step_tracer: give it to a cluster
//   ... run steps ...
//   sim::Calibration table = rec.table();     // medians etc. by (op, device type, inputs)
//   TROUPE_RETURN_IF_ERROR(save_calibration(table, "calib.json"));   // sim/calibration_table.h
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "actors/tracing.h"
#include "core/status.h"
#include "core/tensor.h"
#include "sim/calibration.pb.h"
#include "sim/calibration_table.h"

namespace troupe::sim {

// "float[64,784]" ("float[]" for a scalar).
std::string input_signature(const tensor& t);
// The signature of each of `inputs`, in order: a kernel's key in the table.
std::vector<std::string> input_signatures(std::span<const tensor> inputs);
// The attributes of `def` that can change a kernel's cost, as KernelCost::attrs says.
std::vector<std::string> cost_attrs(const tf::NodeDef& def);

// Collects the durations of synchronous kernels by (op, device type, input signatures).
// The first k_skipped_per_kernel runs of each are a warm-up (first-touch allocations, a
// GEMM library timed once per process) and not counted, nor are runs begun before the
// recording was last resumed. Thread-safe. Each key keeps at
// most `max_samples` durations (later ones are dropped).
class calibration_recorder final : public actors::step_tracer {
 public:
  static constexpr int k_skipped_per_kernel = 2;
  // The windows of the runtime's CPU per kernel (below): from this run on, this many runs.
  static constexpr std::int64_t k_window_after = 500;
  static constexpr std::int64_t k_window_kernels = 256;
  explicit calibration_recorder(std::size_t max_samples = 100000)
      : max_samples_(max_samples), recorded_{{clock::now(), clock::time_point::max()}} {}

  // Forgets what was recorded.
  void reset();
  // Spans are recorded only while resumed (from construction on): troupe calibrate
  // measures the steady state, from a quarter of the steps to the last. Pausing closes
  // the window of runtime_ns_per_kernel too.
  void pause();
  void resume();
  // The recorded kernels' statistics, sorted by op, device type and inputs (the
  // Calibration's other fields are the caller's).
  Calibration table() const;
  // What the recorded steps moved between tasks: _Send kernels from a device of one task
  // to another's, their bytes, and the tasks' parts of steps (distinct step and task).
  struct traffic {
    std::int64_t transfers = 0, bytes = 0, parts = 0;
  };
  traffic between_tasks() const;
  // The links' transits between processes (link_transit: a REAL run's, which the runner
  // hands over seconds late, so each counts by when it arrived: while recording), fitted
  // as latency + bytes / bandwidth by least squares. With one size of tensor only, or no
  // growth with bytes, bandwidth_gbps is 0 and latency_us the mean. And the senders'
  // waits: each transit paired by its key and step with its transfer's hand-off
  // (transfer_sent, recorded while recording), the time from the later of the hand-off
  // and the end of the link's previous transit to the first write (the sender's thread
  // waiting for a core, not for its link), averaged over send_waits of them.
  struct transits {
    std::int64_t count = 0;
    double mean_bytes = 0, mean_us = 0;
    double latency_us = 0, bandwidth_gbps = 0;
    std::int64_t send_waits = 0;
    double send_wait_us = 0;
  };
  transits link_transits() const;
  // The synchronous kernels run while recording, and their CPU time (not the recorder's).
  struct kernel_runs {
    std::int64_t runs = 0;
    double cpu_ns = 0;
  };
  kernel_runs kernels_run() const;

  void node_span(const std::string& task, const std::string& device, const std::string& node, const std::string& op,
                 std::int64_t step_id, clock::time_point start, clock::time_point end,
                 const node_detail& detail) override;
  void transfer_sent(const std::string& key, std::int64_t step_id, const std::string& task, const std::string& device,
                     clock::time_point at) override;
  void transfer_received(const std::string&, std::int64_t, const std::string&, const std::string&,
                         clock::time_point) override {}
  void link_transit(const std::string& from, const std::string& to, std::int64_t bytes, clock::time_point sent,
                    clock::time_point arrived, const std::string& key, std::int64_t step_id) override;

 private:
  struct key {
    std::string op, device_type;
    std::vector<std::string> inputs, attrs;
    friend auto operator<=>(const key&, const key&) = default;
  };
  const std::size_t max_samples_;
  mutable std::mutex mutex_;
  struct samples {
    int skipped = 0;
    std::vector<double> ns, cpu_ns;
  };
  std::map<key, samples> samples_;
  traffic traffic_;
  void count_traffic(const std::string& task, const std::string& op, std::int64_t step_id, const node_detail& detail);
  std::set<std::pair<std::int64_t, std::string>> parts_seen_;  // (step, task)
  // Transits (at most max_samples_), and the windows of time recording was on.
  struct transit {
    std::int64_t bytes = 0;
    clock::time_point sent, arrived;
    std::string from, to, key;
    std::int64_t step = 0;
  };
  std::vector<transit> transits_;
  // The transfers' hand-offs while recording (at most max_samples_), by key and step.
  std::map<std::pair<std::string, std::int64_t>, clock::time_point> handed_;
  std::vector<std::pair<clock::time_point, clock::time_point>> recorded_;
  // Whether `at` fell in a window of recorded_ (REQUIRES: mutex_ held).
  bool while_recording(clock::time_point at) const;
  // The process's CPU time against its kernels', for Calibration::runtime_ns_per_kernel
  // (the constants above): read at the k_window_after-th kernel run, every
  // k_window_kernels runs after and at the pause; the median over the windows between two
  // readings (of at least a quarter of k_window_kernels runs) of what the process took
  // beyond the kernels and this recorder, per kernel. The median, not the whole: a kernel's
  // CPU time is counted when it ends, and one begun before the recording (an input reader
  // loading its files, 250 ms of CPU on a loaded machine) would put more into one window
  // than the process spent in it.
  struct cpu_point {
    double process_ns = 0, accounted_ns = 0;
    std::int64_t kernels = 0;
  };
  void read_cpu();  // REQUIRES: mutex_ held
  std::atomic<bool> recording_{true};
  std::int64_t runs_ = 0;
  double accounted_cpu_ns_ = 0;  // the kernels' CPU time and this recorder's own
  double kernel_cpu_ns_ = 0;     // the kernels' alone
  std::vector<cpu_point> cpu_points_;
};

// The runtime's cost per kernel from the same training untraced (Calibration::
// cpu_us_per_step): `steps` global steps of the traced run ran `runs`' kernels; what the
// untraced run's CPU per step leaves beyond their CPU time, per kernel, becomes
// runtime_ns_per_kernel (at least 0, at most the traced run's figure, when it has one:
// the recorder only adds work), the traced figure runtime_traced_ns_per_kernel.
// False (the table unchanged) when nothing was measured.
bool set_runtime_untraced(Calibration& table, const calibration_recorder::kernel_runs& runs, std::int64_t steps,
                          double cpu_us_per_step);

// Whether a traced run's CPU per global step says the machine was slow while it was
// traced, beside the untraced run's: the recorder costs 15-30% more CPU per step (LeNet
// and the MLP on 2-core machines here), and more than k_traced_over_untraced times
// (one calibration: 7,199 us traced against 3,973 untraced, its kernels as slow) makes
// troupe calibrate trace again. False when either was not measured.
inline constexpr double k_traced_over_untraced = 1.45;
bool traced_while_slow(double traced_us, double untraced_us);

// The untraced run's CPU per global step: `measure` runs the untraced training and says
// its CPU per step (0: no steady state measured). It cannot exceed the traced run's
// (`traced_us`: the recorder only adds work), so a figure above it says the machine
// slowed between the two runs (one 2-core VM's CPU per LeNet step measured 6,198 us
// untraced against 5,251 traced, then 4,400 in the next calibration): measured again, at
// most `tries` runs in all, and the lowest kept. `rejected` (may be null) hears each
// figure measured again.
double untraced_cpu_us_per_step(double traced_us, const std::function<double()>& measure, int tries = 3,
                                const std::function<void(double)>& rejected = nullptr);

// Sets each entry's alone_ns to the mean wall time of the same kernel (op, device type,
// inputs, attributes) in `alone`, a table measured with one worker task; the entries it
// found.
int add_alone_times(Calibration& table, const Calibration& alone);

}  // namespace troupe::sim
