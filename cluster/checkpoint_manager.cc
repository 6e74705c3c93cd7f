#include "cluster/checkpoint_manager.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "core/env.h"
#include "core/retry.h"
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

// A part's place in its variable, from `_save_slice_info` as TensorFlow writes it
// (SaveSliceInfo): "<full name> <full dims...> <offset>,<length>:-:..." (rows only).
struct slice_info {
  std::string full_name;
  tensor_shape full_shape;
  std::int64_t offset = 0;
};

result<slice_info> parse_slice_info(const std::string& text, const tensor_shape& part_shape) {
  std::vector<std::string> tokens;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = std::min(text.find(' ', at), text.size());
    if (end > at) tokens.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  auto bad = [&](const auto&... why) {
    return invalid_argument_error("_save_slice_info '", text, "' ", why...,
                                  " (expected \"<full name> <full dims> <offset>,<length>:-...\")");
  };
  if (tokens.size() < 3) return bad("has too few fields");
  slice_info out;
  out.full_name = tokens.front();
  std::vector<std::int64_t> dims;
  try {
    for (std::size_t i = 1; i + 1 < tokens.size(); ++i) dims.push_back(std::stoll(tokens[i]));
    const std::string& spec = tokens.back();
    const std::size_t comma = spec.find(',');
    if (comma == std::string::npos) return bad("has no row slice");
    out.offset = std::stoll(spec.substr(0, comma));
    const std::int64_t length = std::stoll(spec.substr(comma + 1));
    if (length != part_shape.dim(0)) return bad("gives ", length, " rows for a part of ", part_shape.dim(0));
  } catch (const std::exception&) {
    return bad("has a field that is not a number");
  }
  if (static_cast<int>(dims.size()) != part_shape.rank()) return bad("has another rank than the part");
  for (int d = 1; d < part_shape.rank(); ++d) {
    if (dims[static_cast<std::size_t>(d)] != part_shape.dim(d)) return bad("disagrees with the part's shape");
  }
  if (out.offset < 0 || dims.empty() || out.offset + part_shape.dim(0) > dims[0]) return bad("is out of range");
  out.full_shape = tensor_shape(dims);
  return out;
}

// Copies `count` rows (slices along dimension 0) from rows first, first + stride, ... of
// `from` to rows to_first, to_first + to_stride, ... of `to` (same dtype, same row shape).
void copy_rows(const tensor& from, std::int64_t first, std::int64_t stride, tensor& to, std::int64_t to_first,
               std::int64_t to_stride, std::int64_t count) {
  const std::size_t row_bytes = from.byte_size() / static_cast<std::size_t>(std::max<std::int64_t>(1, from.dim(0)));
  const auto* source = static_cast<const char*>(from.raw_data());
  auto* destination = static_cast<char*>(to.raw_data());
  for (std::int64_t r = 0; r < count; ++r) {
    std::memcpy(destination + static_cast<std::size_t>(to_first + r * to_stride) * row_bytes,
                source + static_cast<std::size_t>(first + r * stride) * row_bytes, row_bytes);
  }
}

// Rows first, first + stride, ... (count of them) of `whole`, as a new tensor.
tensor rows_of(const tensor& whole, std::int64_t first, std::int64_t count, std::int64_t stride) {
  std::vector<std::int64_t> dims = whole.shape().dims();
  dims[0] = count;
  tensor out(whole.type(), tensor_shape(dims));
  copy_rows(whole, first, stride, out, 0, 1, count);
  return out;
}

// Where a session on `cluster` puts each node of `g`.
result<placement::placement> place_as_sessions_do(const graph::graph& g, const actors::cluster& cluster,
                                                  const std::string& default_device) {
  placement::placer_options po;
  po.default_device = default_device;
  po.allow_soft_placement = true;
  const kernels::kernel_registry& kernels = cluster.kernels();
  auto placed = placement::place(
      g, cluster.spec(),
      [&kernels](const graph::node& n, const std::string& type) { return kernels.has_kernel(type, n.def); }, po);
  if (!placed.ok()) return placed.error().with_context("checkpoint manager: placing the graph");
  return placed;
}

bool is_queue_op(const std::string& op) {
  return op == "FIFOQueueV2" || op == "RandomShuffleQueueV2" || op == "PaddingFIFOQueueV2";
}

