#include "graph/gradients.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <string>

#include "graph/attr.h"
#include "graph/ops.h"

namespace troupe::graph {

status pass_through_gradient(const gradient_context& ctx, std::vector<output>* grad_inputs) {
  *grad_inputs = ctx.grad_outputs;
  return status();
}

namespace {

// A name scope for this call's nodes: "gradients", or "gradients_1", ... when an earlier
// call already used it (TensorFlow names repeated calls the same way).
std::string fresh_gradients_prefix(const graph& g) {
  auto used = [&](const std::string& prefix) {
    std::string p = prefix + "/";
    for (int id = 0; id < g.num_nodes(); ++id) {
      if (g.get(id).name().starts_with(p)) return true;
    }
    return false;
  };
  std::string prefix = "gradients";
  for (int i = 1; used(prefix); ++i) prefix = str_cat("gradients_", i);
  return prefix;
}

// The sum of the partial gradients of one tensor: none, the only one, or AddN. The sum
// replaces the partials, so a tensor that is both an x and on the path is summed once.
output aggregate(const scope& s, std::vector<output>* partials) {
  if (partials->empty()) return output{};
  if (partials->size() > 1) *partials = {ops::add_n(s, *partials)};
  return partials->front();
}

status check_endpoint(const graph& g, const output& t, const char* what, std::size_t i,
                      endpoint* out) {
  if (!t.valid()) {
    return invalid_argument_error("add_gradients: ", what, "[", i,
                                  "] is an invalid output (the op that should have produced it "
                                  "failed; see the scope's status)");
  }
  const node* n = g.find(t.node);
  if (n == nullptr || t.index < 0 || t.index >= n->num_outputs()) {
    return invalid_argument_error("add_gradients: ", what, "[", i, "] '", t.name(),
                                  "' is not an output of a node in the scope's graph");
  }
  *out = endpoint{n->id, t.index};
  return status();
}

}  // namespace

output output_of(const node& n, int index) {
  auto i = static_cast<std::size_t>(index);
  return output{n.name(), index, n.output_types[i], n.output_shapes[i]};
}

output grad_or_zeros(const gradient_context& ctx, int i) {
  const output& g = ctx.grad_outputs[static_cast<std::size_t>(i)];
  if (g.valid()) return g;
  return ops::zeros_like(ctx.s, ctx.outputs[static_cast<std::size_t>(i)]);
}

output scalar_of(const scope& s, dtype type, double value) {
  tensor t(type, tensor_shape{});
  bool ok = visit_dtype(type, [&]<class T>() { t.data<T>()[0] = static_cast<T>(value); });
  if (!ok) {
    s.record(invalid_argument_error("scalar_of: no numeric constant of dtype ", dtype_name(type)));
    return output{};
  }
  return ops::constant(s, t);
}

output shape_of(const scope& s, const output& x) {
  if (x.shape.known_rank() && x.shape.fully_defined()) {
    std::vector<std::int32_t> dims;
    for (std::int64_t d : x.shape.dims()) dims.push_back(static_cast<std::int32_t>(d));
    return ops::constant(s, tensor::from_vector(dims));
  }
  return ops::shape(s, x);
}

output reshape_to_shape_of(const scope& s, const output& value, const output& x) {
  if (value.shape.known_rank() && x.shape.known_rank() && value.shape.fully_defined() &&
      value.shape == x.shape) {
    return value;
  }
  return ops::reshape(s, value, shape_of(s, x));
}

output sum_to_shape_of(const scope& s, const output& grad, const output& x) {
  if (!grad.valid()) return grad;
  const partial_shape& gs = grad.shape;
  const partial_shape& xs = x.shape;
  if (gs.known_rank() && xs.known_rank() && gs.fully_defined() && xs.fully_defined()) {
    if (gs == xs) return grad;
    // The axes BroadcastGradientArgs would give, computed now.
    int offset = gs.rank() - xs.rank();
    std::vector<std::int32_t> axes;
    for (int i = 0; i < gs.rank(); ++i) {
      if (i < offset || (xs.dim(i - offset) == 1 && gs.dim(i) != 1)) {
        axes.push_back(static_cast<std::int32_t>(i));
      }
    }
    output summed = ops::sum(s, grad, ops::constant(s, tensor::from_vector(axes)));
    return reshape_to_shape_of(s, summed, x);
  }
  output x_shape = ops::shape(s, x);
  operation args = s.add("BroadcastGradientArgs", {x_shape, ops::shape(s, grad)});
  output summed = ops::sum(s, grad, args.out(0));
  return ops::reshape(s, summed, x_shape);
}

result<std::vector<output>> add_gradients(const scope& s, const std::vector<output>& ys,
                                          const std::vector<output>& xs,
                                          const std::vector<output>& grad_ys) {
  if (!s.ok()) return s.get_status().with_context("add_gradients on a scope that already failed");
  const graph& g = s.current_graph();
  if (!grad_ys.empty() && grad_ys.size() != ys.size()) {
    return invalid_argument_error("add_gradients: ", grad_ys.size(), " grad_ys given for ",
                                  ys.size(), " ys (give one per y, or none)");
  }
  std::vector<endpoint> y_ends(ys.size()), x_ends(xs.size());
  for (std::size_t i = 0; i < ys.size(); ++i) {
    TROUPE_RETURN_IF_ERROR(check_endpoint(g, ys[i], "ys", i, &y_ends[i]));
  }
  for (std::size_t i = 0; i < xs.size(); ++i) {
    TROUPE_RETURN_IF_ERROR(check_endpoint(g, xs[i], "xs", i, &x_ends[i]));
  }
  for (std::size_t i = 0; i < ys.size(); ++i) {
    if (ys[i].type == dtype::resource) {
      return invalid_argument_error("add_gradients: ys[", i, "] '", ys[i].name(),
                                    "' is a resource handle; differentiate a value read from it "
                                    "(ReadVariableOp, ResourceGather) instead");
    }
  }
  for (std::size_t i = 0; i < grad_ys.size(); ++i) {
    if (grad_ys[i].valid() && grad_ys[i].type != ys[i].type) {
      return invalid_argument_error("add_gradients: grad_ys[", i, "] '", grad_ys[i].name(),
                                    "' has dtype ", dtype_name(grad_ys[i].type), " but ys[", i,
                                    "] '", ys[i].name(), "' has dtype ", dtype_name(ys[i].type));
    }
  }

  // The nodes on some data path xs -> ... -> ys, from a snapshot of the graph taken before
  // any gradient node is added.
  const int num_nodes = g.num_nodes();
  std::vector<bool> from_xs(static_cast<std::size_t>(num_nodes), false);
  std::vector<bool> on_path(static_cast<std::size_t>(num_nodes), false);
  {
    std::deque<int> queue;
    for (const endpoint& e : x_ends) {
      if (!from_xs[static_cast<std::size_t>(e.node)]) {
        from_xs[static_cast<std::size_t>(e.node)] = true;
        queue.push_back(e.node);
      }
    }
    while (!queue.empty()) {
      int id = queue.front();
      queue.pop_front();
      for (auto [consumer, slot] : g.consumers(id)) {
        // A resource handle carries no gradient: the walk never crosses one (gradients
        // are taken with respect to the values read from variables, not their handles).
        if (g.get(consumer).input_types[static_cast<std::size_t>(slot)] == dtype::resource) continue;
        if (!from_xs[static_cast<std::size_t>(consumer)]) {
          from_xs[static_cast<std::size_t>(consumer)] = true;
          queue.push_back(consumer);
        }
      }
    }
    for (const endpoint& e : y_ends) {
      if (from_xs[static_cast<std::size_t>(e.node)] && !on_path[static_cast<std::size_t>(e.node)]) {
        on_path[static_cast<std::size_t>(e.node)] = true;
        queue.push_back(e.node);
      }
    }
    while (!queue.empty()) {
      int id = queue.front();
      queue.pop_front();
      const node& consumer = g.get(id);
      for (std::size_t k = 0; k < consumer.inputs.size(); ++k) {
        if (consumer.input_types[k] == dtype::resource) continue;
        const endpoint& in = consumer.inputs[k];
        auto n = static_cast<std::size_t>(in.node);
        if (from_xs[n] && !on_path[n]) {
          on_path[n] = true;
          queue.push_back(in.node);
        }
      }
    }
  }
  // Pending counts: how many data edges into on-path consumers have yet to deliver their
  // partial gradient. A node is ready when its count reaches zero.
  std::vector<int> pending(static_cast<std::size_t>(num_nodes), 0);
  for (int id = 0; id < num_nodes; ++id) {
    if (!on_path[static_cast<std::size_t>(id)]) continue;
    for (const endpoint& in : g.get(id).inputs) {
      if (on_path[static_cast<std::size_t>(in.node)]) ++pending[static_cast<std::size_t>(in.node)];
    }
  }

  const scope gs = s.sub(fresh_gradients_prefix(g));
  std::map<endpoint, std::vector<output>> partials;
  for (std::size_t i = 0; i < ys.size(); ++i) {
    output grad = i < grad_ys.size() && grad_ys[i].valid()
                      ? grad_ys[i]
                      : ops::ones_like(gs.with_name(str_cat(g.get(y_ends[i].node).name(), "_ones")), ys[i]);
    partials[y_ends[i]].push_back(grad);
  }

  std::deque<int> ready;
  for (int id = 0; id < num_nodes; ++id) {
    if (on_path[static_cast<std::size_t>(id)] && pending[static_cast<std::size_t>(id)] == 0) {
      ready.push_back(id);
    }
  }
  while (!ready.empty()) {
    const node& n = g.get(ready.front());
    ready.pop_front();
    const scope ns = gs.sub(n.name() + "_grad");

    gradient_context ctx{ns, n, {}, {}, {}};
    for (const endpoint& in : n.inputs) ctx.inputs.push_back(output_of(g.get(in.node), in.index));
    bool any_grad = false;
    for (int i = 0; i < n.num_outputs(); ++i) {
      ctx.outputs.push_back(output_of(n, i));
      auto it = partials.find(endpoint{n.id, i});
      ctx.grad_outputs.push_back(it == partials.end() ? output{} : aggregate(ns, &it->second));
      any_grad = any_grad || ctx.grad_outputs.back().valid();
    }
    bool any_input_on_path = std::any_of(n.inputs.begin(), n.inputs.end(), [&](const endpoint& e) {
      return on_path[static_cast<std::size_t>(e.node)];
    });

    // Only a node that passes gradient on towards xs needs a gradient function: an x that
    // is a source (Placeholder) or whose own inputs lie off the path does not.
    if (any_grad && any_input_on_path && !n.op->not_differentiable) {
      if (!n.op->gradient) {
        return unimplemented_error(
            "add_gradients: no gradient is defined for op '", n.op_name(), "' (node '", n.name(),
            "'), which lies on a path from xs to ys; register one with op_schema::gradient, "
            "declare the op op_schema::no_gradient(), or cut the path with StopGradient");
      }
      std::vector<output> grad_inputs;
      status st = n.op->gradient(ctx, &grad_inputs);
      if (st.ok() && !ns.ok()) st = ns.get_status();
      if (!st.ok()) {
        return st.with_context(str_cat("computing the gradient of node '", n.name(), "' (",
                                       n.op_name(), ")"));
      }
      if (grad_inputs.size() != n.inputs.size()) {
        return internal_error("the gradient function of op '", n.op_name(), "' returned ",
                              grad_inputs.size(), " gradients for node '", n.name(), "' with ",
                              n.inputs.size(), " inputs");
      }
      for (std::size_t i = 0; i < n.inputs.size(); ++i) {
        const endpoint& in = n.inputs[i];
        if (grad_inputs[i].valid() && on_path[static_cast<std::size_t>(in.node)]) {
          partials[in].push_back(grad_inputs[i]);
        }
      }
    }
    for (const endpoint& in : n.inputs) {
      auto p = static_cast<std::size_t>(in.node);
      if (on_path[p] && --pending[p] == 0) ready.push_back(in.node);
    }
  }

  std::vector<output> result;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    auto it = partials.find(x_ends[i]);
    result.push_back(it == partials.end() ? output{} : aggregate(gs, &it->second));
  }
  if (!s.ok()) return s.get_status();
  return result;
}

}  // namespace troupe::graph
