#include "cluster/checkpoint_manager.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "graph/attr.h"
#include "placement/device_name.h"
#include "placement/placer.h"

namespace troupe::cluster {

namespace {

constexpr const char* k_prefix = "troupe_checkpoint/";

using seconds = std::chrono::duration<double>;

std::string megabytes(std::int64_t bytes) {
  return str_cat(bytes / (1 << 20), ".", (bytes % (1 << 20)) * 10 / (1 << 20), " MB");
}

std::string short_seconds(double s) { return std::to_string(s).substr(0, 5) + " s"; }

}  // namespace

result<std::unique_ptr<checkpoint_manager>> checkpoint_manager::create(std::shared_ptr<actors::cluster> cluster,
                                                                       const graph::graph& g,
                                                                       checkpoint_manager_options options) {
  if (options.dir.empty()) return invalid_argument_error("checkpoint manager: no directory given");
  if (options.keep < 1) return invalid_argument_error("checkpoint manager: keep must be >= 1, not ", options.keep);
  if (options.every_steps < 0) {
    return invalid_argument_error("checkpoint manager: every_steps must be >= 0, not ", options.every_steps);
  }
  std::unique_ptr<checkpoint_manager> m(new checkpoint_manager(std::move(options)));
  auto dir = checkpoint::directory::open(m->options_.dir, {.keep = m->options_.keep}, *m->options_.fs);
  if (!dir.ok()) return dir.error();
  m->dir_ = std::make_unique<checkpoint::directory>(std::move(*dir));

  // Where each variable lives, as the sessions place it (colocation included: optimizer
  // slots carry no device of their own).
  placement::placer_options po;
  po.default_device = m->options_.default_device;
  po.allow_soft_placement = true;
  const kernels::kernel_registry& kernels = cluster->kernels();
  auto placed = placement::place(
      g, cluster->spec(),
      [&kernels](const graph::node& n, const std::string& type) { return kernels.has_kernel(type, n.def); }, po);
  if (!placed.ok()) return placed.error().with_context("checkpoint manager: placing the graph");
  tf::GraphDef def = g.to_graph_def();
  std::vector<tf::NodeDef> added;
  for (const tf::NodeDef& n : def.node()) {
    if (n.op() != "VarHandleOp") continue;
    saved_variable v;
    partial_shape shape;
    TROUPE_RETURN_IF_ERROR(graph::get_attr(n, "dtype", &v.type));
    TROUPE_RETURN_IF_ERROR(graph::get_attr(n, "shape", &shape));
    TROUPE_RETURN_IF_ERROR(graph::get_attr(n, "shared_name", &v.name));
    if (v.name.empty()) v.name = n.name();
    if (!shape.fully_defined()) {
      return invalid_argument_error("checkpoint manager: variable '", v.name, "' (node '", n.name(),
                                    "') has shape ", shape.to_string(), ", which is not fully defined");
    }
    v.shape = shape.to_shape();
    const graph::node* node = g.find(n.name());
    auto device = placement::parse_device_name(placed->device_of(node->id));
    if (!device.ok()) return device.error().with_context(str_cat("checkpoint manager: the device of '", n.name(), "'"));
    v.task = placement::task_prefix(placement::task_of(*device));
    for (const auto& other : m->variables_) {
      if (other.name == v.name) {
        return invalid_argument_error("checkpoint manager: two variables share the name '", v.name, "'");
      }
    }
    const std::string base = k_prefix + n.name();
    tf::NodeDef read;
    read.set_name(base + "/read");
    read.set_op("ReadVariableOp");
    read.add_input(n.name());
    (*read.mutable_attr())["dtype"] = graph::attr_value(v.type);
    tf::NodeDef value;
    value.set_name(base + "/value");
    value.set_op("Placeholder");
    (*value.mutable_attr())["dtype"] = graph::attr_value(v.type);
    (*value.mutable_attr())["shape"] = graph::attr_value(partial_shape(v.shape));
    (*value.mutable_attr())["_class"] = graph::attr_value(std::vector<std::string>{"loc:@" + n.name()});
    tf::NodeDef assign;
    assign.set_name(base + "/assign");
    assign.set_op("AssignVariableOp");
    assign.add_input(n.name());
    assign.add_input(value.name());
    (*assign.mutable_attr())["dtype"] = graph::attr_value(v.type);
    m->read_fetches_.push_back(read.name());
    m->value_feeds_.push_back(value.name());
    m->assign_targets_.push_back(assign.name());
    added.push_back(std::move(read));
    added.push_back(std::move(value));
    added.push_back(std::move(assign));
    if (v.name == m->options_.global_step) m->global_step_index_ = static_cast<int>(m->variables_.size());
    m->names_.push_back(v.name);
    m->variables_.push_back(std::move(v));
  }
  if (m->variables_.empty()) return invalid_argument_error("checkpoint manager: the graph has no variables to save");
  for (auto& n : added) *def.add_node() = std::move(n);
  auto copy = graph::graph::from_graph_def(std::move(def), g.registry());
  if (!copy.ok()) return copy.error().with_context("checkpoint manager: adding its save and restore ops");
  actors::session_options so;
  so.cluster = std::move(cluster);
  so.default_device = m->options_.default_device;
  so.step_timeout = m->options_.step_timeout;
  auto session = actors::session::create(std::move(*copy), so);
  if (!session.ok()) return session.error().with_context("checkpoint manager");
  m->session_ = std::move(*session);
  m->next_due_ = m->options_.every_steps;
  m->writer_ = std::thread([p = m.get()] { p->writer_loop(); });
  return m;
}

checkpoint_manager::~checkpoint_manager() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void checkpoint_manager::log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

namespace {

// "/job:ps/task:0" as the manager records tasks: "/job:ps/replica:0/task:0".
std::string canonical_task(std::string_view task) {
  auto name = placement::parse_device_name(task);
  if (!name.ok()) return std::string(task);
  return placement::task_prefix(placement::fill_missing(placement::task_of(*name), {.replica = 0}));
}

}  // namespace

bool checkpoint_manager::holds_variables(std::string_view task) const {
  const std::string wanted = canonical_task(task);
  return std::any_of(variables_.begin(), variables_.end(), [&](const saved_variable& v) { return v.task == wanted; });
}

bool checkpoint_manager::holds_global_step(std::string_view task) const {
  return global_step_index_ >= 0 && variables_[static_cast<std::size_t>(global_step_index_)].task == canonical_task(task);
}

result<std::optional<std::int64_t>> checkpoint_manager::restore_latest() {
  return restore_some(std::vector<bool>(variables_.size(), true));
}

result<std::optional<std::int64_t>> checkpoint_manager::restore_latest(std::string_view task) {
  const std::string wanted = canonical_task(task);
  std::vector<bool> some;
  for (const auto& v : variables_) some.push_back(v.task == wanted);
  return restore_some(some);
}

result<std::optional<std::int64_t>> checkpoint_manager::restore_some(const std::vector<bool>& wanted) {
  std::lock_guard<std::mutex> save_lock(save_mutex_);
  checkpoint::restore_request request;
  std::vector<std::size_t> chosen;
  for (std::size_t i = 0; i < variables_.size(); ++i) {
    if (!wanted[i]) continue;
    const auto& v = variables_[i];
    chosen.push_back(i);
    request.variables.push_back(
        {v.name, v.type, v.shape, std::vector<std::int64_t>(static_cast<std::size_t>(v.shape.rank()), 0), v.shape});
  }
  if (chosen.empty()) return std::optional<std::int64_t>();
  std::vector<std::string> warnings;
  auto restored = dir_->restore_latest(request, &warnings);
  for (const auto& w : warnings) log("checkpoint: " + w);
  if (!restored.ok()) {
    if (restored.error().error_code() == code::not_found) return std::optional<std::int64_t>();
    return restored.error();
  }
  actors::feed_list feeds;
  std::vector<std::string> targets;
  for (std::size_t k = 0; k < chosen.size(); ++k) {
    feeds.emplace_back(value_feeds_[chosen[k]], restored->variables[k]);
    targets.push_back(assign_targets_[chosen[k]]);
  }
  auto assigned = session_->run(feeds, {}, targets);
  if (!assigned.ok()) return assigned.error().with_context(str_cat("restoring '", restored->path, "'"));
  // Read back: what the variables hold now is the checkpoint, bit for bit (no training
  // step runs meanwhile: REQUIRES of restore_latest).
  std::vector<std::string> reads;
  for (std::size_t i : chosen) reads.push_back(read_fetches_[i]);
  auto back = session_->run({}, reads);
  if (!back.ok()) return back.error().with_context(str_cat("reading back what was restored from '", restored->path, "'"));
  for (std::size_t k = 0; k < chosen.size(); ++k) {
    const tensor& want = restored->variables[k];
    const tensor& got = back->at(k);
    if (got.type() != want.type() || got.shape() != want.shape() ||
        std::memcmp(got.raw_data(), want.raw_data(), want.byte_size()) != 0) {
      return data_loss_error("variable '", variables_[chosen[k]].name, "' does not hold what was restored from '",
                             restored->path, "'");
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stats_.restored_step < 0 && stats_.committed == 0) {  // the run's start, not a recovery
      stats_.restored_path = restored->path;
      stats_.restored_step = restored->global_step;
    }
    if (stats_.latest_step < 0) {
      stats_.latest_path = restored->path;
      stats_.latest_step = restored->global_step;
    }
    if (options_.every_steps > 0 && chosen.size() == variables_.size()) {
      next_due_ = (restored->global_step / options_.every_steps + 1) * options_.every_steps;
    }
  }
  log(str_cat("checkpoint: restored ", chosen.size(), " variable", chosen.size() == 1 ? "" : "s", " from ", restored->path, " (step ",
              restored->global_step, ")"));
  return std::optional<std::int64_t>(restored->global_step);
}

void checkpoint_manager::step_done(std::int64_t global_step) {
  if (options_.every_steps <= 0) return;
  bool request = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (global_step >= next_due_) {
      while (next_due_ <= global_step) next_due_ += options_.every_steps;
      request = requested_ = true;
    }
  }
  if (request) wake_.notify_all();
}

