// Training graphs without running them: the variable and queue op schemas (attrs, shape
// inference from the producing VarHandleOp / queue, the errors), add_gradients stopping
// at resource handles, make_variable and initializers, the layers of graph/nn.h, and
// train::minimize (the nodes, slots and names it creates, skipped and unreachable
// variables, sparse updates).
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "graph/attr.h"
#include "graph/gradients.h"
#include "graph/initializers.h"
#include "graph/nn.h"
#include "graph/ops.h"
#include "graph/train.h"
#include "graph/variables.h"

using namespace troupe;
using graph::attr_value;
using graph::operation;
using graph::output;
using graph::scope;
using graph::variable;

namespace {

output var_handle(const scope& s, const std::string& name, dtype type, const partial_shape& shape) {
  return s.with_name(name)
      .add("VarHandleOp", {}, {{"dtype", attr_value(type)}, {"shape", attr_value(shape)}, {"shared_name", attr_value(name)}})
      .out();
}

output read(const scope& s, const output& handle, dtype type) {
  return s.add("ReadVariableOp", {handle}, {{"dtype", attr_value(type)}}).out();
}

// The error a scope recorded, with its message containing every part.
void require_error(const scope& s, std::vector<std::string> parts) {
  REQUIRE_FALSE(s.ok());
  INFO("error: " << s.get_status());
  for (const auto& p : parts) CHECK(s.get_status().message().find(p) != std::string::npos);
}

const graph::node& node_of(const scope& s, const std::string& name) {
  const graph::node* n = s.current_graph().find(name);
  INFO("node " << name);
  REQUIRE(n != nullptr);
  return *n;
}

bool has_node(const scope& s, const std::string& name) { return s.current_graph().find(name) != nullptr; }

std::vector<std::string> nodes_of_op(const scope& s, const std::string& op) {
  std::vector<std::string> names;
  const auto& g = s.current_graph();
  for (int id = 0; id < g.num_nodes(); ++id) {
    if (g.get(id).op_name() == op) names.push_back(g.get(id).name());
  }
  return names;
}

std::set<std::string> control_inputs(const scope& s, const std::string& name) {
  std::set<std::string> out;
  const auto& g = s.current_graph();
  for (int id : node_of(s, name).control_inputs) out.insert(g.get(id).name());
  return out;
}

std::vector<std::string> names(const std::vector<variable>& vars) {
  std::vector<std::string> out;
  for (const auto& v : vars) out.push_back(v.name);
  return out;
}

}  // namespace

TEST_CASE("variable op schemas infer shapes from the VarHandleOp", "[train_graph]") {
  auto root = scope::new_root();
  output h = var_handle(root, "v", dtype::float32, partial_shape{4, 3});
  CHECK(h.type == dtype::resource);
  CHECK(h.shape == partial_shape::scalar());
  output value = read(root, h, dtype::float32);
  CHECK(value.shape == partial_shape({4, 3}));
  // Through Identity the producer is not a VarHandleOp: the shape is unknown.
  output through = read(root, ops::identity(root, h), dtype::float32);
  CHECK_FALSE(through.shape.known_rank());

  operation assign = root.add("AssignVariableOp", {h, ops::constant(root, tensor::zeros(dtype::float32, {4, 3}))});
  CHECK(assign.valid());
  CHECK(root.add("AssignAddVariableOp", {h, value}).valid());
  CHECK(root.add("AssignSubVariableOp", {h, value}).valid());
  CHECK(root.add("VarIsInitializedOp", {h}).out().shape == partial_shape::scalar());
  CHECK(root.add("DestroyResourceOp", {h}).valid());

  output ids = ops::placeholder(root.with_name("ids"), dtype::int32, {2, 5});
  output rows = root.add("ResourceGather", {h, ids}, {{"dtype", attr_value(dtype::float32)}}).out();
  CHECK(rows.shape == partial_shape({2, 5, 3}));
  CHECK(root.add("ResourceScatterAdd", {h, ids, ops::placeholder(root, dtype::float32, {2, 5, 3})}).valid());
  CHECK(root.add("ResourceScatterAdd", {h, ids, ops::scalar(root, 1.0f)}).valid());

  // batch_dims = 1: params [2, 6, 3], indices [2, 4] -> [2, 4, 3].
  output b = var_handle(root, "b", dtype::float64, partial_shape{2, 6, 3});
  output bi = ops::placeholder(root.with_name("bi"), dtype::int64, {2, 4});
  output brows = root.add("ResourceGather", {b, bi}, {{"dtype", attr_value(dtype::float64)}, {"batch_dims", attr_value(1)}}).out();
  CHECK(brows.shape == partial_shape({2, 4, 3}));

  output lr = ops::scalar(root, 0.1f);
  output grad = ops::placeholder(root, dtype::float32, {4, 3});
  CHECK(root.add("ResourceApplyGradientDescent", {h, lr, grad}).valid());
  output accum = var_handle(root, "accum", dtype::float32, partial_shape{4, 3});
  CHECK(root.add("ResourceApplyMomentum", {h, accum, lr, grad, lr}, {{"use_nesterov", attr_value(true)}}).valid());
  CHECK(root.add("ResourceApplyAdagrad", {h, accum, lr, grad}).valid());
  output m = var_handle(root, "m", dtype::float32, partial_shape{4, 3});
  CHECK(root.add("ResourceApplyAdam", {h, accum, m, lr, lr, lr, lr, lr, lr, grad}).valid());
  CHECK(root.add("ResourceApplyRMSProp", {h, accum, m, lr, lr, lr, lr, grad}).valid());
  REQUIRE(root.ok());

  // Every op is stateful; the graph validates as a whole (and from its GraphDef).
  auto g = root.to_graph();
  REQUIRE(g.ok());
  for (const char* op : {"VarHandleOp", "ReadVariableOp", "AssignVariableOp", "ResourceGather",
                         "ResourceScatterAdd", "ResourceApplyAdam", "DestroyResourceOp"}) {
    INFO(op);
    CHECK(g->registry().find(op)->is_stateful);
  }
  // Defaults filled in as TensorFlow's.
  const auto& attrs = node_of(root, "v").def.attr();
  CHECK(attrs.at("container").s().empty());
  CHECK(attrs.at("allowed_devices").list().s_size() == 0);
  CHECK(node_of(root, rows.node).def.attr().at("validate_indices").b());
  CHECK_FALSE(node_of(root, assign.node).def.attr().at("validate_shape").b());
}