// The input pipeline of a graph: its IdxReader nodes, and the queues their batches reach
// through an enqueue (not queues of anything else, such as synchronous replication's
// tokens), in graph order.
std::vector<const tf::NodeDef*> pipeline_nodes(const tf::GraphDef& def) {
  std::map<std::string_view, const tf::NodeDef*> by_name;
  for (const tf::NodeDef& n : def.node()) by_name[n.name()] = &n;
  auto producer = [&](const std::string& input) -> const tf::NodeDef* {
    if (input.empty() || input[0] == '^') return nullptr;
    auto it = by_name.find(std::string_view(input).substr(0, input.find(':')));
    return it == by_name.end() ? nullptr : it->second;
  };
  auto fed_by_reader = [&](const tf::NodeDef& enqueue) {
    std::vector<const tf::NodeDef*> todo;
    std::set<const tf::NodeDef*> seen;
    for (int i = 1; i < enqueue.input_size(); ++i) todo.push_back(producer(enqueue.input(i)));
    while (!todo.empty()) {
      const tf::NodeDef* n = todo.back();
      todo.pop_back();
      if (n == nullptr || !seen.insert(n).second) continue;
      if (n->op() == "IdxReader") return true;
      for (const std::string& in : n->input()) todo.push_back(producer(in));
    }
    return false;
  };
  std::vector<const tf::NodeDef*> out;
  std::set<const tf::NodeDef*> queues;
  for (const tf::NodeDef& n : def.node()) {
    if (n.op() == "IdxReader") out.push_back(&n);
    if ((n.op() == "QueueEnqueueV2" || n.op() == "QueueEnqueueManyV2") && n.input_size() > 1 && fed_by_reader(n)) {
      const tf::NodeDef* q = producer(n.input(0));
      if (q != nullptr && is_queue_op(q->op()) && queues.insert(q).second) out.push_back(q);
    }
  }
  return out;
}

// The ops whose Philox generator is a device resource named after the node
// (kernels/cpu/random_generator.h), saved by RandomGeneratorSaveState.
bool has_saved_generator(std::string_view op) {
  return op == "RandomUniform" || op == "RandomStandardNormal" || op == "TruncatedNormal" ||
         op == "LogUniformCandidateSampler";
}

