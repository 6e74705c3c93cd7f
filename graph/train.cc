#include "graph/train.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "graph/attr.h"
#include "graph/gradients.h"
#include "graph/prune.h"
#include "graph/ops.h"

namespace troupe::train {

using graph::attr_value;

std::string optimizer::name() const {
  switch (kind) {
    case algorithm::gradient_descent: return "GradientDescent";
    case algorithm::momentum: return "Momentum";
    case algorithm::adagrad: return "Adagrad";
    case algorithm::adam: return "Adam";
    case algorithm::rms_prop: return "RMSProp";
  }
  return "Optimizer";
}

optimizer gradient_descent(double learning_rate) {
  optimizer o;
  o.kind = algorithm::gradient_descent;
  o.learning_rate = learning_rate;
  return o;
}

optimizer momentum(double learning_rate, double momentum, bool use_nesterov) {
  optimizer o;
  o.kind = algorithm::momentum;
  o.learning_rate = learning_rate;
  o.momentum = momentum;
  o.use_nesterov = use_nesterov;
  return o;
}

optimizer adagrad(double learning_rate, double initial_accumulator) {
  optimizer o;
  o.kind = algorithm::adagrad;
  o.learning_rate = learning_rate;
  o.initial_accumulator = initial_accumulator;
  return o;
}

optimizer adam(double learning_rate, double beta1, double beta2, double epsilon) {
  optimizer o;
  o.kind = algorithm::adam;
  o.learning_rate = learning_rate;
  o.beta1 = beta1;
  o.beta2 = beta2;
  o.epsilon = epsilon;
  return o;
}

optimizer rms_prop(double learning_rate, double decay, double momentum, double epsilon) {
  optimizer o;
  o.kind = algorithm::rms_prop;
  o.learning_rate = learning_rate;
  o.decay = decay;
  o.momentum = momentum;
  o.epsilon = epsilon;
  return o;
}

variable make_global_step(const scope& s, variable_collection& vars) {
  variable step = graph::make_variable(s, "global_step", tensor_shape{}, dtype::int64,
                                       init::zeros_initializer());
  if (step.valid()) vars.add(step, /*is_trainable=*/false);
  return step;
}

namespace {

// One read of a variable: its output (an x of add_gradients) and, for a ResourceGather,
// the indices it read and its batch_dims.
struct variable_read {
  output value;
  output indices;  // invalid for a ReadVariableOp
  std::int64_t batch_dims = 0;
};

// The ops on the variable's device that consume a dense read of it in this step (forward
// ops and the gradient ops that take the read as an input), following ops that may pass
// the read's buffer on. An update that waits for them finds the variable's buffer no
// longer shared by a snapshot and updates it in place; one that runs earlier must copy it
// first (for AlexNet's first dense layer, 150 MB per step). Readers on other devices work
// on their own transferred copy, so they are not waited for (no extra cross-device edges);
// where devices are chosen later by the placer, the update names its readers
// (graph::k_in_place_after_attr) and the partitioner drops the edges from those that land
// in another process (within one, a reader on another device shares the buffer too).
// Only readers the step runs anyway count (`needed`, by node id: ancestors of the applied
// gradients): a gradient function also builds gradients nobody uses (a MatMul's gradient
// with respect to the input batch, a first convolution's with respect to the images), and
// an update that waited for one would make every step compute it.
std::vector<operation> readers_of(const graph::graph& g, const graph::node& handle,
                                  const std::vector<variable_read>& reads, const std::vector<bool>& needed) {
  static const std::set<std::string> forwarding = {"Identity", "Reshape", "ExpandDims", "Squeeze",
                                                   "StopGradient", "Snapshot"};
  std::vector<int> stack;
  for (const variable_read& read : reads) {
    if (read.indices.valid()) continue;  // a gather's rows are a new tensor
    if (const graph::node* n = g.find(read.value.node)) stack.push_back(n->id);
  }
  std::set<int> seen;
  std::vector<operation> readers;
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    for (auto [consumer, slot] : g.consumers(id)) {
      if (!seen.insert(consumer).second) continue;
      if (static_cast<std::size_t>(consumer) >= needed.size() || !needed[static_cast<std::size_t>(consumer)]) continue;
      const graph::node& c = g.get(consumer);
      if (c.def.device() != handle.def.device()) continue;
      readers.push_back(operation{c.name(), {}});
      if (forwarding.count(c.op_name()) != 0) stack.push_back(consumer);
    }
  }
  return readers;
}

// The gradient a variable gets: dense parts (one per read) and sparse (rows, indices).
struct variable_gradient {
  std::vector<output> dense;
  std::vector<std::pair<output, output>> sparse;  // (rows, indices)
  bool any() const { return !dense.empty() || !sparse.empty(); }
};

// By node id: whether the node is an ancestor (through data and control inputs) of one of
// the gradients, or one of them: what a step that applies them runs (graph/prune.h).
std::vector<bool> ancestors_of(const graph::graph& g, const std::vector<variable_gradient>& gradients) {
  std::vector<int> ends;
  auto add = [&](const output& o) {
    if (const graph::node* n = g.find(o.node)) ends.push_back(n->id);
  };
  for (const variable_gradient& grad : gradients) {
    for (const output& d : grad.dense) add(d);
    for (const auto& [rows, indices] : grad.sparse) add(rows), add(indices);
  }
  std::vector<bool> needed(static_cast<std::size_t>(g.num_nodes()), false);
  for (int id : graph::prune(g, {}, {}, ends)) needed[static_cast<std::size_t>(id)] = true;
  return needed;
}

bool is_float(dtype t) { return t == dtype::float32 || t == dtype::float64; }

// The MatMul whose product `grad` is, when a gradient-descent update of `v` may take the
// product's factors instead (TroupeApplyGradientDescentMatMul: var -= lr * a b, one gemm
// into the variable, no gradient tensor written and read again): the product is that
// MatMul's only output, feeds nothing else, and the MatMul asks for the variable's device
// (the same device string, empty included), so that fusing moves no work between devices.
const graph::node* fusable_product(const graph::graph& g, const output& grad, const variable& v) {
  const graph::node* n = g.find(grad.node);
  const graph::node* handle = g.find(v.handle.node);
  if (n == nullptr || handle == nullptr || n->op_name() != "MatMul" || grad.index != 0) return nullptr;
  if (g.consumers(n->id).size() != 0 || !g.control_consumers(n->id).empty()) return nullptr;
  if (n->def.device() != handle->def.device() || n->inputs.size() != 2) return nullptr;
  return n;
}

output output_of(const graph::graph& g, const graph::endpoint& e) { return graph::output_of(g.get(e.node), e.index); }

// A sparse gradient of `v` (a gather's rows at its indices, of any batch shape) as rows
// [k, v's inner dimensions] and indices [k].
std::pair<output, output> flat_rows(const scope& s, const variable& v, const output& rows, const output& indices) {
  std::vector<std::int32_t> row_shape{-1};
  for (int d = 1; d < v.shape.rank(); ++d) row_shape.push_back(static_cast<std::int32_t>(v.shape.dim(d)));
  return {ops::reshape(s, rows, ops::int32_vector(s, row_shape)),
          ops::reshape(s, indices, ops::int32_vector(s, {-1}))};
}

// The dense gradient of `v` that rows at indices make: their sum per row of v.
output densify(const scope& s, const variable& v, const output& rows, const output& indices) {
  auto [flat, ids] = flat_rows(s, v, rows, indices);
  output num_rows = ops::scalar<std::int32_t>(s, static_cast<std::int32_t>(v.shape.dim(0)));
  return s.add("UnsortedSegmentSum", {flat, ids, num_rows}).out();
}

// Scalar constants of the optimizer's hyper-parameters, one per (name, dtype).
class constants {
 public:
  explicit constants(scope s) : s_(std::move(s)) {}
  output get(const std::string& name, dtype type, double value) {
    auto key = std::make_pair(name, type);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    output c = graph::scalar_of(s_.with_name(name), type, value);
    cache_[key] = c;
    return c;
  }

