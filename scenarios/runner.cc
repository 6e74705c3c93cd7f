#include "scenarios/runner.h"

#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "actors/cluster.h"
#include "actors/session.h"
#include "cluster/certificates.h"
#include "cluster/fault_injector.h"
#include "cluster/real_cluster.h"
#include "cluster/remote_task.h"
#include "cluster/supervisor.h"
#include "cluster/sync_coordinator.h"
#include "cluster/task_processes.h"
#include "core/env.h"
#include "core/file.h"
#include "core/idx.h"
#include "core/retry.h"
#include "graph/attr.h"
#include "graph/ops.h"
#include "graph/train.h"
#include "placement/graph_dot.h"
#include "placement/placer.h"
#include "placement/replica_device_setter.h"
#include "kernels/kernel_registry.h"
#include "actors/runtime_kernels.h"
#include "scenarios/input_room.h"
#include "scenarios/model_zoo.h"
#include "scenarios/progress.h"
#include "scenarios/scenario.h"
#include "scenarios/trace.h"
#include "sim/simulation.h"

namespace troupe::scenarios {

namespace {

using graph::output;
using graph::scope;

// Node names the runner drives.
constexpr const char* k_train = "train";
constexpr const char* k_close = "input/close";
constexpr const char* k_queue_size = "input/size";
// An enqueue, and the queue's size once it is done: one step where a size check and an
// enqueue would be two.
constexpr const char* k_enqueue_then_size = "input/size_after_enqueue";
constexpr const char* k_dequeue_images = "input/dequeue:0";
constexpr const char* k_dequeue_labels = "input/dequeue:1";

// The examples one reader step adds to the queue (the IdxReader's batch): a training
// batch, or less when the queue could not take reader_threads of them above
// min_after_dequeue. Reader steps pass the gate as feeders and enqueue only when all the
// readers' next steps fit (so none ever waits in a full queue at a cut); this size keeps
// a dequeue waiting on elements always able to get them.
std::int64_t reader_batch(const scenario::Dataset& d, int batch) {
  const std::int64_t readers = std::max(1, d.reader_threads());
  const std::int64_t room = std::int64_t{d.queue_capacity()} - d.min_after_dequeue();
  return std::max<std::int64_t>(1, std::min<std::int64_t>(batch, room / readers));
}
// BUGGIFY site input.slow_reader: a reader step that starts this much later.
constexpr std::chrono::milliseconds k_slow_reader{20};

// Readers that run at once: no more than elements fit above min_after_dequeue.
int effective_readers(const scenario::Dataset& d) {
  return static_cast<int>(std::max<std::int64_t>(
      1, std::min<std::int64_t>(std::max(1, d.reader_threads()), std::int64_t{d.queue_capacity()} - d.min_after_dequeue())));
}
constexpr const char* k_init = "init";

struct cluster_layout {
  // "/job:worker/task:w": worker w's task (also the name its gradients carry under SYNC).
  std::string worker(int w) const { return str_cat("/job:", worker_job, "/task:", w); }
  std::string worker_job;
  std::string ps_job;  // empty: no PS tasks
  int workers = 1;
  int ps_tasks = 0;
  placement::cluster_spec spec = placement::cluster_spec::local();
};

result<cluster_layout> layout_of(const scenario::Cluster& c) {
  cluster_layout l;
  l.worker_job = c.worker_job().empty() ? "worker" : c.worker_job();
  l.ps_job = c.has_ps_job() ? c.ps_job() : "";
  std::map<std::string, int> tasks;
  for (const auto& job : c.job()) tasks[job.name()] = job.has_tasks() ? job.tasks() : 1;
  if (tasks.empty()) tasks[l.worker_job] = 1;
  if (l.ps_job.empty() && tasks.count("ps") > 0 && l.worker_job != "ps") l.ps_job = "ps";
  if (tasks.count(l.worker_job) == 0) {
    return invalid_argument_error("cluster: the worker job '", l.worker_job, "' has no tasks");
  }
  l.workers = tasks[l.worker_job];
  l.ps_tasks = l.ps_job.empty() ? 0 : tasks[l.ps_job];
  auto spec = placement::cluster_spec::from_task_counts(tasks);
  if (!spec.ok()) return spec.error().with_context("cluster");
  l.spec = std::move(*spec);
  return l;
}

train::optimizer optimizer_of(const scenario::Optimizer& o) {
  const std::string& n = o.name();
  train::optimizer opt = n == "momentum" ? train::momentum(o.learning_rate(), o.momentum(), o.nesterov())
                         : n == "adagrad" ? train::adagrad(o.learning_rate(), o.initial_accumulator_value())
                         : n == "adam"    ? train::adam(o.learning_rate(), o.beta1(), o.beta2(), o.epsilon())
                         : n == "rmsprop" ? train::rms_prop(o.learning_rate(), o.decay(), o.momentum(), o.epsilon())
                                          : train::gradient_descent(o.learning_rate());
  if (o.has_decay_steps()) {
    opt.decay_steps = o.decay_steps();
    opt.decay_rate = o.decay_rate();
    opt.staircase = o.staircase();
  }
  return opt;
}

// Places variables on the PS tasks and the rest on `worker_device`, then validates.
result<graph::graph> finish_graph(const scope& root, const cluster_layout& l, const std::string& worker_device) {
  auto def = root.to_graph_def();
  if (!def.ok()) return def.error();
  placement::replica_device_setter_options o;
  o.ps_tasks = l.ps_tasks;
  o.ps_job = l.ps_job.empty() ? "ps" : l.ps_job;
  o.worker_device = worker_device;
  TROUPE_RETURN_IF_ERROR(placement::replica_device_setter(&*def, o));
  return graph::graph::from_graph_def(std::move(*def));
}

// A worker's training graph: input pipeline, model, optimizer, global step. With SYNC
// replication `train` puts the worker's gradients into the accumulators and takes its
// next token; `sync` (when not null) gets the ops that drive it.
result<graph::graph> training_graph(const scenario::Scenario& sc, const cluster_layout& l, int worker,
                                    const dataset_files& files, train::sync_replicas_ops* sync = nullptr) {
  auto root = graph::scope::new_root();
  const auto& d = sc.dataset();
  const auto& t = sc.training();
  const std::int64_t seed = static_cast<std::int64_t>(t.seed());
  const int batch = t.batch_size();
  {
    scope in = root.sub("input");
    std::map<std::string, tf::AttrValue> reader_attrs = {
        {"images", graph::attr_value(files.train_images)},
        {"labels", graph::attr_value(files.train_labels)},
        {"batch_size", graph::attr_value(reader_batch(d, batch))},
        {"num_epochs", graph::attr_value(std::int64_t{0})},
        {"shuffle", graph::attr_value(d.shuffle())},
        {"seed", graph::attr_value(seed + 1000 * worker + 1)}};
    auto reader = in.with_name("reader").add("IdxReader", {}, reader_attrs);
    output images = ops::mul(in, ops::cast(in, reader.out(0), dtype::float32), ops::scalar(in, 1.0f / 255.0f));
    images = ops::reshape(in.with_name("flat"), images, ops::constant(in, tensor::from_vector<std::int32_t>({-1, 784})));
    output labels = ops::cast(in, reader.out(1), dtype::int32);
    std::map<std::string, tf::AttrValue> queue_attrs = {
        {"component_types", graph::attr_value(std::vector<dtype>{dtype::float32, dtype::int32})},
        {"shapes", graph::attr_value(std::vector<partial_shape>{partial_shape({784}), partial_shape::scalar()})},
        {"capacity", graph::attr_value(static_cast<std::int64_t>(d.queue_capacity()))}};
    std::string queue_op = "FIFOQueueV2";
    if (d.shuffle() && !d.deterministic()) {
      queue_op = "RandomShuffleQueueV2";
      queue_attrs["min_after_dequeue"] = graph::attr_value(static_cast<std::int64_t>(d.min_after_dequeue()));
      queue_attrs["seed"] = graph::attr_value(seed + 1000 * worker + 2);
    }
    auto queue = in.with_name("queue").add(queue_op, {}, queue_attrs);
    auto enqueue = in.with_name("enqueue").add("QueueEnqueueManyV2", {queue.out(0), graph::input({images, labels})});
    in.with_name("size").add("QueueSizeV2", {queue.out(0)});
    in.with_name("size_after_enqueue").with_control_dependencies({enqueue}).add("QueueSizeV2", {queue.out(0)});
    in.with_name("close").add("QueueCloseV2", {queue.out(0)},
                              {{"cancel_pending_enqueues", graph::attr_value(true)}});
    auto batch_op = in.with_name("dequeue").add(
        "QueueDequeueManyV2", {queue.out(0), ops::scalar<std::int32_t>(in, batch)},
        {{"component_types", graph::attr_value(std::vector<dtype>{dtype::float32, dtype::int32})}});
    graph::variable_collection vars;
    auto model = build_model(root, vars, sc.model(), batch_op.out(0), batch_op.out(1), true, seed);
    if (!model.ok()) return model.error();
    auto step = train::make_global_step(root, vars);
    ops::identity(root.with_name("loss_value"), model->loss);
    ops::identity(root.with_name("step_value"), step.value);
    if (t.replication() == scenario::Training::SYNC) {
      const auto replicas = train::sync_replicas(optimizer_of(t.optimizer()), l.workers - t.backup_workers(), l.workers);
      auto sync_ops = train::minimize(root, replicas, model->loss, vars, step, worker);
      if (!sync_ops.ok()) return sync_ops.error();
      ops::no_op(root.with_name(k_train).with_control_dependencies({sync_ops->train}));
      if (sync != nullptr) *sync = std::move(*sync_ops);
    } else {
      auto train_op = train::minimize(root, optimizer_of(t.optimizer()), model->loss, vars, step);
      if (!train_op.ok()) return train_op.error();
      ops::no_op(root.with_name(k_train).with_control_dependencies({*train_op}));
    }
    graph::global_variables_initializer(root, vars);
  }
  return finish_graph(root, l, l.worker(worker));
}

// The evaluation graph: the same model reading a fed test batch; its variables are the
// training graphs' (same names, same PS tasks).
result<graph::graph> evaluation_graph(const scenario::Scenario& sc, const cluster_layout& l) {
  auto root = graph::scope::new_root();
  auto images = ops::placeholder(root.with_name("eval_images"), dtype::float32, partial_shape({-1, 784}));
  auto labels = ops::placeholder(root.with_name("eval_labels"), dtype::int32, partial_shape({-1}));
  graph::variable_collection vars;
  auto model = build_model(root, vars, sc.model(), images, labels, false,
                           static_cast<std::int64_t>(sc.training().seed()));
  if (!model.ok()) return model.error();
  ops::identity(root.with_name("eval_correct"), model->correct);
  return finish_graph(root, l, l.worker(0));
}

struct test_set {
  tensor images;  // float [n, 784]
  tensor labels;  // int32 [n]
};

result<test_set> load_test_set(const dataset_files& files) {
  auto ex = read_idx_examples(files.test_images, files.test_labels);
  if (!ex.ok()) return ex.error();
  // The last test set converted, kept while its files are (read_idx keeps them decoded):
  // runs one after another in a process (tests, seeds of a simulation) convert it once.
  struct converted {
    std::mutex mutex;
    tensor images, labels;  // read_idx's, as the key
    test_set value;
  };
  static converted* last = new converted;  // never destroyed: used until the process ends
  std::lock_guard<std::mutex> lock(last->mutex);
  if (last->images.initialized() && last->images.raw_data() == ex->images.raw_data() &&
      last->labels.raw_data() == ex->labels.raw_data()) {
    return last->value;
  }
  std::int64_t n = ex->labels.num_elements();
  test_set t{tensor(dtype::float32, {n, 784}), tensor(dtype::int32, {n})};
  auto src = ex->images.flat<std::uint8_t>();
  auto dst = t.images.flat<float>();
  for (std::size_t i = 0; i < dst.size(); ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
  auto ls = ex->labels.flat<std::uint8_t>();
  auto ld = t.labels.flat<std::int32_t>();
  for (std::size_t i = 0; i < ld.size(); ++i) ld[i] = ls[i];
  last->images = ex->images;
  last->labels = ex->labels;
  last->value = t;
  return t;
}

// The test accuracy, 1,000 images a step; `run` makes each step (a callable that takes the
// step's request and answers its result: it may retry the step, or pass a gate).
template <class Run>
result<double> evaluate(actors::session& s, const test_set& t, Run&& run) {
  const std::int64_t n = t.labels.num_elements();
  const std::int64_t chunk = 1000;
  std::int64_t correct = 0;
  for (std::int64_t begin = 0; begin < n; begin += chunk) {
    std::int64_t k = std::min(chunk, n - begin);
    tensor x(dtype::float32, {k, 784});
    tensor y(dtype::int32, {k});
    std::memcpy(x.raw_data(), t.images.flat<float>().data() + begin * 784, x.byte_size());
    std::memcpy(y.raw_data(), t.labels.flat<std::int32_t>().data() + begin, y.byte_size());
    result<std::vector<tensor>> r = run([&] { return s.run({{"eval_images", x}, {"eval_labels", y}}, {"eval_correct"}); });
    if (!r.ok()) return r.error().with_context("evaluation");
    correct += r->at(0).scalar_value<std::int32_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(n);
}

// Feeds the runtime's spans and transfers into a Chrome trace; pairs each transfer's two
// ends by (key, step) into one arrow.
class recorder_tracer final : public actors::step_tracer {
 public:
  explicit recorder_tracer(trace_recorder& recorder) : recorder_(recorder) {}

  void node_span(const std::string& task, const std::string& device, const std::string& node,
                 const std::string& op, std::int64_t step_id, clock::time_point start, clock::time_point end,
                 const node_detail&) override {
    recorder_.record_span({task, device, node, op, start, end, step_id});
  }
  void transfer_sent(const std::string& key, std::int64_t step_id, const std::string& task,
                     const std::string& device, clock::time_point at) override {
    end(key, step_id, {task, device, at}, true);
  }
  void transfer_received(const std::string& key, std::int64_t step_id, const std::string& task,
                         const std::string& device, clock::time_point at) override {
    end(key, step_id, {task, device, at}, false);
  }
  // A tensor's way between two processes (mode REAL): a slice in a row of the receiving
  // task per sending task, from its first write to its last byte in.
  void link_transit(const std::string& from, const std::string& to, std::int64_t bytes, clock::time_point sent,
                    clock::time_point arrived, const std::string&, std::int64_t) override {
    recorder_.record_span({to, str_cat("link from ", from), str_cat(bytes, " bytes"), "link_transit", sent, arrived});
  }

 private:
  void end(const std::string& key, std::int64_t step_id, trace_point point, bool sent) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto [it, inserted] = open_.try_emplace({key, step_id});
    if (inserted) {
      it->second = {std::move(point), sent};
      return;
    }
    trace_point other = std::move(it->second.first);
    open_.erase(it);
    lock.unlock();
    trace_flow flow{key, sent ? std::move(point) : std::move(other), sent ? std::move(other) : std::move(point),
                    step_id};
    recorder_.record_flow(std::move(flow));
  }

  trace_recorder& recorder_;
  std::mutex mutex_;
  std::map<std::pair<std::string, std::int64_t>, std::pair<trace_point, bool>> open_;
};

// What synchronous replication did with each worker's gradients: a gradient is one
// worker's step, used when an accumulator aggregated it, else dropped: as a backup when
// it came right after its own step's aggregate (it lost the race for that step to the
// workers ahead of it), as stale when it came later still (computed on values more than
// one update old: a worker far slower than the others, or a step a rollback undid).
class sync_tally final : public actors::sync_observer {
 public:
  // `marks`: keep one trace mark per step (for --trace).
  explicit sync_tally(bool marks) : keep_marks_(marks) {}

  void gradient(const std::string&, const std::string& source, std::int64_t local_step, std::int64_t global_step,
                bool kept) override {
    if (kept) return;
    const bool backup = local_step == global_step - 1;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = recent_.find(local_step);
    if (it == recent_.end()) {
      // A step folded long ago (or one a rollback undid): no take can have used it now.
      count(source, backup);
      return;
    }
    if (it->second.used.count(source) > 0) return;  // another variable's take used it
    auto [d, first] = it->second.dropped.try_emplace(source, backup);
    if (!first) d->second = d->second && backup;
  }
  void aggregated(const std::string& accumulator, std::int64_t step, const std::vector<std::string>& sources) override {
    aggregated_at(accumulator, step, sources, env::now());
  }
  // The same, told later (by a server of a real cluster): `at` is when it happened.
  void aggregated_at(const std::string&, std::int64_t step, const std::vector<std::string>& sources,
                     trace_clock::time_point at) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, first] = recent_.try_emplace(step);
    if (first) {
      it->second.at = at;
      // Memory stays bounded: steps far behind the newest are counted and let go (a
      // gradient reaches every accumulator within far less than k_window updates).
      while (!recent_.empty() && recent_.begin()->first < step - k_window) fold(recent_.begin());
    }
    for (const auto& s : sources) {
      it->second.used.insert(s);
      it->second.dropped.erase(s);
    }
  }