tf::NodeDef make_node(const std::string& name, const std::string& op, const std::string& device,
                      std::vector<std::string> inputs = {}) {
  tf::NodeDef n;
  n.set_name(name);
  n.set_op(op);
  n.set_device(device);
  for (auto& i : inputs) n.add_input(std::move(i));
  return n;
}

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
  auto placed = place_as_sessions_do(g, *cluster, m->options_.default_device);
  if (!placed.ok()) return placed.error();
  tf::GraphDef def = g.to_graph_def();
  std::vector<tf::NodeDef> added;
  // Parts of partitioned variables, by the variable's name: (offset, index in parts_).
  struct partitioned {
    dtype type = dtype::invalid;
    tensor_shape shape;
    std::string strategy;
    std::vector<std::pair<std::int64_t, std::size_t>> parts;
  };
  std::map<std::string, partitioned> groups;
  for (const tf::NodeDef& n : def.node()) {
    if (n.op() != "VarHandleOp") continue;
    dtype type = dtype::invalid;
    partial_shape shape;
    std::string name;
    TROUPE_RETURN_IF_ERROR(graph::get_attr(n, "dtype", &type));
    TROUPE_RETURN_IF_ERROR(graph::get_attr(n, "shape", &shape));
    TROUPE_RETURN_IF_ERROR(graph::get_attr(n, "shared_name", &name));
    if (name.empty()) name = n.name();
    if (!shape.fully_defined()) {
      return invalid_argument_error("checkpoint manager: variable '", name, "' (node '", n.name(), "') has shape ",
                                    shape.to_string(), ", which is not fully defined");
    }
    part p;
    p.shape = shape.to_shape();
    const graph::node* node = g.find(n.name());
    auto device = placement::parse_device_name(placed->device_of(node->id));
    if (!device.ok()) return device.error().with_context(str_cat("checkpoint manager: the device of '", n.name(), "'"));
    p.task = placement::task_prefix(placement::task_of(*device));
    const std::string base = k_prefix + n.name();
    tf::NodeDef read;
    read.set_name(base + "/read");
    read.set_op("ReadVariableOp");
    read.add_input(n.name());
    (*read.mutable_attr())["dtype"] = graph::attr_value(type);
    tf::NodeDef value;
    value.set_name(base + "/value");
    value.set_op("Placeholder");
    (*value.mutable_attr())["dtype"] = graph::attr_value(type);
    (*value.mutable_attr())["shape"] = graph::attr_value(partial_shape(p.shape));
    (*value.mutable_attr())["_class"] = graph::attr_value(std::vector<std::string>{"loc:@" + n.name()});
    tf::NodeDef assign;
    assign.set_name(base + "/assign");
    assign.set_op("AssignVariableOp");
    assign.add_input(n.name());
    assign.add_input(value.name());
    (*assign.mutable_attr())["dtype"] = graph::attr_value(type);
    p.read = read.name();
    p.value = value.name();
    p.assign = assign.name();
    added.push_back(std::move(read));
    added.push_back(std::move(value));
    added.push_back(std::move(assign));
    const std::size_t index = m->parts_.size();
    m->read_fetches_.push_back(p.read);
    m->parts_.push_back(std::move(p));
    if (graph::has_attr(n, "_save_slice_info")) {
      std::string info, strategy = "div";
      TROUPE_RETURN_IF_ERROR(graph::get_attr(n, "_save_slice_info", &info));
      if (graph::has_attr(n, "_partition_strategy")) {
        TROUPE_RETURN_IF_ERROR(graph::get_attr(n, "_partition_strategy", &strategy));
      }
      auto slice = parse_slice_info(info, m->parts_[index].shape);
      if (!slice.ok()) return slice.error().with_context(str_cat("checkpoint manager: variable '", name, "'"));
      if (strategy != "div" && strategy != "mod") {
        return invalid_argument_error("checkpoint manager: variable '", name, "' has _partition_strategy '", strategy,
                                      "' (valid: div, mod)");
      }
      auto& group = groups[slice->full_name];
      if (!group.parts.empty() && (group.type != type || group.shape != slice->full_shape || group.strategy != strategy)) {
        return invalid_argument_error("checkpoint manager: the parts of variable '", slice->full_name,
                                      "' disagree on its dtype, shape or partition strategy");
      }
      group.type = type;
      group.shape = slice->full_shape;
      group.strategy = strategy;
      group.parts.emplace_back(slice->offset, index);
      m->parts_[index].offset = slice->offset;
      continue;
    }
    m->variables_.push_back({name, type, m->parts_[index].shape, "", {index}});
  }
  for (auto& [full_name, group] : groups) {
    std::sort(group.parts.begin(), group.parts.end());
    saved_variable v{full_name, group.type, group.shape, group.strategy, {}};
    std::int64_t next = 0;
    for (const auto& [offset, index] : group.parts) {
      if (offset != next) {
        return invalid_argument_error("checkpoint manager: the parts of variable '", full_name, "' do not tile its ",
                                      group.shape.dim(0), " rows (a part starts at row ", offset, ", not ", next, ")");
      }
      next += m->parts_[index].shape.dim(0);
      v.parts.push_back(index);
    }
    if (next != group.shape.dim(0)) {
      return invalid_argument_error("checkpoint manager: the parts of variable '", full_name, "' cover ", next,
                                    " of its ", group.shape.dim(0), " rows");
    }
    m->variables_.push_back(std::move(v));
  }
  std::set<std::string> seen;
  for (std::size_t i = 0; i < m->variables_.size(); ++i) {
    const auto& v = m->variables_[i];
    if (!seen.insert(v.name).second) {
      return invalid_argument_error("checkpoint manager: two variables share the name '", v.name, "'");
    }
    if (v.name == m->options_.global_step) m->global_step_index_ = static_cast<int>(i);
    m->names_.push_back(v.name);
  }
  if (m->variables_.empty()) return invalid_argument_error("checkpoint manager: the graph has no variables to save");
  TROUPE_RETURN_IF_ERROR(m->add_pipelines(g, *placed, &added));
  for (const graph::graph* other : m->options_.pipeline_graphs) {
    auto other_placed = place_as_sessions_do(*other, *cluster, m->options_.default_device);
    if (!other_placed.ok()) return other_placed.error();
    TROUPE_RETURN_IF_ERROR(m->add_pipelines(*other, *other_placed, &added));
  }
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
  m->writer_ = env::thread([p = m.get()] { p->writer_loop(); });
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

