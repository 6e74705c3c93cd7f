// Automatic differentiation as a graph transformation (reverse mode, TensorFlow's
// gradients_impl semantics).
//
//   auto root = graph::scope::new_root();
//   auto x = ops::placeholder(root.with_name("x"), dtype::float64, {2, 3});
//   auto y = ops::sum(root, ops::mul(root, x, x), ops::constant(root, {0, 1}));
//   auto dx = graph::add_gradients(root, {y}, {x});   // result<std::vector<output>>
//   // (*dx)[0] is a node under "gradients/" computing 2 * x; fetch it with a session.
//
// add_gradients adds nodes to the scope's graph; it never changes existing ones. It walks
// back from ys, visiting only nodes that lie on some path xs -> ... -> ys, in an order
// where a node's gradient function runs once every consumer on the path has contributed
// its partial gradient (pending counts, as TensorFlow does). Partial gradients reaching
// one tensor from several consumers are summed with AddN. Resource-typed edges (variable
// and queue handles) carry no gradient and are never walked: differentiate with respect
// to the values read from a variable (ReadVariableOp, ResourceGather outputs); an x that
// is a handle gets no gradient, a y that is one is an error.
//
// Contract of a gradient function (registered beside the op's schema, op_schema::gradient):
//   - it gets the forward node, its inputs and outputs as builder outputs, and one
//     gradient per output (grad_outputs[i] invalid: no gradient flows into output i; a
//     function that needs one anyway builds ZerosLike(outputs[i]));
//   - it writes exactly one output per forward input into *grad_inputs, invalid for an
//     input that gets no gradient (an integer shape argument, say);
//   - it builds nodes with ctx.s, which already carries the "gradients/" name scope;
//   - it reports failures as a status (errors recorded in the scope also count).
//
// Thread safety: as the builder; a graph under construction belongs to one thread.
#pragma once

#include <vector>

#include "core/status.h"
#include "graph/builder.h"
#include "graph/graph.h"
#include "graph/op_registry.h"

namespace troupe::graph {

struct gradient_context {
  const scope& s;                    // builds gradient nodes, under "gradients/"
  const node& forward;               // the node being differentiated
  std::vector<output> inputs;        // its data inputs, in order
  std::vector<output> outputs;       // its outputs, in order
  std::vector<output> grad_outputs;  // d(sum ys)/d(outputs[i]); invalid: none flows in
};

// The gradient of an op whose outputs are its inputs, delayed or renamed (Identity,
// StopGradient's forward, a custom op that gates a value): each output's gradient goes
// to the input at the same position.
status pass_through_gradient(const gradient_context& ctx, std::vector<output>* grad_inputs);

// Adds to s's graph the symbolic partial derivatives of sum(ys) with respect to each x
// in xs, returning one output per x (invalid when no path leads from that x to any y:
// "no gradient", never an invented zero). grad_ys, when given, has one entry per y and
// holds the initial gradients (default OnesLike(y)); an invalid entry also means ones.
//
// Errors: an invalid y or x, a grad_y whose dtype differs from its y, an op on a path
// that has neither a gradient function nor a no_gradient() declaration (the message names
// the op and the node), and whatever a gradient function reports, prefixed with the node.
// REQUIRES: s.ok() (a failed scope is reported, not extended).
[[nodiscard]] result<std::vector<output>> add_gradients(const scope& s, const std::vector<output>& ys,
                                                        const std::vector<output>& xs,
                                                        const std::vector<output>& grad_ys = {});

// Helpers for gradient functions.

// The builder output for output `index` of node `n`.
output output_of(const node& n, int index);
// ctx.grad_outputs[i], or ZerosLike(ctx.outputs[i]) when no gradient flows into it.
output grad_or_zeros(const gradient_context& ctx, int i);
// A scalar constant of a numeric dtype.
output scalar_of(const scope& s, dtype type, double value);
// `grad`, whose shape is a broadcast of x's shape (x op other, Select, ...), summed over
// the broadcast axes and reshaped to x's shape, as TensorFlow does with
// BroadcastGradientArgs. Static (no Shape nodes) when both shapes are fully known.
output sum_to_shape_of(const scope& s, const output& grad, const output& x);
// Reshape(value, Shape(x)); the shape is a constant when x's shape is fully known.
output reshape_to_shape_of(const scope& s, const output& value, const output& x);
// The shape of x as an int32 vector: a constant when fully known, else Shape(x).
output shape_of(const scope& s, const output& x);

}  // namespace troupe::graph