  run_summary::sync_record record(const std::vector<std::string>& workers, int aggregate, int backups) {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!recent_.empty()) fold(recent_.begin());
    run_summary::sync_record r;
    r.present = true;
    r.replicas_to_aggregate = aggregate;
    r.backup_workers = backups;
    for (const auto& w : workers) r.workers[w];
    for (const auto& [w, c] : counts_) {
      r.workers[w] = c;
      r.backup += c.backup;
      r.stale += c.stale;
    }
    return r;
  }

  // One mark per aggregated step (after record()): whose gradients it used, left out,
  // found stale.
  std::vector<trace_mark> marks() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::move(marks_);
  }

 private:
  static constexpr std::int64_t k_window = 1024;
  struct step_record {
    trace_clock::time_point at;
    std::set<std::string> used;
    std::map<std::string, bool> dropped;  // by worker: a backup (else stale)?
  };
  // REQUIRES: mutex_ held.
  void count(const std::string& worker, bool backup) {
    auto& c = counts_[worker];
    ++(backup ? c.backup : c.stale);
  }
  void fold(std::map<std::int64_t, step_record>::iterator it) {
    const auto& [step, s] = *it;
    for (const auto& w : s.used) ++counts_[w].used;
    for (const auto& [w, backup] : s.dropped) count(w, backup);
    if (keep_marks_) {
      std::string used, backups, stale;
      for (const auto& w : s.used) used += str_cat(used.empty() ? "" : ", ", w);
      for (const auto& [w, backup] : s.dropped) {
        std::string& list = backup ? backups : stale;
        list += str_cat(list.empty() ? "" : ", ", w);
      }
      marks_.push_back({"", str_cat("sync step ", step), "sync", s.at, s.at,
                        str_cat("used: ", used, "; backups left out: ", backups.empty() ? "none" : backups,
                                "; stale: ", stale.empty() ? "none" : stale)});
    }
    recent_.erase(it);
  }

  const bool keep_marks_;
  std::mutex mutex_;
  std::map<std::int64_t, step_record> recent_;
  std::map<std::string, run_summary::sync_counts> counts_;
  std::vector<trace_mark> marks_;
};