TEST_CASE("variable op schemas report mismatches against the variable", "[train_graph]") {
  auto build = [](const std::function<void(const scope&, const output&)>& f) {
    auto root = scope::new_root();
    output h = var_handle(root, "v", dtype::float32, partial_shape{4, 3});
    f(root, h);
    return root;
  };
  require_error(build([](const scope& s, const output& h) { read(s, h, dtype::float64); }),
                {"ReadVariableOp", "reads variable 'v' of dtype float as double"});
  require_error(build([](const scope& s, const output& h) {
                  s.add("AssignVariableOp", {h, ops::constant(s, tensor::zeros(dtype::float32, {3, 4}))});
                }),
                {"AssignVariableOp", "[3,4]", "variable 'v'", "[4,3]"});
  require_error(build([](const scope& s, const output& h) {
                  s.add("AssignAddVariableOp", {h, ops::scalar(s, 1.0)});
                }),
                {"assigns to variable 'v' of dtype float as double"});
  require_error(build([](const scope& s, const output& h) {
                  s.add("ResourceScatterAdd", {h, ops::placeholder(s, dtype::int32, {2}),
                                               ops::placeholder(s, dtype::float32, {2, 4})});
                }),
                {"updates have shape [2,4]", "need [2,3]"});
  require_error(build([](const scope& s, const output& h) {
                  s.add("ResourceApplyGradientDescent",
                        {h, ops::scalar(s, 0.1f), ops::placeholder(s, dtype::float32, {4, 4})});
                }),
                {"ResourceApplyGradientDescent", "grad has shape [4,4]", "variable 'v'", "[4,3]"});
  require_error(build([](const scope& s, const output& h) {
                  s.add("ResourceApplyGradientDescent",
                        {h, ops::constant(s, tensor::from_vector<float>({0.1f, 0.2f})),
                         ops::placeholder(s, dtype::float32, {4, 3})});
                }),
                {"input 1 must have rank 0"});
  require_error(build([](const scope& s, const output& h) {
                  s.add("ResourceGather", {h, ops::placeholder(s, dtype::int32, {2})},
                        {{"dtype", attr_value(dtype::float32)}, {"batch_dims", attr_value(2)}});
                }),
                {"batch_dims 2"});
  require_error(build([](const scope& s, const output& h) {
                  s.add("ResourceApplyAdam", {h, h, h, ops::scalar(s, 1.0), ops::scalar(s, 1.0),
                                              ops::scalar(s, 1.0), ops::scalar(s, 1.0), ops::scalar(s, 1.0),
                                              ops::scalar(s, 1.0), ops::placeholder(s, dtype::float64)});
                }),
                {"updates variable 'v' of dtype float as double"});
}