 private:
  scope s_;
  std::map<std::pair<std::string, dtype>, output> cache_;
};

// What gather_gradients finds: for each trainable variable, its reads and its gradient.
struct gathered {
  std::vector<std::vector<variable_read>> reads;
  std::vector<variable_gradient> gradients;
};

// The gradient of `loss` for each of vars.trainable (minimize's first half), with the
// reads it was taken at. Errors are minimize's, naming `opt_name`.
result<gathered> gather_gradients(const scope& s, const std::string& opt_name, const output& loss,
                                  variable_collection& vars) {
  if (!s.ok()) return s.get_status().with_context("minimize on a scope that already failed");
  if (!loss.valid()) {
    return invalid_argument_error("minimize: the loss is an invalid output (the op that should "
                                  "have produced it failed; see the scope's status)");
  }
  if (!is_float(loss.type)) {
    return invalid_argument_error("minimize: the loss '", loss.name(), "' has dtype ",
                                  dtype_name(loss.type), "; float or double needed");
  }
  if (vars.trainable.empty()) {
    return invalid_argument_error("minimize: there are no trainable variables to update");
  }
  const graph::graph& g = s.current_graph();

  // Every read of every trainable variable, before any node is added.
  gathered out;
  out.gradients.resize(vars.trainable.size());
  std::vector<std::vector<variable_read>>& reads = out.reads;
  reads.resize(vars.trainable.size());
  std::vector<output> xs;
  for (std::size_t i = 0; i < vars.trainable.size(); ++i) {
    const variable& v = vars.trainable[i];
    const graph::node* handle = v.valid() ? g.find(v.handle.node) : nullptr;
    if (handle == nullptr) {
      return invalid_argument_error("minimize: trainable variable '", v.name,
                                    "' is not a variable of the scope's graph");
    }
    for (auto [consumer, slot] : g.consumers(handle->id)) {
      const graph::node& c = g.get(consumer);
      variable_read read;
      if (c.op_name() == "ReadVariableOp") {
        read.value = graph::output_of(c, 0);
      } else if (c.op_name() == "ResourceGather") {
        read.value = graph::output_of(c, 0);
        read.indices = graph::output_of(g.get(c.inputs[1].node), c.inputs[1].index);
        TROUPE_RETURN_IF_ERROR(graph::get_attr(c.def, "batch_dims", &read.batch_dims));
      } else {
        continue;
      }
      reads[i].push_back(read);
      xs.push_back(read.value);
    }
  }
  auto grads = graph::add_gradients(s, {loss}, xs);
  if (!grads.ok()) return grads.error().with_context("minimize");

  std::vector<variable_gradient>& gradients = out.gradients;
  std::vector<std::string> skipped;
  std::size_t k = 0;
  for (std::size_t i = 0; i < vars.trainable.size(); ++i) {
    const variable& v = vars.trainable[i];
    for (const variable_read& read : reads[i]) {
      const output& grad = (*grads)[k++];
      if (!grad.valid()) continue;
      if (!read.indices.valid()) {
        gradients[i].dense.push_back(grad);
      } else if (read.batch_dims != 0) {
        return unimplemented_error("minimize: variable '", v.name, "' is read by ResourceGather '",
                                   read.value.node, "' with batch_dims ", read.batch_dims,
                                   "; sparse updates support batch_dims 0 only");
      } else {
        gradients[i].sparse.emplace_back(grad, read.indices);
      }
    }
    if (!gradients[i].any()) {
      skipped.push_back(v.name);
      continue;
    }
    if (!is_float(v.type)) {
      return invalid_argument_error("minimize: variable '", v.name, "' has dtype ",
                                    dtype_name(v.type), "; ", opt_name,
                                    " updates float and double variables");
    }
  }
  if (skipped.size() == vars.trainable.size()) {
    std::string names;
    for (const auto& n : skipped) names += str_cat(names.empty() ? "" : ", ", "'", n, "'");
    return invalid_argument_error("minimize: no gradient reaches the loss '", loss.name(),
                                  "' from any trainable variable (", names,
                                  "); does the loss depend on their values?");
  }
  return out;
}

// Whether `opt`'s learning-rate decay can be built (before anything is added).
status check_decay(const optimizer& opt, const variable& global_step) {
  if (opt.decay_steps < 0 || (opt.decay_steps > 0 && !(opt.decay_rate > 0))) {
    return invalid_argument_error("minimize: learning-rate decay needs decay_steps >= 0 and decay_rate > 0 (",
                                  opt.name(), " has decay_steps ", opt.decay_steps, ", decay_rate ", opt.decay_rate,
                                  ")");
  }
  if (opt.decay_steps > 0 && !global_step.valid()) {
    return invalid_argument_error("minimize: ", opt.name(), "'s learning-rate decay needs a global step");
  }
  return status();
}

// Adds `opt`'s updates of vars.trainable by `gradients` (minimize's second half; one
// entry per trainable variable, empty for those the loss does not reach). `reads`, when
// given, are the step's reads that each update waits for (readers_of).
result<operation> apply_gradients(const scope& s, const optimizer& opt, std::vector<variable_gradient> gradients,
                                  const std::vector<std::vector<variable_read>>* reads, variable_collection& vars,
                                  const variable& global_step) {
  const std::string opt_name = opt.name();
  const graph::graph& g = s.current_graph();
  const scope os = s.sub(opt_name);
  constants hyper(os);
  std::vector<operation> updates;
  variable beta1_power, beta2_power;
  const std::vector<bool> needed = reads != nullptr ? ancestors_of(g, gradients) : std::vector<bool>{};
  // The learning rate in dtype t: a constant, or decayed from the global step (one per
  // dtype, where the step lives).
  std::map<dtype, output> decayed;
  auto learning_rate = [&](dtype t) -> output {
    if (opt.decay_steps == 0) return hyper.get("learning_rate", t, opt.learning_rate);
    auto it = decayed.find(t);
    if (it != decayed.end()) return it->second;
    const scope ds = os.sub("learning_rate_decay").colocate_with(global_step.handle.node);
    output step = ops::cast(ds, ds.add("ReadVariableOp", {global_step.handle}, {{"dtype", attr_value(global_step.type)}}).out(), t);
    output exponent = ops::div(ds, step, graph::scalar_of(ds, t, static_cast<double>(opt.decay_steps)));
    if (opt.staircase) exponent = ds.add("Floor", {exponent}).out();
    output factor = ds.add("Pow", {graph::scalar_of(ds, t, opt.decay_rate), exponent}).out();
    output lr = ops::mul(os.with_name("learning_rate_decayed").colocate_with(global_step.handle.node),
                         graph::scalar_of(ds, t, opt.learning_rate), factor);
    decayed.emplace(t, lr);
    return lr;
  };
  auto slot = [&](const variable& v, const std::string& suffix, double initial) {
    // Slots live with their variable (TensorFlow colocates them the same way).
    variable slot_var = graph::make_variable(s.colocate_with(v.handle.node), v.name + "/" + suffix, v.shape, v.type,
                                             init::constant_initializer(initial));
    if (slot_var.valid()) vars.add(slot_var, /*is_trainable=*/false);
    return slot_var;
  };
  for (std::size_t i = 0; i < vars.trainable.size(); ++i) {
    const variable& v = vars.trainable[i];
    variable_gradient& grad = gradients[i];
    if (!grad.any()) continue;
    // The update runs where the variable lives, whatever device `s` asks for, after the
    // step's readers of its value (readers_of).
    scope us = os.sub("update_" + v.name).colocate_with(v.handle.node);
    if (reads == nullptr) {
    } else if (auto readers = readers_of(g, *g.find(v.handle.node), (*reads)[i], needed); !readers.empty()) {
      tf::AttrValue names;
      for (const operation& r : readers) names.mutable_list()->add_s(r.node);
      us = us.with_control_dependencies(std::move(readers)).with_attr(graph::k_in_place_after_attr, std::move(names));
    }
    const dtype t = v.type;
    output lr = learning_rate(t);

    if (opt.kind == algorithm::gradient_descent) {
      for (const auto& [rows, indices] : grad.sparse) {
        output neg_lr = opt.decay_steps == 0 ? hyper.get("neg_learning_rate", t, -opt.learning_rate) : ops::neg(us, lr);
        output delta = ops::mul(us, rows, neg_lr);
        updates.push_back(us.add("ResourceScatterAdd", {v.handle, indices, delta}));
      }
      if (!grad.dense.empty()) {
        output dense = grad.dense.size() == 1 ? grad.dense[0] : ops::add_n(us, grad.dense);
        if (const graph::node* product = opt.fuse_matmul_updates ? fusable_product(g, dense, v) : nullptr) {
          updates.push_back(us.add("TroupeApplyGradientDescentMatMul",
                                   {v.handle, lr, output_of(g, product->inputs[0]), output_of(g, product->inputs[1])},
                                   {{"transpose_a", product->def.attr().at("transpose_a")},
                                    {"transpose_b", product->def.attr().at("transpose_b")}}));
        } else {
          updates.push_back(us.add("ResourceApplyGradientDescent", {v.handle, lr, dense}));
        }
      }
      continue;
    }
    // The other optimizers update every row: sparse rows become a dense gradient.
    for (const auto& [rows, indices] : grad.sparse) grad.dense.push_back(densify(us, v, rows, indices));
    output dense = grad.dense.size() == 1 ? grad.dense[0] : ops::add_n(us, grad.dense);

    switch (opt.kind) {
      case algorithm::gradient_descent:
        break;
      case algorithm::momentum: {
        variable accum = slot(v, "Momentum", 0.0);
        if (!accum.valid()) break;
        updates.push_back(us.add("ResourceApplyMomentum",
                                 {v.handle, accum.handle, lr, dense, hyper.get("momentum", t, opt.momentum)},
                                 {{"use_nesterov", attr_value(opt.use_nesterov)}}));
        break;
      }
      case algorithm::adagrad: {
        variable accum = slot(v, "Adagrad", opt.initial_accumulator);
        if (!accum.valid()) break;
        updates.push_back(us.add("ResourceApplyAdagrad", {v.handle, accum.handle, lr, dense}));
        break;
      }
      case algorithm::adam: {
        if (!beta1_power.valid()) {
          beta1_power = graph::make_variable(s.colocate_with(v.handle.node), "beta1_power", tensor_shape{}, t,
                                             init::constant_initializer(opt.beta1));
          beta2_power = graph::make_variable(s.colocate_with(v.handle.node), "beta2_power", tensor_shape{}, t,
                                             init::constant_initializer(opt.beta2));
          if (!beta1_power.valid() || !beta2_power.valid()) break;
          vars.add(beta1_power, false);
          vars.add(beta2_power, false);
        }
        variable m = slot(v, "Adam", 0.0);
        variable second = slot(v, "Adam_1", 0.0);
        if (!m.valid() || !second.valid()) break;
        auto as_type = [&](const output& x) { return x.type == t ? x : ops::cast(us, x, t); };
        updates.push_back(us.add("ResourceApplyAdam",
                                 {v.handle, m.handle, second.handle, as_type(beta1_power.value),
                                  as_type(beta2_power.value), lr, hyper.get("beta1", t, opt.beta1),
                                  hyper.get("beta2", t, opt.beta2), hyper.get("epsilon", t, opt.epsilon),
                                  dense},
                                 {{"use_nesterov", attr_value(opt.use_nesterov)}}));
        break;
      }
      case algorithm::rms_prop: {
        variable ms = slot(v, "RMSProp", 1.0);
        variable mom = slot(v, "RMSProp_1", 0.0);
        if (!ms.valid() || !mom.valid()) break;
        updates.push_back(us.add("ResourceApplyRMSProp",
                                 {v.handle, ms.handle, mom.handle, lr, hyper.get("rho", t, opt.decay),
                                  hyper.get("momentum", t, opt.momentum),
                                  hyper.get("epsilon", t, opt.epsilon), dense}));
        break;
      }
    }
  }
  if (!s.ok()) return s.get_status().with_context("minimize");

  // After every update: Adam's beta powers advance, then the global step.
  std::vector<operation> after = updates;
  const scope fs = os.with_control_dependencies(updates);
  if (beta1_power.valid()) {
    for (const variable* power : {&beta1_power, &beta2_power}) {
      const double beta = power == &beta1_power ? opt.beta1 : opt.beta2;
      output next = ops::mul(fs, power->value, graph::scalar_of(fs, power->type, beta));
      after.push_back(fs.colocate_with(power->handle.node).add("AssignVariableOp", {power->handle, next}));
    }
  }
  if (global_step.valid()) {
    operation increment = s.sub("global_step_update")
                              .colocate_with(global_step.handle.node)
                              .with_control_dependencies(after)
                              .add("AssignAddVariableOp",
                                   {global_step.handle, graph::scalar_of(s, global_step.type, 1)});
    after.push_back(increment);
  }
  after.insert(after.end(), vars.update_ops.begin(), vars.update_ops.end());
  operation train_op = ops::no_op(s.with_name(opt_name).with_control_dependencies(after));
  if (!s.ok()) return s.get_status().with_context("minimize");
  return train_op;
}

}  // namespace