status checkpoint_manager::add_pipelines(const graph::graph& g, const placement::placement& placed,
                                         std::vector<tf::NodeDef>* added) {
  const tf::GraphDef def = g.to_graph_def();
  std::vector<const tf::NodeDef*> nodes = pipeline_nodes(def);
  for (const tf::NodeDef& n : def.node()) {
    if (has_saved_generator(n.op())) nodes.push_back(&n);
  }
  for (const tf::NodeDef* n : nodes) {
    const std::string device = placed.device_of(g.find(n->name())->id);
    auto parsed = placement::parse_device_name(device);
    if (!parsed.ok()) return parsed.error().with_context(str_cat("checkpoint manager: the device of '", n->name(), "'"));
    std::string container, shared_name;
    if (graph::has_attr(*n, "container")) TROUPE_RETURN_IF_ERROR(graph::get_attr(*n, "container", &container));
    if (graph::has_attr(*n, "shared_name")) TROUPE_RETURN_IF_ERROR(graph::get_attr(*n, "shared_name", &shared_name));
    if (shared_name.empty()) shared_name = n->name();
    pipeline p;
    p.task = placement::task_prefix(placement::task_of(*parsed));
    p.name = str_cat(p.task.substr(1), "/", container.empty() ? "" : container + "/", shared_name);
    if (std::any_of(pipelines_.begin(), pipelines_.end(), [&](const pipeline& q) { return q.name == p.name; })) {
      continue;  // the same resource, from another graph
    }
    const std::string base = str_cat(k_prefix, "pipeline_", pipelines_.size());
    auto placeholder = [&](const std::string& name, dtype type, const partial_shape& shape) {
      tf::NodeDef v = make_node(name, "Placeholder", device);
      (*v.mutable_attr())["dtype"] = graph::attr_value(type);
      (*v.mutable_attr())["shape"] = graph::attr_value(shape);
      p.values.push_back(name);
      added->push_back(std::move(v));
    };
    const bool generator = has_saved_generator(n->op());
    if (generator || n->op() == "IdxReader") {
      // One int64 vector saved and restored by a pair of ops that find the resource by
      // (container, shared_name) on its device; a generator's ops also carry its seeds,
      // so that whichever runs first makes the same generator.
      tf::NodeDef save = make_node(base + "/save", generator ? "RandomGeneratorSaveState" : "IdxReaderSaveState", device);
      tf::NodeDef restore = make_node(base + "/restore", generator ? "RandomGeneratorRestoreState" : "IdxReaderRestoreState",
                                      device, {base + "/value"});
      for (tf::NodeDef* op : {&save, &restore}) {
        (*op->mutable_attr())["container"] = graph::attr_value(container);
        (*op->mutable_attr())["shared_name"] = graph::attr_value(shared_name);
        for (const char* seed : {"seed", "seed2"}) {
          auto it = n->attr().find(seed);
          if (generator && it != n->attr().end()) (*op->mutable_attr())[seed] = it->second;
        }
      }
      placeholder(base + "/value", dtype::int64, partial_shape({generator ? 6 : 2}));
      p.generator = generator;
      p.fields = {generator ? "generator" : "cursor"};
      p.save = {save.name()};
      p.restore = restore.name();
      added->push_back(std::move(save));
      added->push_back(std::move(restore));
    } else {
      std::vector<dtype> types;
      TROUPE_RETURN_IF_ERROR(graph::get_attr(*n, "component_types", &types));
      std::vector<partial_shape> shapes;
      if (graph::has_attr(*n, "shapes")) TROUPE_RETURN_IF_ERROR(graph::get_attr(*n, "shapes", &shapes));
      if (shapes.size() != types.size() ||
          !std::all_of(shapes.begin(), shapes.end(), [](const partial_shape& s) { return s.fully_defined(); })) {
        log(str_cat("checkpoint: queue '", shared_name, "' on ", p.task,
                    " holds elements of varying shape; its contents are not saved"));
        continue;
      }
      tf::NodeDef queue = *n;  // finds the queue by its shared_name on its device
      queue.set_name(base + "/queue");
      queue.clear_input();
      queue.set_device(device);
      queue.mutable_attr()->erase("_class");
      (*queue.mutable_attr())["shared_name"] = graph::attr_value(shared_name);
      tf::NodeDef save = make_node(base + "/save", "QueueSaveStateV2", device, {queue.name()});
      std::vector<std::string> restore_inputs{queue.name()};
      for (std::size_t i = 0; i < types.size(); ++i) {
        std::vector<std::int64_t> dims{-1};
        dims.insert(dims.end(), shapes[i].dims().begin(), shapes[i].dims().end());
        placeholder(str_cat(base, "/component_", i), types[i], partial_shape(dims));
        restore_inputs.push_back(p.values.back());
        p.fields.push_back(str_cat("component_", i));
        p.save.push_back(str_cat(save.name(), ":", i));
      }
      placeholder(base + "/random_state", dtype::int64, partial_shape({-1}));
      restore_inputs.push_back(p.values.back());
      p.fields.push_back("random_state");
      p.save.push_back(str_cat(save.name(), ":", types.size()));
      tf::NodeDef restore = make_node(base + "/restore", "QueueRestoreStateV2", device, restore_inputs);
      for (tf::NodeDef* op : {&save, &restore}) (*op->mutable_attr())["component_types"] = graph::attr_value(types);
      p.restore = restore.name();
      added->push_back(std::move(queue));
      added->push_back(std::move(save));
      added->push_back(std::move(restore));
    }
    read_fetches_.insert(read_fetches_.end(), p.save.begin(), p.save.end());
    pipelines_.push_back(std::move(p));
  }
  return status();
}