TEST_CASE("queue op schemas", "[train_graph]") {
  auto queue = [](const scope& s, const char* op, std::vector<dtype> types, std::vector<partial_shape> shapes,
                  std::map<std::string, tf::AttrValue> extra = {}) {
    extra["component_types"] = attr_value(types);
    extra["shapes"] = attr_value(shapes);
    return s.with_name("q").add(op, {}, extra).out();
  };
  auto root = scope::new_root();
  output q = queue(root, "FIFOQueueV2", {dtype::float32, dtype::int64}, {{28, 28}, partial_shape::scalar()},
                   {{"capacity", attr_value(100)}});
  CHECK(q.type == dtype::resource);
  CHECK(node_of(root, "q").def.attr().at("shared_name").s().empty());
  tf::AttrValue types = attr_value(std::vector<dtype>{dtype::float32, dtype::int64});
  operation one = root.add("QueueDequeueV2", {q}, {{"component_types", types}});
  CHECK(one.out(0).shape == partial_shape({28, 28}));
  CHECK(one.out(1).shape == partial_shape::scalar());
  operation many = root.add("QueueDequeueManyV2", {q, ops::scalar<std::int32_t>(root, 32)}, {{"component_types", types}});
  CHECK(many.out(0).shape == partial_shape({32, 28, 28}));
  CHECK(many.out(1).shape == partial_shape({32}));
  operation fed_n = root.add("QueueDequeueManyV2", {q, ops::placeholder(root, dtype::int32)}, {{"component_types", types}});
  CHECK(fed_n.out(0).shape == partial_shape({-1, 28, 28}));
  operation up_to = root.add("QueueDequeueUpToV2", {q, ops::scalar<std::int32_t>(root, 8)}, {{"component_types", types}});
  CHECK(up_to.out(1).shape == partial_shape({-1}));
  CHECK(root.add("QueueEnqueueV2", {q, {ops::placeholder(root, dtype::float32, {28, 28}), ops::scalar<std::int64_t>(root, 3)}}).valid());
  CHECK(root.add("QueueEnqueueManyV2", {q, {ops::placeholder(root, dtype::float32, {-1, 28, 28}),
                                            ops::placeholder(root, dtype::int64, {-1})}}).valid());
  CHECK(root.add("QueueSizeV2", {q}).out().shape == partial_shape::scalar());
  CHECK(root.add("QueueCloseV2", {q}, {{"cancel_pending_enqueues", attr_value(true)}}).valid());
  // A handle the graph cannot trace: unknown shapes.
  operation unknown = root.add("QueueDequeueV2", {ops::identity(root, q)}, {{"component_types", types}});
  CHECK_FALSE(unknown.out(0).shape.known_rank());
  // Defaults.
  output shuffle = queue(root, "RandomShuffleQueueV2", {dtype::float32}, {}, {{"capacity", attr_value(10)}, {"min_after_dequeue", attr_value(5)}});
  CHECK(node_of(root, shuffle.node).def.attr().at("seed2").i() == 0);
  output padding = queue(root, "PaddingFIFOQueueV2", {dtype::int32}, {{-1}});
  operation padded = root.add("QueueDequeueManyV2", {padding, ops::scalar<std::int32_t>(root, 4)},
                              {{"component_types", attr_value(std::vector<dtype>{dtype::int32})}});
  CHECK(padded.out(0).shape == partial_shape({4, -1}));
  REQUIRE(root.ok());
  REQUIRE(root.to_graph().ok());

  SECTION("errors") {
    auto s = scope::new_root();
    SECTION("enqueue types") {
      output fq = queue(s, "FIFOQueueV2", {dtype::float32}, {{2}});
      s.add("QueueEnqueueV2", {fq, {ops::placeholder(s, dtype::int32, {2})}});
      require_error(s, {"enqueues components of types [int32]", "queue 'q'", "[float]"});
    }
    SECTION("enqueue shapes") {
      output fq = queue(s, "FIFOQueueV2", {dtype::float32}, {{2}});
      s.add("QueueEnqueueManyV2", {fq, {ops::placeholder(s, dtype::float32, {5, 3})}});
      require_error(s, {"component 0 has shape [5,3]", "queue 'q' holds [2]"});
    }
    SECTION("dequeue types") {
      output fq = queue(s, "FIFOQueueV2", {dtype::float32}, {});
      s.add("QueueDequeueV2", {fq}, {{"component_types", attr_value(std::vector<dtype>{dtype::float64})}});
      require_error(s, {"dequeues component types [double]", "[float]"});
    }
    SECTION("padding queue needs shapes") {
      queue(s, "PaddingFIFOQueueV2", {dtype::float32}, {});
      require_error(s, {"1 component type(s) but 0 shape(s)"});
    }
    SECTION("FIFO shapes fully defined") {
      queue(s, "FIFOQueueV2", {dtype::float32}, {{-1, 2}});
      require_error(s, {"not fully defined", "PaddingFIFOQueueV2"});
    }
    SECTION("min_after_dequeue below capacity") {
      queue(s, "RandomShuffleQueueV2", {dtype::float32}, {}, {{"capacity", attr_value(4)}, {"min_after_dequeue", attr_value(4)}});
      require_error(s, {"min_after_dequeue 4 must be < capacity 4"});
    }
  }
}

TEST_CASE("add_gradients stops at resource handles", "[train_graph]") {
  auto root = scope::new_root();
  output h = var_handle(root, "v", dtype::float64, partial_shape{3});
  output value = read(root, h, dtype::float64);
  output rows = root.add("ResourceGather", {h, ops::constant(root, tensor::from_vector<std::int32_t>({0, 2}))},
                         {{"dtype", attr_value(dtype::float64)}}).out();
  output loss = ops::add(root, ops::sum(root, ops::square(root, value), ops::scalar<std::int32_t>(root, 0)),
                         ops::sum(root, rows, ops::scalar<std::int32_t>(root, 0)));
  auto grads = graph::add_gradients(root, {loss}, {value, rows, h});
  REQUIRE(grads.ok());
  CHECK((*grads)[0].valid());
  CHECK((*grads)[1].valid());
  CHECK((*grads)[0].shape == partial_shape({3}));
  CHECK_FALSE((*grads)[2].valid());  // a handle gets no gradient, and no error
  auto bad = graph::add_gradients(root, {h}, {value});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message().find("resource handle") != std::string::npos);
  REQUIRE(root.to_graph().ok());
}