// The scenario's listed faults as the injector takes them; drop_messages draws from the
// run's seed and the fault's place in the list.
std::vector<cluster::fault_spec> fault_specs_of(const scenario::Faults& faults, std::uint64_t seed) {
  std::vector<cluster::fault_spec> out;
  for (const auto& f : faults.fault()) {
    cluster::fault_spec spec;
    spec.at_step = f.at_step();
    spec.until_step = f.has_until_step() ? f.until_step() : 0;
    switch (f.kind_case()) {
      case scenario::Fault::kKill: spec.kind = "kill", spec.task = f.kill().task(); break;
      case scenario::Fault::kStraggle:
        spec.kind = "straggle", spec.task = f.straggle().task(), spec.delay_ms = f.straggle().delay_ms();
        break;
      case scenario::Fault::kStall:
        spec.kind = "stall", spec.task = f.stall().task(), spec.duration_ms = f.stall().duration_ms();
        break;
      case scenario::Fault::kCorruptCheckpoint: spec.kind = "corrupt_checkpoint"; break;
      case scenario::Fault::kDiskFull: spec.kind = "disk_full"; break;
      case scenario::Fault::kKillDuringCheckpoint: spec.kind = "kill_during_checkpoint"; break;
      case scenario::Fault::kDropMessages:
        spec.kind = "drop_messages", spec.task = f.drop_messages().from(), spec.to = f.drop_messages().to();
        spec.probability = f.drop_messages().probability();
        spec.seed = seed + static_cast<std::uint64_t>(out.size());
        break;
      case scenario::Fault::kDelayMessages:
        spec.kind = "delay_messages", spec.task = f.delay_messages().from(), spec.to = f.delay_messages().to();
        spec.delay_ms = f.delay_messages().delay_ms();
        break;
      case scenario::Fault::KIND_NOT_SET: continue;
    }
    out.push_back(std::move(spec));
  }
  return out;
}

// What each injected fault came to. A kill is recovered by its task's first recovery
// after it (its time: until the task is back with its state); a corrupt checkpoint by the
// first commit after it, a full disk by the first commit after it is lifted; a straggle
// or stall needs nothing but time (a stall's recovery time is its duration).
std::vector<fault_record> fault_records(const std::vector<cluster::injected_fault>& injected,
                                        const std::vector<cluster::recovery_record>& recoveries,
                                        const std::vector<std::chrono::steady_clock::time_point>& commits) {
  using seconds = std::chrono::duration<double>;
  std::vector<bool> used(recoveries.size(), false);
  auto first_commit_after = [&](std::chrono::steady_clock::time_point t) {
    for (const auto& c : commits) {
      if (c > t) return std::optional(c);
    }
    return std::optional<std::chrono::steady_clock::time_point>();
  };
  std::vector<fault_record> out;
  for (const auto& f : injected) {
    // The step the scenario (or the random draw) set: the same every run.
    fault_record r{f.spec.kind, f.task, f.spec.at_step, false, 0};
    if (!f.outcome.ok()) {
      out.push_back(std::move(r));
      continue;
    }
    const auto& kind = f.spec.kind;
    if (kind == "kill") {
      for (std::size_t i = 0; i < recoveries.size(); ++i) {
        if (used[i] || recoveries[i].task != f.task || recoveries[i].down_at < f.at) continue;
        used[i] = true;
        r.recovered = recoveries[i].recovered;
        r.recovery_seconds = seconds(recoveries[i].down_at - f.at).count() + recoveries[i].seconds;
        break;
      }
    } else if (kind == "corrupt_checkpoint" || kind == "disk_full" || kind == "kill_during_checkpoint") {
      if (auto c = first_commit_after(kind == "disk_full" && f.lifted_at ? *f.lifted_at : f.at)) {
        r.recovered = true;
        r.recovery_seconds = seconds(*c - f.at).count();
      }
    } else {
      r.recovered = true;
      if (kind == "stall") r.recovery_seconds = static_cast<double>(f.spec.duration_ms) / 1000;
    }
    out.push_back(std::move(r));
  }
  return out;
}

// REAL mode: the servers of the cluster's tasks and the options of this process's
// cluster, a client of theirs. The servers are started here on free loopback ports (with
// the cluster file and their logs in a directory of their own, removed at the end), or
// were started by hand at the scenario's addresses or with its cluster_file.
struct real_servers {
  std::string dir;
  std::unique_ptr<cluster::task_processes> processes;  // null: servers started by hand
  actors::cluster_options options;
  real_servers() = default;
  real_servers(const real_servers&) = delete;
  real_servers& operator=(const real_servers&) = delete;
  ~real_servers() {
    processes.reset();  // every server stopped and reaped first
    std::error_code ignored;
    if (!dir.empty()) std::filesystem::remove_all(dir, ignored);
  }
};

// Waits up to `limit` until a TCP connection to host:port is accepted (a server started
// by hand that its own supervisor brings back).
status wait_for_address(const cluster::task_address& a, std::chrono::seconds limit) {
  const auto deadline = env::now() + limit;
  do {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(a.port);
    const std::string host = a.host.size() > 2 && a.host.front() == '[' ? a.host.substr(1, a.host.size() - 2) : a.host;
    if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) == 0) {
      bool up = false;
      for (addrinfo* i = found; i != nullptr && !up; i = i->ai_next) {
        const int fd = ::socket(i->ai_family, i->ai_socktype | SOCK_CLOEXEC, i->ai_protocol);
        if (fd < 0) continue;
        up = ::connect(fd, i->ai_addr, i->ai_addrlen) == 0;
        ::close(fd);
      }
      ::freeaddrinfo(found);
      if (up) return status();
    }
    env::sleep_for(std::chrono::milliseconds(200));
  } while (env::now() < deadline);
  return unavailable_error("task ", a.task_name(), " at ", a.host, ":", a.port, " did not come back within ",
                           limit.count(), " s (its server was started by hand: start it again there)");
}

// Removes the directories of REAL runs whose troupe run was killed (its servers died with
// it; the directory stayed): "troupe-real-<pid>-<n>" whose process is gone.
void remove_dirs_of_dead_runs() {
  std::error_code listing;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::temp_directory_path(), listing)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("troupe-real-", 0) != 0) continue;
    const std::string rest = name.substr(12);
    const auto dash = rest.find('-');
    if (dash == std::string::npos || dash == 0 || rest.find_first_not_of("0123456789") != dash) continue;
    const long pid = std::strtol(rest.substr(0, dash).c_str(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      std::filesystem::remove_all(entry.path(), ignored);
    }
  }
}

// The tasks of the servers' cluster file against the scenario's: the same jobs with the
// same numbers of tasks (the file's addresses are its own business).
status same_tasks(const scenario::Cluster& c, const cluster::cluster_file& file) {
  std::map<std::string, int> wanted, found;
  for (const auto& job : c.job()) wanted[job.name()] = job.tasks();
  for (const auto& a : file.tasks()) found[a.job] = std::max(found[a.job], a.index + 1);
  auto describe = [](const std::map<std::string, int>& jobs) {
    std::string out;
    for (const auto& [name, tasks] : jobs) out += str_cat(out.empty() ? "" : ", ", name, " (", tasks, ")");
    return out;
  };
  std::size_t total = 0;
  for (const auto& job : wanted) total += static_cast<std::size_t>(job.second);
  if (wanted == found && file.tasks().size() == total) return status();
  return invalid_argument_error("cluster.cluster_file '", c.cluster_file(), "' has the jobs ", describe(found),
                                " but the scenario's cluster has ", describe(wanted),
                                ": name the file the servers of this cluster were started with");
}