std::uint64_t checkpoint_manager::pipeline_restores(std::string_view task) const {
  const std::string wanted = session_->get_cluster()->canonical_task(task);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pipeline_restores_.find(wanted);
  return it == pipeline_restores_.end() ? 0 : it->second;
}

bool checkpoint_manager::holds_pipelines(std::string_view task) const {
  const std::string wanted = session_->get_cluster()->canonical_task(task);
  return std::any_of(pipelines_.begin(), pipelines_.end(), [&](const pipeline& p) { return p.task == wanted; });
}

bool checkpoint_manager::holds_variables(std::string_view task) const {
  const std::string wanted = session_->get_cluster()->canonical_task(task);
  return std::any_of(parts_.begin(), parts_.end(), [&](const part& p) { return p.task == wanted; });
}

bool checkpoint_manager::holds_global_step(std::string_view task) const {
  if (global_step_index_ < 0) return false;
  const auto& v = variables_[static_cast<std::size_t>(global_step_index_)];
  return parts_[v.parts.front()].task == session_->get_cluster()->canonical_task(task);
}

result<std::optional<std::int64_t>> checkpoint_manager::restore_latest() {
  return restore_some(std::vector<bool>(parts_.size(), true), std::vector<bool>(pipelines_.size(), true));
}

result<std::optional<std::int64_t>> checkpoint_manager::restore_latest(std::string_view task) {
  const std::string wanted = session_->get_cluster()->canonical_task(task);
  std::vector<bool> some, some_pipelines;
  for (const auto& p : parts_) some.push_back(p.task == wanted);
  for (const auto& p : pipelines_) some_pipelines.push_back(p.task == wanted);
  return restore_some(some, some_pipelines);
}