TEST_CASE("make_variable builds handle, initializer and read", "[train_graph]") {
  auto root = scope::new_root();
  variable w = graph::make_variable(root.sub("layer"), "w", {2, 3}, dtype::float32,
                                    init::glorot_uniform_initializer(), 5);
  REQUIRE(w.valid());
  CHECK(w.name == "layer/w");
  CHECK(w.value.node == "layer/w/Read/ReadVariableOp");
  CHECK(w.initializer.node == "layer/w/Assign");
  CHECK(w.value.shape == partial_shape({2, 3}));
  CHECK(node_of(root, "layer/w").def.attr().at("shared_name").s() == "layer/w");
  CHECK(nodes_of_op(root, "RandomUniform") == std::vector<std::string>{"layer/w/Initializer/RandomUniform"});

  // The same name again: a new variable, its shared_name following its unique name.
  variable w2 = graph::make_variable(root.sub("layer"), "w", {2, 3}, dtype::float32,
                                     init::glorot_uniform_initializer(), 5);
  REQUIRE(w2.valid());
  CHECK(w2.name == "layer/w_1");
  CHECK(node_of(root, "layer/w_1").def.attr().at("shared_name").s() == "layer/w_1");
  CHECK(w2.initializer.node == "layer/w_1/Assign");
  // Seeds differ per variable, and are a function of (seed, name).
  auto seed2 = [&](const std::string& n) { return node_of(root, n).def.attr().at("seed2").i(); };
  CHECK(seed2("layer/w/Initializer/RandomUniform") == graph::variable_seed(5, "layer/w"));
  CHECK(seed2("layer/w_1/Initializer/RandomUniform") == graph::variable_seed(5, "layer/w_1"));
  CHECK(seed2("layer/w/Initializer/RandomUniform") != seed2("layer/w_1/Initializer/RandomUniform"));
  CHECK(node_of(root, "layer/w/Initializer/RandomUniform").def.attr().at("seed").i() == init::k_graph_seed);

  variable b = graph::make_variable(root, "b", {3}, dtype::float32, init::zeros(root, {3}, dtype::float32));
  REQUIRE(b.valid());
  operation init_op = graph::global_variables_initializer(root, std::vector<variable>{w, w2, b});
  CHECK(init_op.node == "init");
  CHECK(control_inputs(root, "init") == std::set<std::string>{"layer/w/Assign", "layer/w_1/Assign", "b/Assign"});
  REQUIRE(root.to_graph().ok());

  // Built twice, the graph is the same (deterministic seeds).
  auto again = scope::new_root();
  graph::make_variable(again.sub("layer"), "w", {2, 3}, dtype::float32, init::glorot_uniform_initializer(), 5);
  graph::make_variable(again.sub("layer"), "w", {2, 3}, dtype::float32, init::glorot_uniform_initializer(), 5);
  CHECK(node_of(again, "layer/w_1/Initializer/RandomUniform").def.attr().at("seed2").i() ==
        seed2("layer/w_1/Initializer/RandomUniform"));

  SECTION("a dtype mismatch is recorded") {
    auto s = scope::new_root();
    variable v = graph::make_variable(s, "v", {3}, dtype::float32, init::zeros(s, {3}, dtype::float64));
    CHECK_FALSE(v.valid());
    require_error(s, {"variable 'v'", "float", "initial value", "double"});
  }
  SECTION("a shape mismatch is recorded") {
    auto s = scope::new_root();
    graph::make_variable(s, "v", {3}, dtype::float32, init::zeros(s, {4}, dtype::float32));
    require_error(s, {"v/Assign", "[4]", "[3]"});
  }
}

TEST_CASE("initializers", "[train_graph]") {
  auto root = scope::new_root();
  CHECK(init::fans({}) == std::pair{1.0, 1.0});
  CHECK(init::fans({7}) == std::pair{7.0, 7.0});
  CHECK(init::fans({3, 5}) == std::pair{3.0, 5.0});
  CHECK(init::fans({2, 2, 3, 5}) == std::pair{12.0, 20.0});
  CHECK(init::glorot_uniform(root, {3, 5}, dtype::float32, 1).shape == partial_shape({3, 5}));
  CHECK(init::he_normal(root, {3, 3, 2, 4}, dtype::float64, 1).shape == partial_shape({3, 3, 2, 4}));
  CHECK(init::truncated_normal(root, {6}, dtype::float32, 0.1, 1).shape == partial_shape({6}));
  CHECK(init::random_normal(root, {6}, dtype::float32, 0.1, 0).type == dtype::float32);
  CHECK(init::zeros(root, {2, 2}, dtype::int64).type == dtype::int64);
  CHECK(init::constant(root, {}, dtype::float32, 3).shape == partial_shape::scalar());
  REQUIRE(root.ok());
  // Seed 0 is reproducible too: seed2 carries it, seed is the graph seed.
  for (const auto& name : nodes_of_op(root, "RandomStandardNormal")) {
    CHECK(node_of(root, name).def.attr().at("seed").i() == init::k_graph_seed);
    CHECK(node_of(root, name).def.attr().at("seed2").i() == 0);
  }
  auto s = scope::new_root();
  CHECK_FALSE(init::glorot_uniform(s, {2}, dtype::int32, 1).valid());
  require_error(s, {"glorot_uniform", "int32"});
}