void checkpoint_manager::writer_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return requested_ || stopping_; });
    if (stopping_) return;
    requested_ = false;
    lock.unlock();
    (void)save_now();  // counted and logged there
    lock.lock();
  }
}

result<checkpoint::committed> checkpoint_manager::save_now() {
  std::lock_guard<std::mutex> save_lock(save_mutex_);
  auto failed = [&](const status& s) -> status {
    std::string why = s.to_string();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.failed;
      stats_.errors.push_back(why);
    }
    log("checkpoint: save failed, training goes on (the committed checkpoints are intact): " + why);
    return s;
  };
  auto stop_started = std::chrono::steady_clock::now();
  if (options_.gate != nullptr) options_.gate->close();
  auto values = session_->run({}, read_fetches_);
  if (options_.gate != nullptr) options_.gate->open();
  double stopped = seconds(std::chrono::steady_clock::now() - stop_started).count();
  if (!values.ok()) return failed(values.error().with_context("checkpoint: reading the variables"));

  checkpoint::snapshot s;
  if (global_step_index_ >= 0) {
    const tensor& step = values->at(static_cast<std::size_t>(global_step_index_));
    s.global_step = step.type() == dtype::int32 ? step.scalar_value<std::int32_t>() : step.scalar_value<std::int64_t>();
    // Every step advances the global step: at the same one as the last save, nothing has
    // changed since (a periodic save and the final one met), and that save stands.
    std::lock_guard<std::mutex> lock(mutex_);
    if (last_committed_.has_value() && last_committed_->step == s.global_step) return *last_committed_;
  }
  for (std::size_t i = 0; i < variables_.size(); ++i) {
    const auto& v = variables_[i];
    checkpoint::variable cv{v.name, v.type, v.shape, {}};
    cv.slices.push_back({std::vector<std::int64_t>(static_cast<std::size_t>(v.shape.rank()), 0),
                         std::move(values->at(i))});
    s.variables.push_back(std::move(cv));
  }
  auto write_started = std::chrono::steady_clock::now();
  auto committed = dir_->save(s);
  if (!committed.ok()) return failed(committed.error());
  double wrote = seconds(std::chrono::steady_clock::now() - write_started).count();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.committed;
    stats_.commit_times.push_back(std::chrono::steady_clock::now());
    last_committed_ = *committed;
    stats_.latest_path = committed->path;
    stats_.latest_step = committed->step;
    stats_.longest_stop_seconds = std::max(stats_.longest_stop_seconds, stopped);
  }
  log(str_cat("checkpoint: saved step ", committed->step, " to ", committed->path, " (", megabytes(committed->bytes),
              "; training held ", short_seconds(stopped), ", written in ", short_seconds(wrote), ")"));
  return committed;
}

checkpoint_stats checkpoint_manager::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace troupe::cluster