result<std::optional<std::int64_t>> checkpoint_manager::restore_some(const std::vector<bool>& wanted,
                                                                     const std::vector<bool>& wanted_pipelines) {
  std::lock_guard<env::mutex> state_lock(state_mutex_);
  std::lock_guard<env::mutex> dir_lock(dir_mutex_);
  checkpoint::restore_request request;
  request.missing_state_ok = true;
  std::vector<std::size_t> pipelines;  // wanted, by index in pipelines_
  for (std::size_t i = 0; i < pipelines_.size(); ++i) {
    if (!wanted_pipelines[i]) continue;
    pipelines.push_back(i);
    for (const auto& f : pipelines_[i].fields) request.state.push_back(pipelines_[i].name + "/" + f);
  }
  std::vector<std::size_t> chosen;  // variables with a wanted part, read whole
  for (std::size_t i = 0; i < variables_.size(); ++i) {
    const auto& v = variables_[i];
    if (std::none_of(v.parts.begin(), v.parts.end(), [&](std::size_t p) { return wanted[p]; })) continue;
    chosen.push_back(i);
    request.variables.push_back(
        {v.name, v.type, v.shape, std::vector<std::int64_t>(static_cast<std::size_t>(v.shape.rank()), 0), v.shape});
  }
  if (chosen.empty() && pipelines.empty()) return std::optional<std::int64_t>();
  std::vector<std::string> warnings;
  auto restored = dir_->restore_latest(request, &warnings);
  for (const auto& w : warnings) log("checkpoint: " + w);
  if (!restored.ok()) {
    if (restored.error().error_code() == code::not_found) return std::optional<std::int64_t>();
    return restored.error();
  }
  // Each wanted part's value, cut from its variable's whole value.
  actors::feed_list feeds;
  std::vector<std::string> targets, reads;
  std::vector<tensor> expected;
  for (std::size_t k = 0; k < chosen.size(); ++k) {
    const auto& v = variables_[chosen[k]];
    const tensor& whole = restored->variables[k];
    const auto n = static_cast<std::int64_t>(v.parts.size());
    for (std::size_t i = 0; i < v.parts.size(); ++i) {
      const part& p = parts_[v.parts[i]];
      if (!wanted[v.parts[i]]) continue;
      tensor value = v.strategy.empty()   ? whole
                     : v.strategy == "div" ? rows_of(whole, p.offset, p.shape.dim(0), 1)
                                           : rows_of(whole, static_cast<std::int64_t>(i), p.shape.dim(0), n);
      feeds.emplace_back(p.value, value);
      targets.push_back(p.assign);
      reads.push_back(p.read);
      expected.push_back(std::move(value));
    }
  }
  // Each wanted pipeline's state, when the checkpoint has it.
  std::size_t at = 0, pipelines_restored = 0, generators_restored = 0;
  for (std::size_t i : pipelines) {
    const pipeline& p = pipelines_[i];
    const auto first = restored->state.begin() + static_cast<std::ptrdiff_t>(at);
    at += p.fields.size();
    if (!std::all_of(first, first + static_cast<std::ptrdiff_t>(p.fields.size()),
                     [](const tensor& t) { return t.initialized(); })) {
      log(str_cat("checkpoint: '", restored->path, "' has no state of the ",
                  p.generator ? "random generator " : "input pipeline ", p.name, ", which goes on from where it is"));
      continue;
    }
    for (std::size_t f = 0; f < p.fields.size(); ++f) feeds.emplace_back(p.values[f], *(first + static_cast<std::ptrdiff_t>(f)));
    targets.push_back(p.restore);
    ++(p.generator ? generators_restored : pipelines_restored);
  }
  auto assigned = session_->run(feeds, {}, targets);
  {
    // Counted also when it failed: part of it may have been restored.
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t i : pipelines) ++pipeline_restores_[pipelines_[i].task];
  }
  if (!assigned.ok()) return assigned.error().with_context(str_cat("restoring '", restored->path, "'"));
  // Read back: what the variables hold now is the checkpoint, bit for bit (no training
  // step runs meanwhile: REQUIRES of restore_latest).
  auto back = reads.empty() ? result<std::vector<tensor>>(std::vector<tensor>()) : session_->run({}, reads);
  if (!back.ok()) return back.error().with_context(str_cat("reading back what was restored from '", restored->path, "'"));
  for (std::size_t k = 0; k < expected.size(); ++k) {
    if (!back->at(k).equals(expected[k])) {
      return data_loss_error("'", reads[k], "' does not hold what was restored from '", restored->path, "'");
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
  log(str_cat("checkpoint: restored ", chosen.size(), " variable", chosen.size() == 1 ? "" : "s",
              pipelines_restored > 0 ? str_cat(" and ", pipelines_restored, " input pipeline state",
                                               pipelines_restored == 1 ? "" : "s")
                                     : std::string(),
              generators_restored > 0 ? str_cat(" and ", generators_restored, " random generator",
                                                generators_restored == 1 ? "" : "s")
                                      : std::string(),
              " from ", restored->path, " (step ", restored->global_step, ")"));
  return std::optional<std::int64_t>(restored->global_step);
}

bool checkpoint_manager::due_at(std::int64_t global_step) {
  last_step_ = std::max(last_step_, global_step);
  if (global_step < next_due_ && global_step < retry_at_) return false;
  while (next_due_ <= global_step) next_due_ += options_.every_steps;
  retry_at_ = std::numeric_limits<std::int64_t>::max();
  return true;
}

void checkpoint_manager::step_done(std::int64_t global_step) {
  if (options_.every_steps <= 0) return;
  bool request = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (due_at(global_step)) {
      if (requested_) ++stats_.merged;  // one save, after the one being written, serves both
      request = requested_ = true;
    }
  }
  if (request) wake_.notify_all();
}