result<std::unique_ptr<real_servers>> start_real_servers(const scenario::Cluster& c, const cluster_layout& layout,
                                                         const run_options& options, bool trace, std::ostream& out) {
  auto r = std::make_unique<real_servers>();
  const bool by_hand = servers_by_hand(c);
  const bool with_file = !c.cluster_file().empty();
  std::string text;
  for (const auto& job : c.job()) {
    if (with_file) break;
    text += str_cat("job { name: \"", job.name(), "\"");
    for (int t = 0; t < job.tasks(); ++t) {
      std::string address = by_hand ? job.addresses(t) : "";
      if (!by_hand) {
        const int port = cluster::free_loopback_port();
        if (port == 0) return unavailable_error("no free loopback port for task ", t, " of job ", job.name());
        address = str_cat("127.0.0.1:", port);
      }
      text += str_cat(" tasks { key: ", t, " value: \"", address, "\" }");
    }
    text += " }\n";
  }
  std::string path = "scenario.cluster";  // servers by hand: only named in errors
  if (!by_hand) {
    static std::atomic<int> runs{0};
    remove_dirs_of_dead_runs();
    r->dir = (std::filesystem::temp_directory_path() / str_cat("troupe-real-", ::getpid(), "-", runs++)).string();
    std::error_code made;
    std::filesystem::create_directories(r->dir, made);
    if (made) return unavailable_error("cannot make the directory '", r->dir, "' of the servers: ", made.message());
    path = r->dir + "/cluster.pbtxt";
    TROUPE_RETURN_IF_ERROR(write_file(path, text));
  }
  auto file = with_file ? cluster::cluster_file::load(c.cluster_file()) : cluster::cluster_file::parse(text, path);
  if (!file.ok()) return file.error().with_context(with_file ? "cluster.cluster_file" : "cluster (mode: REAL)");
  if (with_file) TROUPE_RETURN_IF_ERROR(same_tasks(c, *file));
  if (c.tls()) {
    // A CA and certificates for this run: the servers and this client read them from
    // the cluster file with its tls section.
    auto made = cluster::make_test_certificates(*file, r->dir + "/certs", /*days=*/2);
    if (!made.ok()) return made.error().with_context("cluster.tls");
    file = cluster::cluster_file::load(made->cluster_file);
    if (!file.ok()) return file.error().with_context("cluster.tls");
  }
  if (file->spec().device_names() != layout.spec.device_names()) {
    return internal_error("cluster (mode: REAL): the cluster file's devices differ from the scenario's");
  }
  auto o = cluster::process_cluster_options(*file, {}, str_cat("troupe run (pid ", ::getpid(), ")"));
  if (!o.ok()) return o.error();
  r->options = std::move(*o);
  if (by_hand) {
    auto control = std::make_shared<actors::cluster_options::remote_task_control>();
    control->restart = [tasks = file->tasks()](const std::string& task) -> status {
      for (const auto& a : tasks) {
        if (a.task_name() == task) return wait_for_address(a, std::chrono::seconds(60));
      }
      return not_found_error("no task '", task, "' in the cluster");
    };
    r->options.remote_tasks = std::move(control);
    if (with_file) {
      out << "cluster: REAL, servers started by hand with " << c.cluster_file()
          << (file->tls().has_value() ? ", mutual TLS with identity proofs" : "") << "\n";
    } else {
      out << "cluster: REAL, servers started by hand at the scenario's addresses\n";
    }
    return r;
  }
  cluster::task_processes_options po;
  po.executable = options.server_program;
  if (po.executable.empty()) {
    std::error_code failed;
    po.executable = std::filesystem::read_symlink("/proc/self/exe", failed).string();
  }
  po.log_dir = r->dir;
  po.trace = trace;
  auto processes = cluster::task_processes::start(*file, po);
  if (!processes.ok()) return processes.error().with_context("cluster (mode: REAL)");
  r->processes = std::move(*processes);
  r->options.remote_tasks = r->processes->control();
  out << "cluster: REAL, " << file->tasks().size() << " server processes on loopback"
      << (c.tls() ? ", mutual TLS with identity proofs" : "") << " (" << r->dir << ")\n";
  return r;
}

// The simulation section as the simulated world's options (the table read), for a
// cluster of `tasks` tasks.
result<sim::simulation_options> simulation_options_of(const scenario::Simulation& s, int tasks) {
  sim::simulation_options o;
  o.seed = s.seed();
  o.network.latency_us = s.network().latency_us();
  o.network.bandwidth_gbps = s.network().bandwidth_gbps();
  o.network.jitter_us = s.network().jitter_us();
  o.network.copy_gbps = s.network().copy_gbps();
  o.network.nic_gbps = s.network().nic_gbps();
  o.network.message_cpu_us = s.network().message_cpu_us();
  o.network.transfer_us = s.network().transfer_us();
  o.network.step_cpu_us = s.network().step_cpu_us();
  // Each part of a step among the tasks' processes and the client's (network.process_cpu_us).
  o.network.crowding_cpu_us = s.network().process_cpu_us() * (tasks + 1);
  o.network.busy_wait_us = s.network().busy_wait_us();
  o.network.send_busy_wait_us = s.network().send_busy_wait_us();
  const auto& c = s.compute();
  if (!c.table().empty()) {
    auto table = sim::load_calibration(c.table());
    if (!table.ok()) return table.error().with_context("simulation.compute.table");
    o.compute.table = std::move(*table);
  }
  // Each part of a step among more tasks in one process than the table's (compute.task_cpu_us).
  {
    const int beyond = std::max(0, tasks - (o.compute.table ? o.compute.table->tasks() : 0));
    o.network.crowding_cpu_us += c.task_cpu_us() * beyond;
  }
  o.compute.gflops = c.gflops();
  o.compute.memory_gbps = c.memory_gbps();
  o.compute.kernel_overhead_us = c.kernel_overhead_us();
  o.compute.cores_per_device = c.cores_per_device();
  o.compute.machine_cores = c.machine_cores();
  o.compute.intra_op_threads = c.intra_op_threads();
  o.compute.noise = c.noise();
  o.compute.noise_ms = c.noise_ms();
  o.swizzle.every_ms = s.swizzle().every_ms();
  o.swizzle.clog_ms = s.swizzle().clog_ms();
  o.swizzle.links = s.swizzle().links();
  o.execute_kernels = s.execute_kernels();
  return o;
}

// The set-up's requests (before the supervisor watches the tasks) are made again while
// they fail as retryable, for up to k_setup_for (k_setup_for_simulated in virtual time,
// where no server can be missing and waiting costs nothing), 100 ms after the first try,
// then up to a second apart.
constexpr std::chrono::seconds k_setup_for{5};
constexpr std::chrono::seconds k_setup_for_simulated{60};

progress_style style_of(scenario::Report::Progress p) {
  switch (p) {
    case scenario::Report::BAR: return progress_style::bar;
    case scenario::Report::PLAIN: return progress_style::plain;
    case scenario::Report::OFF: return progress_style::off;
    default: return progress_style::automatic;
  }
}

}  // namespace