TEST_CASE("layers build valid graphs with inferred shapes and record their variables", "[train_graph]") {
  auto root = scope::new_root();
  graph::variable_collection vars;
  output x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 8});
  output h = nn::dense(root, vars, x, 16, {.activation = ops::relu, .name = "hidden"});
  CHECK(h.shape == partial_shape({-1, 16}));
  CHECK(h.node == "hidden/Relu");
  h = nn::batch_norm(root, vars, h, /*training=*/true);
  CHECK(h.shape == partial_shape({-1, 16}));
  CHECK(vars.update_ops.size() == 2);
  output dropped = nn::dropout(root, h, 0.25, 9, true);
  CHECK(dropped.shape == partial_shape({-1, 16}));
  CHECK(nn::dropout(root, h, 0.25, 9, false).node == h.node);
  output logits = nn::dense(root, vars, dropped, 4, {.name = "logits"});
  CHECK(logits.shape == partial_shape({-1, 4}));
  CHECK(names(vars.trainable) == std::vector<std::string>{"hidden/kernel", "hidden/bias", "batch_norm/gamma",
                                                          "batch_norm/beta", "logits/kernel", "logits/bias"});
  CHECK(vars.global.size() == 8);  // + moving_mean, moving_variance
  CHECK(has_node(root, "batch_norm/moving_mean"));

  output images = ops::placeholder(root.with_name("images"), dtype::float32, {-1, 28, 28, 3});
  output c = nn::conv2d(root, vars, images, 8, {.kernel_height = 5, .kernel_width = 5, .activation = ops::relu});
  CHECK(c.shape == partial_shape({-1, 28, 28, 8}));
  CHECK(vars.trainable[6].shape == tensor_shape({5, 5, 3, 8}));
  output p = nn::max_pool(root, c);
  CHECK(p.shape == partial_shape({-1, 14, 14, 8}));
  CHECK(nn::avg_pool(root, p, 2, 2, "SAME").shape == partial_shape({-1, 7, 7, 8}));
  output bn4 = nn::batch_norm(root, vars, p, false, {.name = "bn4"});
  CHECK(bn4.shape == partial_shape({-1, 14, 14, 8}));
  CHECK(vars.update_ops.size() == 2);  // inference adds none

  std::vector<output> steps;
  for (int t = 0; t < 3; ++t) steps.push_back(ops::placeholder(root.with_name("step" + std::to_string(t)), dtype::float32, {2, 5}));
  nn::lstm_result r = nn::lstm(root, vars, steps, 6);
  REQUIRE(r.outputs.size() == 3);
  CHECK(r.outputs[2].shape == partial_shape({2, 6}));
  CHECK(r.final_state.c.shape == partial_shape({2, 6}));
  CHECK(r.weights.kernel.shape == tensor_shape({11, 24}));
  CHECK(nodes_of_op(root, "Split").size() == 3);  // one cell per step, one set of weights
  CHECK(has_node(root, "lstm/kernel"));
  CHECK_FALSE(has_node(root, "lstm/kernel_1"));

  auto shards = nn::make_embedding(root, vars, 10, 4, 3, dtype::float32);
  REQUIRE(shards.size() == 3);
  CHECK(shards[0].shape == tensor_shape({4, 4}));
  CHECK(shards[2].shape == tensor_shape({3, 4}));
  CHECK(shards[1].name == "embedding/part_1");
  output ids = ops::placeholder(root.with_name("ids"), dtype::int64, {2, 7});
  output emb = nn::embedding_lookup(root, shards, ids, "mod");
  CHECK(emb.shape == partial_shape({2, 7, 4}));
  output emb_div = nn::embedding_lookup(root, shards, ops::placeholder(root, dtype::int32), "div", "lookup_div");
  CHECK(emb_div.type == dtype::float32);
  CHECK(nn::embedding_lookup(root, {shards[0]}, ids).shape == partial_shape({2, 7, 4}));
  REQUIRE(root.ok());
  REQUIRE(root.to_graph().ok());

  SECTION("errors name the layer") {
    auto s = scope::new_root();
    graph::variable_collection v;
    SECTION("dense needs a known input size") {
      nn::dense(s, v, ops::placeholder(s, dtype::float32, {2, -1}), 3);
      require_error(s, {"dense", "dimension 1", "must be known"});
    }
    SECTION("dropout rate") {
      nn::dropout(s, ops::placeholder(s, dtype::float32), 1.0, 0, true);
      require_error(s, {"dropout", "[0, 1)"});
    }
    SECTION("partition strategy") {
      auto t = nn::make_embedding(s, v, 4, 2, 2, dtype::float32);
      nn::embedding_lookup(s, t, ops::placeholder(s, dtype::int32), "hash");
      require_error(s, {"partition_strategy", "'mod' or 'div'"});
    }
  }
}