void checkpoint_manager::cut_if_due(std::int64_t global_step) {
  if (options_.every_steps <= 0) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!due_at(global_step)) return;
  }
  double stopped = 0;
  std::optional<checkpoint::committed> unchanged;
  auto s = cut(&stopped, &unchanged);
  if (!s.ok()) {
    (void)count_failure(s.error());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!s->has_value() || pending_.has_value()) ++stats_.merged;
    if (!s->has_value()) return;
    pending_.emplace(std::move(**s), stopped);  // replaces an older cut not yet written
  }
  wake_.notify_all();
}

void checkpoint_manager::writer_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return requested_ || pending_.has_value() || stopping_; });
    if (stopping_) return;
    if (pending_.has_value()) {
      auto [s, stopped] = std::move(*pending_);
      pending_.reset();
      writing_ = true;
      lock.unlock();
      if (!periodic_save_fails()) (void)write(s, stopped);  // counted and logged there
      lock.lock();
      writing_ = false;
      written_.notify_all();
    } else {
      requested_ = false;
      lock.unlock();
      if (!periodic_save_fails()) (void)save_now();
      lock.lock();
    }
  }
}

bool checkpoint_manager::periodic_save_fails() {
  if (!env::buggify("checkpoint.save_fails")) return false;
  (void)count_failure(unavailable_error("buggify checkpoint.save_fails: a periodic save failed before writing anything"));
  return true;
}

status checkpoint_manager::count_failure(const status& s) {
  std::string why = s.to_string();
  bool again = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.failed;
    stats_.errors.push_back(why);
    again = options_.every_steps > 0 && retry_gap_ < options_.every_steps;
    if (again) {
      retry_at_ = std::min(retry_at_, last_step_ + retry_gap_);
      retry_gap_ *= 2;
    }
  }
  log("checkpoint: save failed, training goes on (the committed checkpoints are intact" +
      std::string(again ? "; tried again soon" : "") + "): " + why);
  return s;
}