result<run_summary> run_scenario(const scenario::Scenario& sc, const run_options& options) {
  const auto wall_started = std::chrono::steady_clock::now();
  std::ostream& out = *options.out;
  const auto& t = sc.training();
  const bool sync = t.replication() == scenario::Training::SYNC;
  const std::int64_t total_steps = options.steps > 0 ? options.steps : t.steps();
  TROUPE_RETURN_IF_ERROR(check_dataset_files(sc.dataset()));
  dataset_files files = files_of(sc.dataset());
  auto layout = layout_of(sc.cluster());
  if (!layout.ok()) return layout.error();

  out << "scenario '" << sc.name() << "': model " << sc.model().name() << ", " << layout->workers << " worker(s)";
  if (layout->ps_tasks > 0) out << ", " << layout->ps_tasks << " ps task(s)";
  const auto& o = t.optimizer();
  out << ", " << o.name();
  if (o.has_decay_steps()) {
    out << " (learning rate " << o.learning_rate() << " times " << o.decay_rate() << " every " << o.decay_steps()
        << " steps" << (o.staircase() ? ", in stairs)" : ")");
  }
  out << ", " << total_steps << " steps of batch " << t.batch_size() << ", seed " << t.seed();
  if (sync) {
    out << ", SYNC: each step averages " << layout->workers - t.backup_workers() << " of " << layout->workers
        << " workers' gradients";
  }
  out << "\n";

  const std::string trace_file = options.trace_file.empty() ? sc.report().trace_file() : options.trace_file;
  std::unique_ptr<trace_recorder> recorder;
  std::unique_ptr<recorder_tracer> tracer;
  if (!trace_file.empty()) {
    recorder = std::make_unique<trace_recorder>();
    tracer = std::make_unique<recorder_tracer>(*recorder);
  }
  // SIMULATED: this thread and every thread of the run take turns in a simulated world,
  // which outlives everything below.
  std::unique_ptr<sim::simulation> simulated;
  if (sc.cluster().mode() == scenario::Cluster::SIMULATED) {
    auto o = simulation_options_of(sc.simulation(), num_tasks(sc.cluster()));
    if (!o.ok()) return o.error();
    simulated = std::make_unique<sim::simulation>(std::move(*o));
    if (!options.no_faults && sc.faults().random().buggify()) simulated->world().set_buggify(true);
    const auto& m = sc.simulation();
    out << "cluster: SIMULATED, virtual time (seed " << m.seed() << "; network " << m.network().latency_us()
        << " us latency, " << m.network().bandwidth_gbps() << " Gb/s per link; compute "
        << (m.compute().table().empty() ? std::string("by rates") : "from " + m.compute().table())
        << (m.execute_kernels() ? "" : "; shape-only: kernels compute no values") << ")\n";
  }
  // REAL: every task in a server process of its own, this process their client. Traced
  // (a trace file or run_options::tracer), the servers time their kernels and links.
  const bool traced = recorder != nullptr || options.tracer != nullptr;
  std::unique_ptr<real_servers> real;
  actors::cluster_options co;
  co.simulation = simulated.get();
  if (sc.cluster().mode() == scenario::Cluster::REAL) {
    auto r = start_real_servers(sc.cluster(), *layout, options, traced, out);
    if (!r.ok()) return r.error();
    real = std::move(*r);
    co = real->options;
  }
  co.spec = layout->spec;
  co.compute_threads = options.compute_threads;
  if (options.tracer != nullptr && tracer != nullptr) {
    return invalid_argument_error("a run takes a trace file or run_options::tracer, not both");
  }
  co.tracer = options.tracer != nullptr ? options.tracer : tracer.get();
  sync_tally tally(/*marks=*/recorder != nullptr);
  if (sync) co.sync_watcher = &tally;
  auto cluster = actors::cluster::create(co);
  if (!cluster.ok()) return cluster.error();

  std::vector<std::unique_ptr<actors::session>> workers;
  std::vector<std::shared_ptr<const graph::graph>> worker_graphs;  // the checkpoints save their input pipelines
  std::vector<train::sync_replicas_ops> sync_ops(static_cast<std::size_t>(layout->workers));
  for (int w = 0; w < layout->workers; ++w) {
    auto g = training_graph(sc, *layout, w, files, &sync_ops[static_cast<std::size_t>(w)]);
    if (!g.ok()) return g.error().with_context(str_cat("worker ", w, "'s training graph"));
    worker_graphs.push_back(std::make_shared<const graph::graph>(std::move(*g)));
    actors::session_options so;
    so.cluster = *cluster;
    so.default_device = layout->worker(w);
    auto s = actors::session::create(worker_graphs.back(), so);
    if (!s.ok()) return s.error();
    workers.push_back(std::move(*s));
  }
  auto eval_graph = evaluation_graph(sc, *layout);
  if (!eval_graph.ok()) return eval_graph.error().with_context("the evaluation graph");
  actors::session_options eo;
  eo.cluster = *cluster;
  eo.default_device = layout->worker(0);
  auto evaluator = actors::session::create(std::move(*eval_graph), eo);
  if (!evaluator.ok()) return evaluator.error();
  // (A shape-only simulation evaluates nothing: its tensors are phantoms.)
  const bool shape_only = simulated != nullptr && simulated->shape_only();
  auto tests = shape_only ? result<test_set>(test_set{}) : load_test_set(files);
  if (!tests.ok()) return tests.error();

  // The chief initializes every variable once. (Again if a connection dropped: no fault
  // is injected yet, but a server that is not there fails the run in seconds.)
  const auto setup_deadline = env::now() + (simulated != nullptr ? k_setup_for_simulated : k_setup_for);
  auto set_up = [&](auto request) {
    return run_retried(request, cluster::is_retryable,
                       retry_policy{setup_deadline, std::chrono::milliseconds(100), std::chrono::milliseconds(1000)});
  };
  auto init = set_up([&] { return workers[0]->run({}, {}, {k_init}); });
  if (!init.ok()) return init.error().with_context("initializing the variables");

  // Checkpoints: saved by a manager of their own (not by a worker), at cuts between the
  // training steps, which pass through `gate`; restored before training starts.
  cluster::step_gate gate;
  cluster::faulty_file_system checkpoint_fs;  // the real one, unless a disk_full fault fills it
  std::atomic<progress_reporter*> reporter{nullptr};
  // Lines of the checkpoint manager, the supervisor and the faults: straight out before
  // training, through the progress report once it runs.
  auto log_line = [&reporter, &out](const std::string& line) {
    if (progress_reporter* p = reporter.load()) return p->message(line);
    out << line << "\n";
  };
  std::optional<progress_reporter> progress_holder;  // outlives the manager, which logs to it
  std::unique_ptr<cluster::checkpoint_manager> checkpoints;
  std::int64_t first_step = 0;
  if (sc.has_checkpoint()) {
    const auto& ck = sc.checkpoint();
    auto g = training_graph(sc, *layout, 0, files);
    if (!g.ok()) return g.error().with_context("the checkpoint manager's graph");
    cluster::checkpoint_manager_options mo;
    mo.dir = ck.dir();
    mo.keep = ck.keep();
    mo.every_steps = ck.every_steps();
    mo.gate = &gate;
    mo.fs = &checkpoint_fs;
    mo.default_device = layout->worker(0);
    mo.log = log_line;
    for (const auto& wg : worker_graphs) mo.pipeline_graphs.push_back(wg.get());
    auto m = cluster::checkpoint_manager::create(*cluster, *g, mo);
    if (!m.ok()) return m.error().with_context(str_cat("checkpoint.dir '", ck.dir(), "'"));
    checkpoints = std::move(*m);
    if (ck.restore() == scenario::Checkpoint::LATEST) {
      auto from = set_up([&] { return checkpoints->restore_latest(); });
      if (!from.ok()) return from.error().with_context("checkpoint.restore: LATEST");
      if (from->has_value()) {
        first_step = **from;
        out << "continuing from global step " << first_step << " (of " << total_steps << ")\n";
      } else {
        out << "checkpoint: none in " << ck.dir() << " yet; starting afresh\n";
      }
    }
  }

  // Supervision: a supervisor restarts a task that fails and gives it back its state;
  // the faults of the scenario are injected as training reaches their steps.
  std::atomic<std::int64_t> global_step{first_step};
  std::vector<cluster::fault_spec> fault_specs;
  if (!options.no_faults) fault_specs = fault_specs_of(sc.faults(), t.seed());
  const bool chaos = !options.no_faults && sc.faults().random().kills_per_1000_steps() > 0;
  if (checkpoints != nullptr && (!fault_specs.empty() || chaos) && checkpoints->stats().latest_step < 0) {
    // A task lost before the first periodic save is restored from this one.
    auto initial = set_up([&] { return checkpoints->save_now(); });
    if (!initial.ok()) return initial.error().with_context("the initial checkpoint");
  }
  cluster::supervisor_options so;
  so.max_restarts = sc.supervision().max_restarts();
  so.within_seconds = sc.supervision().within_seconds();
  so.recovery = sc.supervision().recovery() == scenario::Supervision::ROLLBACK_ALL ? cluster::recovery_policy::rollback_all
                                                                                   : cluster::recovery_policy::restore_lost;
  so.checkpoints = checkpoints.get();
  so.gate = &gate;
  so.log = log_line;
  // SYNC: the chief's updates, run by a coordinator of their own (not by a worker).
  std::unique_ptr<cluster::sync_coordinator> coordinator;
  so.global_step_restored = [&global_step, &coordinator](std::int64_t step) {
    global_step = step;
    if (coordinator != nullptr) coordinator->rolled_back(step);
  };
  // ASYNC's trainers advance the global step inside the gate, the SYNC coordinator its
  // last update: a recovery (gate closed) sees either.
  so.finished = [&global_step, &coordinator, total_steps] {
    return global_step.load() >= total_steps || (coordinator != nullptr && coordinator->finished());
  };
  auto supervisor_or = cluster::supervisor::create(*cluster, so);
  if (!supervisor_or.ok()) return supervisor_or.error();
  std::unique_ptr<cluster::supervisor> supervisor = std::move(*supervisor_or);
  cluster::fault_injector_options fo;
  fo.checkpoint_dir = sc.checkpoint().dir();
  fo.fs = &checkpoint_fs;
  if (chaos) {
    fo.chaos.seed = sc.faults().random().seed();
    fo.chaos.kills_per_1000_steps = sc.faults().random().kills_per_1000_steps();
    fo.chaos.tasks = (*cluster)->task_names();
  }
  fo.log = log_line;
  cluster::fault_injector faults(*cluster, fault_specs, fo);
  // A step caught by a task's failure runs again, unless the supervisor gave up.
  std::atomic<std::int64_t> retried{0};
  // Whether a request a fault caught may be made again (the SYNC coordinator's and the
  // closing requests, which pause themselves); `retry` also counts a training or reader
  // step run again (the summary's steps_retried) and pauses 1 ms.
  auto may_retry = [&](const status& error) { return cluster::is_retryable(error) && supervisor->failure().ok(); };
  auto retry = [&](const status& error) {
    if (!may_retry(error)) return false;
    ++retried;
    env::sleep_for(std::chrono::milliseconds(1));
    return true;
  };

  // SIMULATED with a liveness section (issue 17): the last steps run with every fault
  // lifted and no link clogged, and the first of them must come within within_ms.
  struct liveness_state {
    std::int64_t from = std::numeric_limits<std::int64_t>::max();
    std::mutex mutex;
    env::condition_variable changed;
    bool started = false, progressed = false, over = false;
    std::int64_t start_step = 0;
    env::clock::time_point start_time;
    double ms = -1;  // from the phase's start to its first step
  } liveness;
  if (simulated != nullptr && sc.simulation().liveness().steps() > 0) {
    liveness.from = total_steps - sc.simulation().liveness().steps();
  }
  // The steady state's start (run_summary::steady_seconds): the first global step at or
  // past a quarter of the steps, and when.
  struct {
    std::atomic<bool> started{false};
    std::mutex mutex;
    std::int64_t step = 0;
    env::clock::time_point at;
  } steady;
  const std::int64_t steady_from = std::max<std::int64_t>(1, total_steps / 4);
  // Every global step a trainer or the SYNC coordinator finishes.
  auto step_reached = [&](std::int64_t step) {
    if (options.on_step) options.on_step(step);
    if (step >= steady_from && !steady.started.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(steady.mutex);
      if (!steady.started.load(std::memory_order_relaxed)) {
        steady.step = step;
        steady.at = env::now();
        steady.started.store(true, std::memory_order_release);
      }
    }
    if (step < liveness.from) return faults.step_reached(step);
    bool starts = false;
    {
      std::lock_guard<std::mutex> lock(liveness.mutex);
      if (!liveness.started) {
        liveness.started = starts = true;
        liveness.start_step = step;
        liveness.start_time = env::now();
      } else if (!liveness.progressed && step > liveness.start_step) {
        liveness.progressed = true;
        liveness.ms = std::chrono::duration<double, std::milli>(env::now() - liveness.start_time).count();
      }
    }
    if (starts) {
      faults.lift_all();
      simulated->stop_swizzle();
      simulated->world().set_buggify(false);
      log_line(str_cat("liveness: from step ", step, " no fault and no clogged link; the next step must come within ",
                       sc.simulation().liveness().within_ms(), " ms"));
    }
    liveness.changed.notify_all();
  };

  if (sync) {
    train::sync_replicas_ops chief_ops;
    auto g = training_graph(sc, *layout, 0, files, &chief_ops);
    if (!g.ok()) return g.error().with_context("the sync coordinator's graph");
    cluster::sync_coordinator_options o;
    o.default_device = layout->worker(0);
    o.gate = &gate;
    o.last_step = total_steps;
    o.step_done = [&](std::int64_t step) {
      global_step = step;
      step_reached(step);
    };
    // The checkpoints' cuts come between an update and the tokens of the next step, when
    // every worker's input pipeline has given exactly the batches of the steps taken.
    if (checkpoints != nullptr) o.before_tokens = [&](std::int64_t step) { checkpoints->cut_if_due(step); };
    o.retry = may_retry;
    o.log = log_line;
    auto c = cluster::sync_coordinator::create(*cluster, *g, chief_ops, o);
    if (!c.ok()) return c.error();
    coordinator = std::move(*c);
  }

  progress_options po;
  po.style = style_of(sc.report().progress());
  po.total_steps = total_steps;
  po.show_loss = !shape_only;
  if (sc.report().has_progress_every()) po.every = sc.report().progress_every();
  progress_reporter& progress = progress_holder.emplace(out, po);
  reporter = &progress;

  // Ending the run, normally or on the first failure of any reader or trainer: every
  // loop stops at its next check, and closing the queues (once) wakes the steps parked in
  // an enqueue or a dequeue, which then fail as their threads exit. The first error is
  // the run's; what fails after it is its consequence.
  std::atomic<bool> stop{false};
  // Batches taken from each worker's queue (its training steps), so that a reader that
  // found the queue full waits for room instead of polling it (200 workers' readers
  // polling every 500 us were most of a simulated run's work), and a worker's only reader
  // knows the room without looking (scenarios/input_room.h).
  std::vector<input_room> taken(workers.size());
  env::mutex queues_mutex;  // held while closing them
  bool queues_closed = false;
  // Stops the readers and trainers at their next look (a reader waiting for room wakes).
  auto stop_loops = [&] {
    stop = true;
    for (auto& t : taken) t.wake();
  };
  auto end_run = [&] {
    stop_loops();
    std::lock_guard<env::mutex> lock(queues_mutex);
    if (std::exchange(queues_closed, true)) return;
    for (auto& w : workers) (void)w->run({}, {}, {k_close});
    if (coordinator != nullptr) coordinator->stop(/*close_tokens=*/true);
  };
  std::mutex error_mutex;
  status first_error;
  auto fail = [&](status s) {
    {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (first_error.ok() && !stop) first_error = std::move(s);
    }
    end_run();
  };

  // Input pipelines: reader steps fill each worker's queue while it trains. Each passes
  // the gate as a feeder and enqueues only when every reader's next batch fits, so it
  // never waits in a full queue: a checkpoint's cut finds no batch between a reader and
  // its queue (the queue's contents and the reader's cursor are saved together).
  // How many times worker task `task`'s input pipeline has been restored (readers and
  // SYNC workers look afresh at what they read from it before a restore).
  auto pipeline_restores_of = [&](const std::string& task) -> std::uint64_t {
    return checkpoints != nullptr ? checkpoints->pipeline_restores(task) : 0;
  };
  std::vector<env::thread> readers;
  const int reader_threads = effective_readers(sc.dataset());
  const std::int64_t fill_below = sc.dataset().queue_capacity() - reader_threads * reader_batch(sc.dataset(), t.batch_size());
  for (std::size_t w = 0; w < workers.size(); ++w) {
    for (int r = 0; r < reader_threads; ++r) {
      readers.emplace_back([&, w, s = workers[w].get(), room = &taken[w]] {
        // The queue's size as this reader last saw it: checked on its own, or right after
        // its own enqueue. A reader enqueues only while the last size it saw leaves room
        // for every reader's next batch (fill_below); each reader then holds at most one
        // batch's worth of that room, so no enqueue ever waits in a full queue. Trainers
        // only take from the queue, but a restore of the worker's pipeline (a recovery,
        // with the gate closed) puts back what the checkpoint held: a size seen before it
        // is looked at afresh, inside the gate, where no restore can come between the look
        // and the enqueue. (An enqueue into a full queue waits for a trainer, which a
        // checkpoint's closing gate keeps out while it waits for this reader: a deadlock
        // that CI met once.)
        const std::string task = layout->worker(static_cast<int>(w));
        // The size last seen (looked at, or after this reader's enqueue). Alone, a reader
        // bounds the size from it after a trainer's step without a look (input_room.h);
        // with other readers, whose enqueues it does not see, it looks afresh.
        std::optional<input_room::sighting> size;
        const bool alone = reader_threads == 1;
        auto bound = [&] { return alone ? room->bound(*size, t.batch_size()) : size->size; };
        std::uint64_t size_restores = 0;  // pipeline_restores_of(task) when `size` was seen
        while (!stop) {
          // A slow reader (a slow disk): its trainer may find the queue too empty and wait.
          if (env::buggify("input.slow_reader")) env::sleep_for(k_slow_reader);
          result<std::vector<tensor>> e = std::vector<tensor>{};
          bool full = false;
          const std::uint64_t seen = room->taken();
          {
            cluster::step_gate::pass feeding(gate, cluster::step_gate::pass::kind::feeder);
            const std::uint64_t restores = pipeline_restores_of(task);
            if (restores != size_restores) size.reset();
            if (!size) {
              e = s->run({}, {k_queue_size});
              if (e.ok()) size = room->sight(e->at(0).scalar_value<std::int32_t>());
              size_restores = restores;
            }
            if (e.ok()) {
              full = bound() > fill_below;
              if (!full) {
                e = s->run({}, {k_enqueue_then_size});
                size.reset();
                if (e.ok()) size = room->sight(e->at(0).scalar_value<std::int32_t>());
              }
            }
          }
          if (!e.ok()) size.reset();
          if (!e.ok() && !retry(e.error())) {
            return fail(supervisor->failure().ok() ? e.error().with_context("input pipeline") : supervisor->failure());
          }
          if (full) {
            // Until the trainer takes a batch beyond those the reader knows of (or, as a
            // safeguard, 50 ms). The size is looked at afresh then, with other readers, and
            // when the take did not lower the bound (a step under way at the look: it may
            // have taken its batch before).
            const bool known = alone && size.has_value();
            const std::int64_t before = known ? bound() : 0;
            const bool took = room->wait_for_take(known ? std::max(seen, size->taken) : seen,
                                                  [&] { return stop.load(); }, std::chrono::milliseconds(50));
            if (!known || !took || bound() >= before) size.reset();
          }
        }
      });
    }
  }

  env::mutex eval_mutex;  // held while evaluating
  std::int64_t next_eval = t.eval_every() > 0 ? t.eval_every() : 0;
  auto started = env::now();
  // Worker 0 evaluates the model every eval_every steps (inside the gate: never on a task
  // restarted but not yet restored); false when that failed the run.
  auto evaluate_at = [&](std::int64_t step) {
    if (next_eval <= 0 || step < next_eval || step >= total_steps) return true;
    std::lock_guard<env::mutex> lock(eval_mutex);
    const result<double> acc = evaluate(**evaluator, *tests, [&](auto request) {
      cluster::step_gate::pass inside(gate);
      return request();
    });
    if (acc.ok()) {
      progress.message(str_cat("step ", step, ": test accuracy ", std::to_string(*acc * 100).substr(0, 5), "%"));
    } else if (cluster::is_retryable(acc.error())) {
      progress.message(str_cat("step ", step, ": evaluation skipped (", acc.error().message(), ")"));
    } else {
      fail(acc.error());
      return false;
    }
    while (next_eval <= step) next_eval += t.eval_every();
    return true;
  };
  // A SYNC worker: each step hands its gradients to the accumulators with the step it
  // computed them at (inside the gate: a recovery or a checkpoint never sees half of
  // it), then waits for its token, the coordinator's next update (outside: the update it
  // waits for passes through the gate).
  auto sync_worker = [&](std::size_t w) {
    actors::session& s = *workers[w];
    const auto& o = sync_ops[w];
    const std::string task = layout->worker(static_cast<int>(w));
    std::int64_t local = first_step;
    std::uint64_t local_restores = pipeline_restores_of(task);  // when `local` was read
    // Inside the gate: takes the tokens handed out meanwhile (a recovery hands every
    // worker one), then reads the step to compute now (so never from a task restarted but
    // not yet restored): the tokens are for that step or one before, which this worker
    // computes anyway; taken later, they would start it twice. (The gate does not keep the
    // coordinator's updates out: read first, the step could be one behind the token of
    // the update that came between, and the worker would compute a stale step and then
    // wait for a token it had already taken, one gradient short of the next step.)
    auto catch_up = [&]() -> status {
      const std::uint64_t restores = pipeline_restores_of(task);
      auto tokens = s.run({}, {o.token_size[w].name()});
      for (std::int32_t k = tokens.ok() ? tokens->at(0).scalar_value<std::int32_t>() : 0; k > 0 && tokens.ok(); --k) {
        tokens = s.run({}, {o.after_token.name()});
      }
      if (!tokens.ok()) return tokens.error();
      auto now = s.run({}, {"step_value"});
      if (!now.ok()) return now.error();
      local = now->at(0).scalar_value<std::int64_t>();
      local_restores = restores;
      return status();
    };
    // After a failure: catches up. False when the run must end.
    auto resume = [&](status why) {
      while (!stop) {
        if (coordinator->finished()) return false;  // nothing more to compute
        if (!retry(why)) {
          fail(supervisor->failure().ok() ? why.with_context(str_cat("training step on worker ", w))
                                          : supervisor->failure());
          return false;
        }
        cluster::step_gate::pass inside(gate);
        why = catch_up();
        if (why.ok()) return true;
      }
      return false;
    };
    // The batch of a step is read once: a step computed again (its gradient lost with a
    // failed turn, or a token handed out twice around a recovery) uses the batch it had,
    // so each step takes one batch from the pipeline whatever happens. A restore of the
    // worker's pipeline (it returns to the checkpoint, and the global step with it) makes
    // the batch held and the step read before it stale.
    struct held_batch {
      std::int64_t step = -1;
      std::uint64_t restores = 0;
      tensor images, labels;
    } held;
    // Until the last update: a worker that reads an earlier step after it (a recovery
    // restored its task's state) has no turn left to wait for.
    while (!stop && local < total_steps && !coordinator->finished()) {
      result<std::vector<tensor>> r = internal_error("not run");
      {
        cluster::step_gate::pass inside(gate);
        const std::uint64_t restores = pipeline_restores_of(task);
        if (restores != local_restores) {
          if (status caught = catch_up(); !caught.ok()) r = caught;
        }
        if (restores == local_restores && (held.step != local || held.restores != restores)) {
          taken[w].begin_take();
          r = s.run({}, {k_dequeue_images, k_dequeue_labels});
          taken[w].end_take(r.ok());
          if (r.ok()) held = {local, restores, r->at(0), r->at(1)};
        }
        if (held.step == local && held.restores == restores) {
          r = s.run({{o.local_step.name(), tensor::scalar<std::int64_t>(local)},
                     {k_dequeue_images, held.images},
                     {k_dequeue_labels, held.labels}},
                    {"loss_value"}, {o.apply.node});
        }
      }
      if (local >= total_steps) return;  // caught up with the end
      if (!r.ok()) {
        // The gradient may be lost with the step: compute the current step again.
        if (!resume(r.error())) return;
        continue;
      }
      const double loss = r->at(0).scalar_value<float>();
      auto next = s.run({}, {o.after_token.name()});
      if (!next.ok()) {
        if (stop) return;
        // A task went down while this worker waited (its token queue with it): the
        // coordinator hands out tokens again once it is back; resume from the step then.
        // (Reading the global step of a task restarted but not yet restored fails with
        // FAILED_PRECONDITION; that passes too, once the restore is done.)
        const bool restarting = next.error().error_code() == code::failed_precondition;
        if (!resume(restarting ? unavailable_error(next.error().message()) : next.error())) return;
        continue;
      }
      local = next->at(0).scalar_value<std::int64_t>();
      progress.update(std::max(local, global_step.load()), loss);
      if (w == 0 && !evaluate_at(local)) return;
    }
  };
  std::optional<env::thread> sync_watch;
  if (coordinator != nullptr && first_step < total_steps) {
    if (status s = coordinator->start(); !s.ok()) {
      progress.finish();
      end_run();
      for (auto& th : readers) th.join();
      return s;
    }
    sync_watch.emplace([&] {
      if (status s = coordinator->wait(); !s.ok()) fail(std::move(s));
    });
  }
  // In mode REAL the kernels run and the accumulators count in the servers: what they
  // observe joins the trace and the tally here, taken every 2 s while training runs (so
  // that a server keeps little) and once more at the end (a server killed takes what it
  // had not handed over along; the periodic takes say nothing of a task that is down).
  auto absorb_observations = [&](bool sync_events, bool quiet) {
    if (real == nullptr || (!traced && !(sync && sync_events))) return;
    actors::step_tracer* const into = co.tracer;
    std::vector<cluster::observed_event> events;
    for (const std::string& task : (*cluster)->task_names()) {
      auto taken = cluster::take_observations(**cluster, task, std::chrono::seconds(30));
      if (!taken.ok()) {
        if (!quiet) progress.message(str_cat("observations of task ", task, " are lost: ", taken.error().message()));
        continue;
      }
      std::move(taken->begin(), taken->end(), std::back_inserter(events));
    }
    std::stable_sort(events.begin(), events.end(), [](const auto& a, const auto& b) { return a.at_ns < b.at_ns; });
    auto at = [](std::int64_t ns) { return trace_clock::time_point(std::chrono::nanoseconds(ns)); };
    for (const auto& e : events) {
      switch (e.kind) {
        case cluster::observed_event::span:
          if (into) into->node_span(e.task, e.device, e.name, e.op, e.step, at(e.at_ns), at(e.end_ns), {});
          break;
        case cluster::observed_event::sent:
          if (into) into->transfer_sent(e.name, e.step, e.task, e.device, at(e.at_ns));
          break;
        case cluster::observed_event::received:
          if (into) into->transfer_received(e.name, e.step, e.task, e.device, at(e.at_ns));
          break;
        case cluster::observed_event::transit:
          if (into) into->link_transit(e.name, e.task, e.bytes, at(e.at_ns), at(e.end_ns), e.key, e.step);
          break;
        case cluster::observed_event::gradient:
          if (sync && !e.sources.empty()) tally.gradient(e.name, e.sources.front(), e.step, e.global_step, e.kept);
          break;
        case cluster::observed_event::aggregated:
          if (sync) tally.aggregated_at(e.name, e.step, e.sources, at(e.at_ns));
          break;
        default:
          break;
      }
    }
  };
  std::mutex observe_mutex;
  env::condition_variable observe_wake;
  bool trained = false;
  std::optional<env::thread> observer;
  if (real != nullptr && (traced || sync)) {
    observer.emplace([&] {
      std::unique_lock<std::mutex> lock(observe_mutex);
      while (!observe_wake.wait_for(lock, std::chrono::seconds(2), [&] { return trained; })) {
        lock.unlock();
        absorb_observations(/*sync_events=*/true, /*quiet=*/true);
        lock.lock();
      }
    });
  }
  // The liveness phase's watch: no step within its limit fails the run.
  std::optional<env::thread> liveness_watch;
  if (liveness.from != std::numeric_limits<std::int64_t>::max()) {
    liveness_watch.emplace([&] {
      std::unique_lock<std::mutex> lock(liveness.mutex);
      liveness.changed.wait(lock, [&] { return liveness.started || liveness.over; });
      if (liveness.over) return;
      const auto limit = std::chrono::duration_cast<env::clock::duration>(
          std::chrono::duration<double, std::milli>(sc.simulation().liveness().within_ms()));
      if (!liveness.changed.wait_until(lock, liveness.start_time + limit, [&] { return liveness.progressed || liveness.over; })) {
        const std::int64_t from = liveness.start_step;
        lock.unlock();
        fail(deadline_exceeded_error("liveness: no global step within ", sc.simulation().liveness().within_ms(),
                                     " ms of virtual time after the faults stopped at step ", from));
      }
    }, "liveness");
  }
  if (simulated != nullptr) simulated->start_swizzle();
  std::vector<env::thread> trainers;
  for (std::size_t w = 0; w < workers.size(); ++w) {
    trainers.emplace_back([&, w] {
      if (sync) return sync_worker(w);
      actors::session& s = *workers[w];
      while (!stop && global_step.load() < total_steps) {
        result<std::vector<tensor>> r = internal_error("not run");
        double loss = 0;
        std::int64_t step = 0, seen = 0;
        {
          // The global step is advanced inside the gate, so that a recovery that rolls it
          // back (with the gate closed) is never overtaken by a step from before.
          cluster::step_gate::pass inside(gate);
          taken[w].begin_take();
          r = s.run({}, {"loss_value", "step_value"}, {k_train});
          taken[w].end_take(r.ok());
          if (r.ok()) {
            loss = r->at(0).scalar_value<float>();
            step = r->at(1).scalar_value<std::int64_t>() + 1;
            seen = global_step.load();
            while (step > seen && !global_step.compare_exchange_weak(seen, step)) {
            }
          }
        }
        if (!r.ok()) {
          if (retry(r.error())) continue;
          return fail(supervisor->failure().ok() ? r.error().with_context(str_cat("training step on worker ", w))
                                                 : supervisor->failure());
        }
        if (checkpoints != nullptr) checkpoints->step_done(step);
        step_reached(step);
        progress.update(std::max(step, seen), loss);
        if (w == 0 && !evaluate_at(step)) return;
      }
    });
  }
  for (auto& th : trainers) th.join();
  if (observer) {
    {
      std::lock_guard<std::mutex> lock(observe_mutex);
      trained = true;
    }
    observe_wake.notify_all();
    observer->join();
  }
  // The coordinator ends by itself after the last step, or was stopped by end_run().
  if (sync_watch) sync_watch->join();
  if (simulated != nullptr) simulated->stop_swizzle();
  if (liveness_watch) {
    {
      std::lock_guard<std::mutex> lock(liveness.mutex);
      liveness.over = true;
    }
    liveness.changed.notify_all();
    liveness_watch->join();
  }
  faults.lift_all();  // a fault without until_step lasts to the end of training
  const auto trained_at = env::now();
  double seconds = std::chrono::duration<double>(trained_at - started).count();
  // The readers stop first, each after the step it is in, and only then are the queues
  // closed: a queue closed under a reader's enqueue lost the batch its reader had read (the
  // reader's cursor past it, the batch in no queue), so a run resumed from the final
  // checkpoint skipped it (seen once as a resumed SYNC run that was not bit for bit the
  // uninterrupted one, tests/scenarios/runner_test.cc).
  stop_loops();
  for (auto& th : readers) th.join();
  end_run();
  // Every task killed is back (or the supervisor gave up) before the end is read and saved.
  const auto kills = static_cast<std::size_t>(faults.count("kill"));
  if (first_error.ok() && !supervisor->wait_for_recoveries(kills, std::chrono::minutes(5))) {
    first_error = deadline_exceeded_error("the supervisor did not recover every killed task within 5 minutes");
  }
  if (first_error.ok() && !supervisor->failure().ok()) first_error = supervisor->failure();
  if (!first_error.ok()) {
    progress.finish();
    return first_error;
  }
  absorb_observations(/*sync_events=*/true, /*quiet=*/false);
  run_summary summary;
  summary.restarts = supervisor->restarts();
  summary.steps_retried = retried.load();
  if (sync) {
    std::vector<std::string> names;
    for (int w = 0; w < layout->workers; ++w) names.push_back(layout->worker(w));
    summary.sync = tally.record(names, layout->workers - t.backup_workers(), t.backup_workers());
  }
  // The run's closing requests (the final checkpoint, the global step, the test accuracy)
  // may meet a task its supervisor is still restarting when the last step ends: they are
  // retried as training steps are, for at most a minute, and the steps among them pass the
  // gate (closed while a restarted task is restored; the checkpoint closes it itself).
  const auto closing_deadline = env::now() + std::chrono::minutes(1);
  auto settled = [&](auto request) {
    return run_retried(request, may_retry,
                       retry_policy{closing_deadline, std::chrono::milliseconds(20), std::chrono::milliseconds(20)});
  };
  auto gated = [&](auto request) {
    return [&, request] {
      cluster::step_gate::pass inside(gate);
      return request();
    };
  };
  // The final checkpoint first: a fault on checkpoints is over once a later one commits.
  if (checkpoints != nullptr) {
    auto last = settled([&] { return checkpoints->save_now(); });
    if (!last.ok()) {
      progress.finish();
      return last.error().with_context("the final checkpoint");
    }
    summary.checkpoints = checkpoints->stats();
  }
  summary.faults = fault_records(faults.injected(), supervisor->recoveries(), summary.checkpoints.commit_times);
  // The trainers saw the global step as their steps read it; asynchronous steps may have
  // taken it a little further.
  auto final_step = settled(gated([&] { return workers[0]->run({}, {"step_value"}); }));
  if (!final_step.ok()) {
    progress.finish();
    return final_step.error().with_context("reading the global step");
  }
  summary.steps = final_step->at(0).scalar_value<std::int64_t>();
  progress.finish(summary.steps);
  summary.seconds = seconds;
  if (steady.started.load() && summary.steps > steady.step) {
    summary.steady_seconds = std::chrono::duration<double>(trained_at - steady.at).count();
    summary.steady_steps = summary.steps - steady.step;
  }
  summary.final_loss = shape_only ? 0 : progress.smoothed_loss();
  if (!shape_only) {
    // Each step of it retried on its own: a whole evaluation (10 steps) retried as one
    // needed every one of them through in the same try.
    auto acc = evaluate(**evaluator, *tests, [&](auto request) { return settled(gated(request)); });
    if (!acc.ok()) return acc.error();
    summary.test_accuracy = *acc;
  }
  summary.shape_only = shape_only;
  out << "trained " << summary.steps << " steps in " << std::to_string(seconds).substr(0, 5) << " s";
  if (simulated != nullptr) {
    summary.virtual_seconds = std::chrono::duration<double>(simulated->world().elapsed()).count();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_started).count();
    out << " of virtual time (" << std::to_string(wall).substr(0, 5) << " s wall for the whole run, "
        << std::to_string(summary.virtual_seconds).substr(0, 5) << " s virtual)";
  }
  // (No rate for a run that trained nothing: one resumed at or past its last step.)
  if (seconds > 0) out << " (" << static_cast<std::int64_t>(summary.steps / seconds) << " steps/s)";
  out << "; ";
  if (shape_only) {
    out << "shape-only: no loss or accuracy\n";
  } else {
    out << "loss " << summary.final_loss << "; test accuracy " << std::to_string(summary.test_accuracy * 100).substr(0, 5)
        << "% on " << tests->labels.num_elements() << " images\n";
  }
  if (recorder != nullptr) {
    absorb_observations(/*sync_events=*/false, /*quiet=*/false);  // the evaluation's kernels (no gradients since)
    // Faults, recoveries and checkpoints on the timeline, beside the kernels.
    for (const auto& f : faults.injected()) {
      recorder->record_mark({f.task, f.spec.kind, "fault", f.at, f.at,
                             str_cat("at step ", f.spec.at_step, f.detail.empty() ? "" : "; " + f.detail)});
    }
    for (const auto& r : supervisor->recoveries()) {
      const auto back = r.down_at + std::chrono::duration_cast<trace_clock::duration>(std::chrono::duration<double>(r.seconds));
      recorder->record_mark({r.task, r.recovered ? "recovery" : "not recovered", "recovery", r.down_at, back,
                             str_cat(r.reason, r.restored_step >= 0 ? str_cat("; restored step ", r.restored_step) : "")});
    }
    for (const auto& at : summary.checkpoints.commit_times) recorder->record_mark({"", "checkpoint", "checkpoint", at, at, ""});
    if (sync) {
      for (auto& m : tally.marks()) recorder->record_mark(std::move(m));
    }
    TROUPE_RETURN_IF_ERROR(recorder->write(trace_file));
    out << "wrote trace " << trace_file << " (" << recorder->num_events()
        << " events; open it in https://ui.perfetto.dev)\n";
  }
  if (summary.steps_retried > 0) out << summary.steps_retried << " steps caught by faults were run again\n";
  if (simulated != nullptr) {
    summary.buggify_fires = simulated->world().buggify_fires();
    if (!summary.buggify_fires.empty()) {
      std::string fires;
      for (const auto& [site, n] : summary.buggify_fires) fires += str_cat(fires.empty() ? "" : ", ", site, " ", n, "x");
      out << "buggify: live sites fired " << fires << "\n";
    }
    summary.links_clogged = simulated->links_clogged();
    summary.messages_arrived = simulated->messages_arrived();
    summary.messages_arrived_busy = simulated->messages_arrived_busy();
    summary.messages_sent = simulated->messages_sent();
    summary.messages_sent_busy = simulated->messages_sent_busy();
    if (summary.links_clogged > 0) out << "swizzle: " << summary.links_clogged << " link clogs\n";
    summary.liveness_ms = liveness.ms;
    if (liveness.started) {
      out << "liveness: the first step after the faults stopped (step " << liveness.start_step << ") came "
          << liveness.ms << " ms later (limit " << sc.simulation().liveness().within_ms() << " ms)\n";
    }
  }
  if (summary.sync.present) {
    const auto& s = summary.sync;
    out << "sync: each step averaged the gradients of " << s.replicas_to_aggregate << " of "
        << s.replicas_to_aggregate + s.backup_workers << " workers; dropped " << s.backup
        << " as backups (too late for their step) and " << s.stale << " as stale; per worker used/backup/stale:";
    for (const auto& [task, c] : s.workers) out << " " << task << " " << c.used << "/" << c.backup << "/" << c.stale;
    out << "\n";
  }
  for (const auto& f : summary.faults) {
    out << "fault: " << f.kind << (f.task.empty() ? "" : " " + f.task) << " at step " << f.at_step << ": "
        << (f.recovered ? str_cat("recovered in ", std::to_string(f.recovery_seconds).substr(0, 5), " s")
                        : std::string("not recovered"))
        << "\n";
  }
  if (checkpoints != nullptr) {
    const auto& c = summary.checkpoints;
    out << "checkpoints: " << c.committed << " committed";
    if (c.failed > 0) out << ", " << c.failed << " failed";
    if (!c.latest_path.empty()) out << "; latest " << c.latest_path << " (step " << c.latest_step << ")";
    out << "\n";
  }
  const auto& expect = sc.report().expect();
  if (expect.has_min_test_accuracy() && summary.test_accuracy < expect.min_test_accuracy()) {
    summary.expectation_failures.push_back(
        str_cat("test accuracy ", summary.test_accuracy, " is below the expected ", expect.min_test_accuracy()));
  }
  if (expect.has_max_final_loss() && summary.final_loss > expect.max_final_loss()) {
    summary.expectation_failures.push_back(
        str_cat("final loss ", summary.final_loss, " is above the expected ", expect.max_final_loss()));
  }
  summary.expectations_met = summary.expectation_failures.empty();
  for (const auto& f : summary.expectation_failures) {
    summary.expectation_report += str_cat(summary.expectation_report.empty() ? "" : "; ", f);
  }
  return summary;
}

result<std::string> scenario_dot(const scenario::Scenario& sc, int worker) {
  auto layout = layout_of(sc.cluster());
  if (!layout.ok()) return layout.error();
  if (worker < 0 || worker >= layout->workers) {
    return invalid_argument_error("worker ", worker, " is not in the cluster (it has ", layout->workers, " workers)");
  }
  auto g = training_graph(sc, *layout, worker, files_of(sc.dataset()));
  if (!g.ok()) return g.error();
  actors::ensure_runtime_kernels();
  const auto& kernels = kernels::kernel_registry::builtin();
  placement::placer_options po;
  po.default_device = layout->worker(worker);
  po.allow_soft_placement = true;
  auto placed = placement::place(*g, layout->spec,
                                 [&](const graph::node& n, const std::string& type) { return kernels.has_kernel(type, n.def); },
                                 po);
  if (!placed.ok()) return placed.error();
  return placement::graph_to_dot(*g, &*placed);
}

}  // namespace troupe::scenarios