TEST_CASE("minimize creates slots, updates and the train op", "[train_graph]") {
  struct expectation {
    train::optimizer opt;
    std::string apply_op;
    std::vector<std::string> slot_suffixes;
  };
  std::vector<expectation> table = {
      {train::gradient_descent(0.1), "ResourceApplyGradientDescent", {}},
      {train::momentum(0.1, 0.9, true), "ResourceApplyMomentum", {"Momentum"}},
      {train::adagrad(0.1), "ResourceApplyAdagrad", {"Adagrad"}},
      {train::adam(), "ResourceApplyAdam", {"Adam", "Adam_1"}},
      {train::rms_prop(0.01), "ResourceApplyRMSProp", {"RMSProp", "RMSProp_1"}},
  };
  for (const auto& e : table) {
    const std::string opt_name = e.opt.name();
    INFO(opt_name);
    auto root = scope::new_root();
    graph::variable_collection vars;
    output x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 3});
    output y = nn::dense(root, vars, x, 2);
    // A trainable variable the loss does not use is skipped.
    variable unused = graph::make_variable(root, "unused", {2}, dtype::float32, init::zeros_initializer());
    vars.add(unused);
    output loss = ops::mean(root, ops::square(root, y), ops::constant(root, tensor::from_vector<std::int32_t>({0, 1})));
    variable step = train::make_global_step(root, vars);
    REQUIRE(step.valid());
    CHECK(step.type == dtype::int64);
    const std::size_t globals_before = vars.global.size();
    auto train_op = train::minimize(root, e.opt, loss, vars, step);
    if (!train_op.ok()) FAIL(train_op.error());
    CHECK(train_op->node == opt_name);

    auto applies = nodes_of_op(root, e.apply_op);
    std::sort(applies.begin(), applies.end());
    CHECK(applies == std::vector<std::string>{opt_name + "/update_dense/bias/" + e.apply_op,
                                              opt_name + "/update_dense/kernel/" + e.apply_op});
    for (const char* v : {"dense/kernel", "dense/bias"}) {
      for (const auto& suffix : e.slot_suffixes) {
        const std::string slot = std::string(v) + "/" + suffix;
        INFO(slot);
        CHECK(has_node(root, slot));
        CHECK(has_node(root, slot + "/Initializer/Fill"));
        CHECK(has_node(root, slot + "/Assign"));
        CHECK(node_of(root, slot).def.attr().at("shared_name").s() == slot);
      }
    }
    CHECK_FALSE(has_node(root, "unused/" + (e.slot_suffixes.empty() ? std::string("x") : e.slot_suffixes[0])));
    std::size_t extra = 2 * e.slot_suffixes.size() + (opt_name == "Adam" ? 2 : 0);
    CHECK(vars.global.size() == globals_before + extra);
    CHECK(vars.trainable.size() == 3);  // slots are not trainable

    auto deps = control_inputs(root, opt_name);
    for (const auto& a : applies) CHECK(deps.count(a) == 1);
    CHECK(deps.count("global_step_update/AssignAddVariableOp") == 1);
    auto step_deps = control_inputs(root, "global_step_update/AssignAddVariableOp");
    for (const auto& a : applies) CHECK(step_deps.count(a) == 1);
    if (opt_name == "Adam") {
      CHECK(has_node(root, "beta1_power"));
      CHECK(has_node(root, "beta2_power"));
      CHECK(nodes_of_op(root, "AssignVariableOp").size() >= 2);
      CHECK(node_of(root, applies[0]).def.attr().at("use_nesterov").b() == false);
    }
    if (opt_name == "Momentum") CHECK(node_of(root, applies[0]).def.attr().at("use_nesterov").b());

    operation init_op = graph::global_variables_initializer(root, vars);
    CHECK(control_inputs(root, init_op.node).size() == vars.global.size());
    REQUIRE(root.ok());
    REQUIRE(root.to_graph().ok());
  }
}

TEST_CASE("minimize orders each update after the step's readers of its variable", "[train_graph]") {
  // Two layers: the second kernel is read by the forward MatMul and by the gradient
  // MatMul that passes the gradient to the first layer; the first layer's variables live
  // on another device, whose readers are not waited for.
  auto root = scope::new_root();
  graph::variable_collection vars;
  output x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 3});
  variable first = graph::make_variable(root.with_device("/job:ps/task:0"), "first/kernel", {3, 4},
                                        dtype::float32, init::zeros_initializer());
  vars.add(first);
  output h = ops::matmul(root, x, first.value);
  output y = nn::dense(root, vars, h, 2, {.name = "second"});
  output loss = ops::mean(root, ops::square(root, y), ops::constant(root, tensor::from_vector<std::int32_t>({0, 1})));
  auto train_op = train::minimize(root, train::gradient_descent(0.1), loss, vars);
  if (!train_op.ok()) FAIL(train_op.error());
  const auto& g = root.current_graph();
  // The same-device consumers of the ReadVariableOps of `var`.
  auto readers = [&](const std::string& var) {
    std::set<std::string> out;
    const graph::node& handle = node_of(root, var);
    for (int id = 0; id < g.num_nodes(); ++id) {
      const graph::node& n = g.get(id);
      if (n.op_name() != "ReadVariableOp" || n.inputs[0].node != handle.id) continue;
      for (auto [consumer, slot] : g.consumers(id)) {
        if (g.get(consumer).def.device() == handle.def.device()) out.insert(g.get(consumer).name());
      }
    }
    return out;
  };
  const std::set<std::string> second = readers("second/kernel");
  CHECK(second.size() >= 2);  // the forward MatMul and the gradient MatMul towards `first`
  CHECK(control_inputs(root, "GradientDescent/update_second/kernel/ResourceApplyGradientDescent") == second);
  // The update names them as its readers (the partitioner drops those edges where a
  // reader lands in another process).
  const graph::node& update = node_of(root, "GradientDescent/update_second/kernel/ResourceApplyGradientDescent");
  REQUIRE(update.def.attr().count(graph::k_in_place_after_attr) == 1);
  const auto& named = update.def.attr().at(graph::k_in_place_after_attr).list().s();
  CHECK(std::set<std::string>(named.begin(), named.end()) == second);
  CHECK(readers("first/kernel").empty());
  CHECK(control_inputs(root, "GradientDescent/update_first/kernel/ResourceApplyGradientDescent").empty());
  REQUIRE(root.to_graph().ok());
}