result<operation> minimize(const scope& s, const optimizer& opt, const output& loss,
                           variable_collection& vars, const variable& global_step) {
  TROUPE_RETURN_IF_ERROR(check_decay(opt, global_step));
  auto gathered = gather_gradients(s, opt.name(), loss, vars);
  if (!gathered.ok()) return gathered.error();
  return apply_gradients(s, opt, std::move(gathered->gradients), &gathered->reads, vars, global_step);
}

sync_replicas_optimizer sync_replicas(optimizer base, int replicas_to_aggregate, int total_num_replicas) {
  sync_replicas_optimizer o;
  o.base = std::move(base);
  o.replicas_to_aggregate = replicas_to_aggregate;
  o.total_num_replicas = total_num_replicas > 0 ? total_num_replicas : replicas_to_aggregate;
  return o;
}

result<sync_replicas_ops> minimize(const scope& s, const sync_replicas_optimizer& opt, const output& loss,
                                   variable_collection& vars, const variable& global_step, int replica) {
  const int n = opt.replicas_to_aggregate, total = opt.total_num_replicas;
  if (n < 1) return invalid_argument_error("sync_replicas: replicas_to_aggregate is ", n, "; it must be >= 1");
  if (total < n) {
    return invalid_argument_error("sync_replicas: total_num_replicas ", total, " < replicas_to_aggregate ", n,
                                  ": each replica computes one gradient per step here, so a step needs at least as "
                                  "many replicas as it aggregates");
  }
  if (replica < 0 || replica >= total) {
    return invalid_argument_error("sync_replicas: replica ", replica, " is not in [0, ", total, ")");
  }
  if (!global_step.valid()) return invalid_argument_error("sync_replicas: a global step is needed");
  TROUPE_RETURN_IF_ERROR(check_decay(opt.base, global_step));
  auto gathered = gather_gradients(s, opt.base.name(), loss, vars);
  if (!gathered.ok()) return gathered.error();

  const scope ss = s.sub("sync_replicas");
  const scope at_step = ss.colocate_with(global_step.handle.node);
  auto read_step = [&](const scope& where) {
    return where.add("ReadVariableOp", {global_step.handle}, {{"dtype", attr_value(global_step.type)}}).out();
  };
  // The step the accumulators are set to, read beside the global step (a read colocated
  // with a variable on another PS task could be placed nowhere).
  const output step_for_accumulators = read_step(at_step.sub("step_for_accumulators"));
  sync_replicas_ops out;
  out.local_step = ops::placeholder(ss.with_name("local_step"), dtype::int64, partial_shape::scalar());
  const output num_required = ops::scalar<std::int32_t>(ss.with_name("num_required"), n);
  std::vector<operation> applies, takes, inits;
  // Per trainable variable: the taken aggregate, to apply after every take.
  std::vector<variable_gradient> taken(vars.trainable.size());
  for (std::size_t i = 0; i < vars.trainable.size(); ++i) {
    const variable& v = vars.trainable[i];
    variable_gradient& grad = gathered->gradients[i];
    if (!grad.any()) continue;
    const scope vs = ss.sub("accumulate_" + v.name).colocate_with(v.handle.node);
    const bool sparse = grad.dense.empty();
    std::map<std::string, tf::AttrValue> attrs = {{"dtype", attr_value(v.type)},
                                                  {"shape", attr_value(partial_shape(v.shape))},
                                                  {"shared_name", attr_value(v.name + "/sync_accumulator")},
                                                  {"reduction_type", attr_value(std::string(sparse ? "SUM" : "MEAN"))},
                                                  {"_one_per_worker", attr_value(true)}};
    if (sparse) {
      std::vector<output> rows, indices;
      for (const auto& [r, idx] : grad.sparse) {
        auto [flat, ids] = flat_rows(vs, v, r, idx.type == dtype::int64 ? idx : ops::cast(vs, idx, dtype::int64));
        rows.push_back(flat);
        indices.push_back(ids);
      }
      const output axis = ops::scalar<std::int32_t>(vs, 0);
      output all_rows = rows.size() == 1 ? rows[0] : ops::concat(vs, rows, axis);
      output all_indices = indices.size() == 1 ? indices[0] : ops::concat(vs, indices, axis);
      operation acc = vs.with_name("accumulator").add("SparseConditionalAccumulator", {}, attrs);
      std::vector<std::int64_t> dims = v.shape.dims();
      applies.push_back(vs.add("SparseAccumulatorApplyGradient",
                               {acc.out(), out.local_step, all_indices, all_rows,
                                ops::constant(vs, tensor::from_vector(dims))},
                               {{"dtype", attr_value(v.type)}, {"has_known_shape", attr_value(true)}}));
      operation take = vs.add("SparseAccumulatorTakeGradient", {acc.out(), num_required}, {{"dtype", attr_value(v.type)}});
      takes.push_back(take);
      output mean = ops::mul(vs, take.out(1), graph::scalar_of(vs, v.type, 1.0 / n));
      taken[i].sparse.emplace_back(mean, take.out(0));
      inits.push_back(vs.add("AccumulatorSetGlobalStep", {acc.out(), step_for_accumulators}));
      continue;
    }
    // Dense: every part (and any rows, made dense) summed into one gradient.
    std::vector<output> parts = grad.dense;
    for (const auto& [r, idx] : grad.sparse) parts.push_back(densify(vs, v, r, idx));
    output dense = parts.size() == 1 ? parts[0] : ops::add_n(vs, parts);
    operation acc = vs.with_name("accumulator").add("ResourceConditionalAccumulator", {}, attrs);
    applies.push_back(vs.add("ResourceAccumulatorApplyGradient", {acc.out(), out.local_step, dense},
                             {{"dtype", attr_value(v.type)}}));
    operation take = vs.add("ResourceAccumulatorTakeGradient", {acc.out(), num_required}, {{"dtype", attr_value(v.type)}});
    takes.push_back(take);
    taken[i].dense.push_back(take.out());
    inits.push_back(vs.add("ResourceAccumulatorSetGlobalStep", {acc.out(), step_for_accumulators}));
  }
  // No variable changes before every accumulator has been taken from: a gradient tagged
  // with this step that reaches an accumulator after its take is stale everywhere.
  const scope after_takes = ss.with_control_dependencies(takes);
  auto gated = [&](output& x) {
    output read = ops::identity(after_takes, x);
    out.aggregates.emplace_back(x, read);
    x = read;
  };
  for (auto& g : taken) {
    for (auto& d : g.dense) gated(d);
    for (auto& [rows, idx] : g.sparse) gated(rows), gated(idx);
  }
  auto update = apply_gradients(s, opt.base, std::move(taken), nullptr, vars, global_step);
  if (!update.ok()) return update.error();
  out.update = *update;
  out.step_after_update = ops::identity(ss.with_name("step_after_update"), read_step(at_step.with_control_dependencies({out.update})));
  out.init = ops::no_op(ss.with_name("init").with_control_dependencies(inits));
  out.step_at_init = step_for_accumulators;

  // Tokens: one queue per replica, beside the global step.
  const std::map<std::string, tf::AttrValue> queue_attrs = {
      {"component_types", attr_value(std::vector<dtype>{dtype::int64})},
      {"shapes", attr_value(std::vector<partial_shape>{partial_shape::scalar()})}};
  std::vector<output> queues;
  std::vector<operation> closes;
  for (int r = 0; r < total; ++r) {
    auto attrs = queue_attrs;
    attrs["shared_name"] = attr_value(str_cat("sync_token_queue_", r));
    const scope ts = at_step.sub(str_cat("tokens_", r));
    queues.push_back(ts.with_name("queue").add("FIFOQueueV2", {}, attrs).out());
    out.token_size.push_back(ts.with_name("size").add("QueueSizeV2", {queues.back()}).out());
    out.token_enqueue.push_back(ts.with_name("enqueue").add("QueueEnqueueV2", {queues.back(), graph::input({read_step(ts)})}));
    closes.push_back(ts.with_name("close").add("QueueCloseV2", {queues.back()},
                                               {{"cancel_pending_enqueues", attr_value(true)}}));
  }
  out.close_tokens = ops::no_op(ss.with_name("close_tokens").with_control_dependencies(closes));
  // This replica's token: `train` takes it after the gradients, `after_token` on its own.
  auto dequeue_token = [&](const scope& where) {
    return where.add("QueueDequeueV2", {queues[static_cast<std::size_t>(replica)]},
                     {{"component_types", attr_value(std::vector<dtype>{dtype::int64})}});
  };
  operation token = dequeue_token(at_step.with_name("token").with_control_dependencies(applies));
  out.next_local_step = ops::identity(ss.with_name("next_local_step"), read_step(at_step.with_control_dependencies({token})));
  out.apply = ops::no_op(ss.with_name("apply").with_control_dependencies(applies));
  operation next_token = dequeue_token(at_step.with_name("next_token"));
  out.after_token = ops::identity(ss.with_name("after_token"), read_step(at_step.with_control_dependencies({next_token})));
  out.train = ops::no_op(ss.with_name("train").with_control_dependencies({token, operation{out.next_local_step.node, {}}}));
  if (!s.ok()) return s.get_status().with_context("sync_replicas");
  return out;
}

}  // namespace troupe::train