result<std::optional<checkpoint::snapshot>> checkpoint_manager::cut(double* stopped,
                                                                   std::optional<checkpoint::committed>* unchanged) {
  std::lock_guard<env::mutex> state_lock(state_mutex_);
  auto stop_started = env::now();
  if (options_.gate != nullptr) options_.gate->close();
  // A slow cut (a PS that answers its reads late) keeps training out that much longer.
  if (env::buggify("checkpoint.slow_cut")) env::sleep_for(k_slow_cut);
  // A read that failed as retryable (a dropped connection) is tried again a few times,
  // 1 ms apart (training is held), before the save is given up: the cut is consistent
  // whenever it reads.
  int tries = 1;
  auto values = run_retried([&] { return session_->run({}, read_fetches_); },
                            [&](const status& e) { return is_retryable(e) && tries++ < k_cut_reads; },
                            retry_policy{env::clock::time_point::max(), std::chrono::milliseconds(1),
                                         std::chrono::milliseconds(1)});
  if (values.ok()) {
    // A periodic save requested and not yet begun was due at a step no later than this
    // cut's (no step ends while the gate is closed): this cut serves it (the final save
    // of a run, say, before the writer got to the request).
    std::lock_guard<std::mutex> lock(mutex_);
    if (requested_) {
      requested_ = false;
      ++stats_.merged;
    }
  }
  if (options_.gate != nullptr) options_.gate->open();
  *stopped = seconds(env::now() - stop_started).count();
  if (!values.ok()) return values.error().with_context("checkpoint: reading the variables");

  checkpoint::snapshot s;
  if (global_step_index_ >= 0) {
    const tensor& step = values->at(variables_[static_cast<std::size_t>(global_step_index_)].parts.front());
    s.global_step = step.type() == dtype::int32 ? step.scalar_value<std::int32_t>() : step.scalar_value<std::int64_t>();
    // Every step advances the global step: at the same one as the last save, nothing has
    // changed since (a periodic save and the final one met), and that save stands.
    std::lock_guard<std::mutex> lock(mutex_);
    if (last_committed_.has_value() && last_committed_->step == s.global_step) {
      *unchanged = *last_committed_;
      return std::optional<checkpoint::snapshot>();
    }
  }
  for (const auto& v : variables_) {
    checkpoint::variable cv{v.name, v.type, v.shape, {}};
    const std::vector<std::int64_t> origin(static_cast<std::size_t>(v.shape.rank()), 0);
    if (v.strategy.empty()) {
      cv.slices.push_back({origin, std::move(values->at(v.parts.front()))});
    } else if (v.strategy == "div") {  // each part is a block of rows: a slice of its own
      for (std::size_t i : v.parts) {
        std::vector<std::int64_t> start = origin;
        start[0] = parts_[i].offset;
        cv.slices.push_back({std::move(start), std::move(values->at(i))});
      }
    } else {  // "mod": part i of n holds ids i, i + n, ...: interleaved into id order
      tensor whole(v.type, v.shape);
      const auto n = static_cast<std::int64_t>(v.parts.size());
      for (std::int64_t i = 0; i < n; ++i) {
        const tensor& p = values->at(v.parts[static_cast<std::size_t>(i)]);
        copy_rows(p, 0, 1, whole, i, n, p.dim(0));
      }
      cv.slices.push_back({origin, std::move(whole)});
    }
    s.variables.push_back(std::move(cv));
  }
  std::size_t at = parts_.size();
  for (const auto& p : pipelines_) {
    for (const auto& f : p.fields) s.state.emplace_back(p.name + "/" + f, std::move(values->at(at++)));
  }
  return std::optional<checkpoint::snapshot>(std::move(s));
}

result<checkpoint::committed> checkpoint_manager::write(const checkpoint::snapshot& s, double stopped) {
  std::lock_guard<env::mutex> dir_lock(dir_mutex_);
  auto write_started = env::now();
  if (env::buggify("checkpoint.slow_write")) env::sleep_for(k_slow_write);
  auto committed = dir_->save(s);
  if (!committed.ok()) return count_failure(committed.error());
  double wrote = seconds(env::now() - write_started).count();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.committed;
    retry_gap_ = 1;
    stats_.commit_times.push_back(env::now());
    last_committed_ = *committed;
    stats_.latest_path = committed->path;
    stats_.latest_step = committed->step;
    stats_.longest_stop_seconds = std::max(stats_.longest_stop_seconds, stopped);
  }
  log(str_cat("checkpoint: saved step ", committed->step, " to ", committed->path, " (", megabytes(committed->bytes),
              "; training held ", short_seconds(stopped), ", written in ", short_seconds(wrote), ")"));
  return committed;
}

result<checkpoint::committed> checkpoint_manager::save_now() {
  std::lock_guard<env::mutex> one_at_a_time(save_now_mutex_);
  {
    // A cut being written may be this one (nothing changed since): then it is returned.
    std::unique_lock<std::mutex> lock(mutex_);
    written_.wait(lock, [&] { return !writing_; });
  }
  double stopped = 0;
  std::optional<checkpoint::committed> unchanged;
  auto s = cut(&stopped, &unchanged);
  if (!s.ok()) return count_failure(s.error());
  if (!s->has_value()) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.merged;
    return *unchanged;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_.has_value()) ++stats_.merged;
    pending_.reset();  // an older cut: this one supersedes it
  }
  return write(**s, stopped);
}

checkpoint_stats checkpoint_manager::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace troupe::cluster