TEST_CASE("minimize does not wait for gradients nobody uses (the input batch's)", "[train_graph]") {
  // A dense layer on the fed batch: its MatMul's gradient function also builds the
  // gradient with respect to x, which reads the kernel. An update that waited for that
  // reader would make every step compute a gradient no one uses (25% of an MLP's step).
  auto root = scope::new_root();
  graph::variable_collection vars;
  output x = ops::placeholder(root.with_name("x"), dtype::float32, {8, 3});
  output y = nn::dense(root, vars, x, 2, {.name = "layer"});
  output loss = ops::mean(root, ops::square(root, y), ops::constant(root, tensor::from_vector<std::int32_t>({0, 1})));
  auto train_op = train::minimize(root, train::gradient_descent(0.1), loss, vars);
  if (!train_op.ok()) FAIL(train_op.error());
  const auto& g = root.current_graph();
  const std::string input_gradient = "gradients/layer/MatMul_grad/MatMul";  // dy . kernel^T: d loss / d x
  const graph::node& dx = node_of(root, input_gradient);
  CHECK(g.consumers(dx.id).empty());
  const std::set<std::string> deps = control_inputs(root, "GradientDescent/update_layer/kernel/ResourceApplyGradientDescent");
  CHECK(deps.count("layer/MatMul") == 1);
  CHECK(deps.count(input_gradient) == 0);
  REQUIRE(root.to_graph().ok());
}

TEST_CASE("minimize with fuse_matmul_updates updates a dense kernel from its product's factors", "[train_graph]") {
  // Two dense layers: each kernel's gradient is one MatMul (x^T dy), updated by
  // TroupeApplyGradientDescentMatMul; the biases keep ResourceApplyGradientDescent; a
  // kernel on another device than its gradient's MatMul is not fused.
  for (bool split_devices : {false, true}) {
    INFO((split_devices ? "second layer's kernel on /job:ps" : "one device"));
    auto root = scope::new_root();
    graph::variable_collection vars;
    output x = ops::placeholder(root.with_name("x"), dtype::float32, {8, 3});
    output h = nn::dense(root, vars, x, 4, {.name = "first"});
    output y;
    if (split_devices) {
      variable kernel = graph::make_variable(root.with_device("/job:ps/task:0"), "second/kernel", {4, 2},
                                             dtype::float32, init::zeros_initializer());
      vars.add(kernel);
      y = ops::matmul(root, h, kernel.value);
    } else {
      y = nn::dense(root, vars, h, 2, {.name = "second"});
    }
    output loss = ops::mean(root, ops::square(root, y), ops::constant(root, tensor::from_vector<std::int32_t>({0, 1})));
    train::optimizer sgd = train::gradient_descent(0.1);
    sgd.fuse_matmul_updates = true;
    auto train_op = train::minimize(root, sgd, loss, vars);
    if (!train_op.ok()) FAIL(train_op.error());
    auto fused = nodes_of_op(root, "TroupeApplyGradientDescentMatMul");
    std::sort(fused.begin(), fused.end());
    std::vector<std::string> want = {"GradientDescent/update_first/kernel/TroupeApplyGradientDescentMatMul"};
    if (!split_devices) want.push_back("GradientDescent/update_second/kernel/TroupeApplyGradientDescentMatMul");
    CHECK(fused == want);
    const graph::node& update = node_of(root, want[0]);
    CHECK(update.def.input(2) == "x");  // x^T dy
    CHECK(update.def.attr().at("transpose_a").b());
    CHECK_FALSE(update.def.attr().at("transpose_b").b());
    // Ordered after the same readers as the unfused update would be: the forward MatMul.
    CHECK(control_inputs(root, want[0]).count("first/MatMul") == 1);
    CHECK(has_node(root, "GradientDescent/update_first/bias/ResourceApplyGradientDescent"));
    CHECK(has_node(root, "GradientDescent/update_second/kernel/ResourceApplyGradientDescent") == split_devices);
    REQUIRE(root.to_graph().ok());
  }
}

TEST_CASE("minimize: sparse updates through ResourceGather", "[train_graph]") {
  for (bool gradient_descent : {true, false}) {
    INFO((gradient_descent ? "gradient descent" : "adagrad"));
    auto root = scope::new_root();
    graph::variable_collection vars;
    auto shards = nn::make_embedding(root, vars, 10, 4, 2, dtype::float32);
    output ids = ops::placeholder(root.with_name("ids"), dtype::int32, {-1});
    output emb = nn::embedding_lookup(root, shards, ids);
    output loss = ops::sum(root, emb, ops::constant(root, tensor::from_vector<std::int32_t>({0, 1})));
    auto train_op = train::minimize(root, gradient_descent ? train::gradient_descent(0.5) : train::adagrad(0.5), loss, vars);
    if (!train_op.ok()) FAIL(train_op.error());
    if (gradient_descent) {
      CHECK(nodes_of_op(root, "ResourceScatterAdd").size() == 2);
      CHECK(nodes_of_op(root, "ResourceApplyGradientDescent").empty());
    } else {
      CHECK(nodes_of_op(root, "ResourceScatterAdd").empty());
      CHECK(nodes_of_op(root, "UnsortedSegmentSum").size() == 2);
      CHECK(nodes_of_op(root, "ResourceApplyAdagrad").size() == 2);
    }
    CHECK(control_inputs(root, train_op->node).size() == 2);
    REQUIRE(root.to_graph().ok());
  }

  auto root = scope::new_root();
  graph::variable_collection vars;
  variable table = graph::make_variable(root, "table", {2, 5, 3}, dtype::float32, init::zeros_initializer());
  vars.add(table);
  output rows = root.add("ResourceGather", {table.handle, ops::placeholder(root, dtype::int32, {2, 4})},
                         {{"dtype", attr_value(dtype::float32)}, {"batch_dims", attr_value(1)}}).out();
  output loss = ops::sum(root, rows, ops::constant(root, tensor::from_vector<std::int32_t>({0, 1, 2})));
  auto train_op = train::minimize(root, train::adam(), loss, vars);
  REQUIRE_FALSE(train_op.ok());
  CHECK(train_op.error().error_code() == code::unimplemented);
  CHECK(train_op.error().message().find("variable 'table'") != std::string::npos);
  CHECK(train_op.error().message().find("batch_dims 1") != std::string::npos);
}

TEST_CASE("minimize errors", "[train_graph]") {
  auto root = scope::new_root();
  graph::variable_collection vars;
  variable a = graph::make_variable(root, "a", {2}, dtype::float32, init::zeros_initializer());
  variable b = graph::make_variable(root, "b", {2}, dtype::float32, init::zeros_initializer());
  vars.add(a);
  vars.add(b);
  output x = ops::placeholder(root.with_name("x"), dtype::float32, {2});
  output loss = ops::sum(root, ops::square(root, x), ops::scalar<std::int32_t>(root, 0));
  auto none = train::minimize(root, train::adam(), loss, vars);
  REQUIRE_FALSE(none.ok());
  CHECK(none.error().message().find("no gradient reaches the loss") != std::string::npos);
  CHECK(none.error().message().find("'a', 'b'") != std::string::npos);

  graph::variable_collection empty;
  auto nothing = train::minimize(root, train::adam(), loss, empty);
  REQUIRE_FALSE(nothing.ok());
  CHECK(nothing.error().message().find("no trainable variables") != std::string::npos);

  auto int_loss = train::minimize(root, train::adam(), ops::placeholder(root, dtype::int32), vars);
  REQUIRE_FALSE(int_loss.ok());
  CHECK(int_loss.error().message().find("int32") != std::string::npos);

  output y = ops::sum(root, ops::square(root, a.value), ops::scalar<std::int32_t>(root, 0));
  train::optimizer decayed = train::adam();
  decayed.decay_steps = 100;
  decayed.decay_rate = 0.5;
  auto no_step = train::minimize(root, decayed, y, vars);
  REQUIRE_FALSE(no_step.ok());
  CHECK(no_step.error().message() == "minimize: Adam's learning-rate decay needs a global step");
  decayed.decay_rate = 0;
  auto no_rate = train::minimize(root, decayed, y, vars);
  REQUIRE_FALSE(no_rate.ok());
  CHECK(no_rate.error().message().find("decay_rate > 0") != std::string::npos);
}

TEST_CASE("the example of doc/training.md builds", "[train_graph]") {
  auto root = graph::scope::new_root();
  graph::variable_collection vars;
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 784});
  auto labels = ops::placeholder(root.with_name("labels"), dtype::int64, {-1});
  auto h = nn::dense(root, vars, x, 128, {.activation = ops::relu, .name = "hidden"});
  h = nn::dropout(root, h, 0.2, /*seed=*/1, /*training=*/true);
  auto logits = nn::dense(root, vars, h, 10, {.name = "logits"});
  auto xent = ops::sparse_softmax_cross_entropy_with_logits(root, logits, labels);
  auto loss = ops::mean(root, xent.out(0), ops::scalar<int32_t>(root, 0));
  auto step = train::make_global_step(root, vars);
  auto train_op = train::minimize(root, train::adam(1e-3), loss, vars, step);
  REQUIRE(train_op.ok());
  auto init_op = graph::global_variables_initializer(root, vars);
  CHECK(init_op.node == "init");
  CHECK(train_op->node == "Adam");
  CHECK(vars.global.size() == 4 + 1 + 8 + 2);  // weights, step, Adam's m and v, beta powers
  REQUIRE(root.to_graph().ok());
}
