// placement: device names, cluster specs, the placer (requests, defaults, colocation,
// resources, kernels, soft placement, errors), replica_device_setter, the partitioner
// (Send/Recv pairs, control edges, feeds/fetches/targets) and DOT output. Everything runs
// without an actor system or kernels: kernel availability is a predicate.
#include <google/protobuf/util/message_differencer.h>

#include <catch2/catch.hpp>

#include "graph/attr.h"
#include "graph/ops.h"
#include "placement/cluster_spec.h"
#include "placement/device_name.h"
#include "placement/graph_dot.h"
#include "placement/partition.h"
#include "placement/placer.h"
#include "placement/replica_device_setter.h"

using namespace troupe;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using placement::device_name;

namespace {

constexpr const char* k_ps0 = "/job:ps/replica:0/task:0/device:CPU:0";
constexpr const char* k_ps1 = "/job:ps/replica:0/task:1/device:CPU:0";
constexpr const char* k_worker0 = "/job:worker/replica:0/task:0/device:CPU:0";
constexpr const char* k_worker0_gpu = "/job:worker/replica:0/task:0/device:GPU:0";
constexpr const char* k_worker1 = "/job:worker/replica:0/task:1/device:CPU:0";

// Resource-variable ops for these tests only (the real VarHandleOp family may or may not
// be registered yet): a handle producer, a read and an assignment.
void register_test_ops() {
  auto& ops = graph::op_registry::builtin();
  if (ops.find("TestVarHandleOp") != nullptr) return;
  graph::add_builtin_op(ops, graph::op_schema("TestVarHandleOp")
                                 .output("resource: resource")
                                 .attr("dtype: type")
                                 .attr("shape: shape = ?")
                                 .stateful()
                                 .shape_fn(graph::scalar_shape));
  graph::add_builtin_op(ops, graph::op_schema("TestQueueOp")
                                 .output("handle: resource")
                                 .stateful()
                                 .shape_fn(graph::scalar_shape));
  graph::add_builtin_op(ops, graph::op_schema("TestReadVariableOp")
                                 .input("resource: resource")
                                 .output("value: dtype")
                                 .attr("dtype: type")
                                 .stateful());
  graph::add_builtin_op(ops, graph::op_schema("TestAssignVariableOp")
                                 .input("resource: resource")
                                 .input("value: dtype")
                                 .attr("dtype: type")
                                 .stateful()
                                 .shape_fn(graph::no_outputs_shape));
}

result<placement::cluster_spec> test_cluster() {
  // ps: 2 tasks with a CPU; worker: task 0 with a CPU and a GPU, task 1 with a CPU.
  using placement::device_count;
  using placement::task_spec;
  return placement::cluster_spec::create(
      {{"worker", {task_spec{{device_count{"CPU", 1}, device_count{"gpu", 1}}}, task_spec{}}},
       {"ps", {task_spec{}, task_spec{}}}});
}

bool cpu_only(const graph::node&, const std::string& type) { return type == "CPU"; }
// Every op has a CPU kernel; MatMul and the variable ops also have a GPU one.
bool cpu_and_some_gpu(const graph::node& n, const std::string& type) {
  return type == "CPU" ||
         (type == "GPU" && (n.op_name() == "MatMul" || n.op_name().starts_with("TestVar") ||
                            n.op_name().starts_with("TestRead")));
}

tf::AttrValue classes(std::vector<std::string> names) { return graph::attr_value(names); }

graph::output variable(const graph::scope& s, const std::string& name) {
  return s.with_name(name)
      .add("TestVarHandleOp", {},
           {{"dtype", graph::attr_value(dtype::float32)},
            {"shape", graph::attr_value(partial_shape{2})}})
      .out(0);
}

graph::output read(const graph::scope& s, const std::string& name, graph::output var) {
  return s.with_name(name)
      .add("TestReadVariableOp", {var}, {{"dtype", graph::attr_value(dtype::float32)}})
      .out(0);
}

graph::operation assign(const graph::scope& s, const std::string& name, graph::output var,
                        graph::output value) {
  return s.with_name(name).add("TestAssignVariableOp", {var, value});
}

graph::output placeholder(const graph::scope& s, const std::string& name) {
  return ops::placeholder(s.with_name(name), dtype::float32, partial_shape{2});
}

struct placed_graph {
  graph::graph g;
  placement::placement placed;
  std::string device(const std::string& node) const { return placed.device_of(g.find(node)->id); }
};

graph::graph build(const graph::scope& root) {
  auto g = root.to_graph();
  INFO(g.to_status());
  REQUIRE(g.ok());
  return *std::move(g);
}

result<placement::placement> place(const graph::graph& g, placement::placer_options options = {},
                                   const placement::kernel_predicate& has_kernel = cpu_only) {
  auto cluster = test_cluster();
  REQUIRE(cluster.ok());
  return placement::place(g, *cluster, has_kernel, options);
}

placed_graph place_ok(const graph::scope& root, placement::placer_options options = {},
                      const placement::kernel_predicate& has_kernel = cpu_only) {
  graph::graph g = build(root);
  auto placed = place(g, options, has_kernel);
  INFO(placed.to_status());
  REQUIRE(placed.ok());
  return placed_graph{std::move(g), *std::move(placed)};
}

std::string place_error(const graph::scope& root, placement::placer_options options = {},
                        const placement::kernel_predicate& has_kernel = cpu_only) {
  graph::graph g = build(root);
  auto placed = place(g, options, has_kernel);
  return placed.ok() ? std::string("OK") : placed.error().message();
}

placement::placer_options with_default(std::string device, bool soft = false) {
  placement::placer_options options;
  options.default_device = std::move(device);
  options.allow_soft_placement = soft;
  return options;
}

std::string parse_error(std::string_view text) {
  auto d = placement::parse_device_name(text);
  return d.ok() ? std::string("OK") : d.error().message();
}

std::string canonical(std::string_view text) {
  auto d = placement::parse_device_name(text);
  INFO(text << ": " << d.to_status());
  REQUIRE(d.ok());
  return placement::to_string(*d);
}

device_name parsed(std::string_view text) {
  auto d = placement::parse_device_name(text);
  REQUIRE(d.ok());
  return *d;
}

}  // namespace

// --- device names -------------------------------------------------------------------

TEST_CASE("device names parse and print in canonical form", "[placement][device_name]") {
  auto full = placement::parse_device_name("/job:ps/replica:0/task:1/device:CPU:0");
  REQUIRE(full.ok());
  CHECK(full->job == "ps");
  CHECK(full->replica == 0);
  CHECK(full->task == 1);
  CHECK(full->type == "CPU");
  CHECK(full->id == 0);
  CHECK(placement::is_complete(*full));
  CHECK(placement::to_string(*full) == "/job:ps/replica:0/task:1/device:CPU:0");

  CHECK(canonical("/job:worker") == "/job:worker");
  CHECK(canonical("/device:CPU:*") == "/device:CPU:*");
  CHECK(canonical("/device:CPU") == "/device:CPU:*");
  CHECK(canonical("/cpu:0") == "/device:CPU:0");
  CHECK(canonical("/gpu:1") == "/device:GPU:1");
  CHECK(canonical("/job:ps/task:1/cpu:0") == "/job:ps/task:1/device:CPU:0");
  CHECK(canonical("/device:gpu:0") == "/device:GPU:0");
  CHECK(canonical("job:ps/task:3") == "/job:ps/task:3");
  CHECK(canonical("/task:1/job:ps") == "/job:ps/task:1");  // any order
  CHECK(canonical("/job:*/replica:*/task:*/device:CPU:*") == "/device:CPU:*");
  CHECK(canonical("") == "");
  CHECK(canonical("/") == "");
  CHECK(placement::parse_device_name("")->empty());
  CHECK_FALSE(placement::is_complete(parsed("/job:ps/task:1/cpu:0")));  // no replica
  CHECK_FALSE(placement::is_complete(parsed("/job:ps/replica:0/task:1/device:CPU:*")));
  CHECK(placement::task_prefix(*full) == "/job:ps/replica:0/task:1");
  CHECK(placement::to_string(placement::task_of(*full)) == "/job:ps/replica:0/task:1");
}

TEST_CASE("device name errors name the string, the component and the valid forms",
          "[placement][device_name]") {
  std::string e = parse_error("/job:ps/tsk:1");
  CHECK_THAT(e, Contains("'/job:ps/tsk:1'") && Contains("'tsk:1'") && Contains("not recognised") &&
                    Contains("/job:NAME") && Contains("/device:TYPE:ID"));
  CHECK_THAT(parse_error("/job:1ps"), Contains("'job:1ps'") && Contains("job name"));
  CHECK_THAT(parse_error("/job:"), Contains("job name"));
  CHECK_THAT(parse_error("/task:-1"), Contains("'task:-1'") && Contains("non-negative number"));
  CHECK_THAT(parse_error("/replica:x"), Contains("'replica:x'") && Contains("non-negative number"));
  CHECK_THAT(parse_error("/task:99999999999"), Contains("non-negative number"));
  CHECK_THAT(parse_error("/job:ps//task:0"), Contains("empty"));
  CHECK_THAT(parse_error("/job:ps/"), Contains("empty"));
  CHECK_THAT(parse_error("/job:ps/job:worker"), Contains("'job:worker'") && Contains("repeats"));
  CHECK_THAT(parse_error("/cpu:0/device:GPU:0"), Contains("repeats"));
  CHECK_THAT(parse_error("/device:CPU:0:1"), Contains("not recognised"));
  CHECK_THAT(parse_error("/device:C-PU:0"), Contains("device type"));
  CHECK_THAT(parse_error("/device:CPU:first"), Contains("device id"));
  CHECK_THAT(parse_error("/tpu:0"), Contains("not recognised"));

  auto incomplete = placement::parse_full_device_name("/job:ps/task:0", "device of node 'v'");
  REQUIRE_FALSE(incomplete.ok());
  CHECK_THAT(incomplete.error().message(),
             Contains("device of node 'v'") && Contains("missing replica, device type, device id"));
}

TEST_CASE("device names match partial patterns", "[placement][device_name]") {
  device_name full = parsed(k_ps1);
  CHECK(placement::matches(parsed(""), full));
  CHECK(placement::matches(parsed("/job:ps"), full));
  CHECK(placement::matches(parsed("/job:ps/task:1"), full));
  CHECK(placement::matches(parsed("/device:CPU:*"), full));
  CHECK(placement::matches(parsed("/cpu:0"), full));
  CHECK(placement::matches(full, full));
  CHECK_FALSE(placement::matches(parsed("/job:worker"), full));
  CHECK_FALSE(placement::matches(parsed("/job:ps/task:0"), full));
  CHECK_FALSE(placement::matches(parsed("/device:GPU:*"), full));
  // A field set in the pattern must be set in the name.
  CHECK_FALSE(placement::matches(parsed("/job:ps/task:1"), parsed("/job:ps")));
  CHECK(placement::matches(parsed("/job:ps"), parsed("/job:ps/task:1")));
}

TEST_CASE("device names merge, with strict, soft and override conflicts",
          "[placement][device_name]") {
  auto m = placement::merge(parsed("/job:ps"), parsed("/task:1/device:CPU:0"));
  REQUIRE(m.ok());
  CHECK(placement::to_string(*m) == "/job:ps/task:1/device:CPU:0");
  CHECK(placement::merge(parsed("/job:ps/task:1"), parsed("/job:ps/task:1")).ok());

  auto jobs = placement::merge(parsed("/job:ps"), parsed("/job:worker"));
  REQUIRE_FALSE(jobs.ok());
  CHECK_THAT(jobs.error().message(), Contains("'/job:ps'") && Contains("'/job:worker'") &&
                                         Contains("different jobs ('ps' and 'worker')"));
  auto tasks =
      placement::merge(parsed("/job:ps/task:0"), parsed("/task:1"), placement::merge_mode::soft);
  REQUIRE_FALSE(tasks.ok());  // soft placement never moves a node to another task
  CHECK_THAT(tasks.error().message(), Contains("different tasks (0 and 1)"));
  CHECK_THAT(placement::merge(parsed("/replica:0"), parsed("/replica:1")).error().message(),
             Contains("replicas"));
  auto types = placement::merge(parsed("/gpu:0"), parsed("/cpu:0"));
  REQUIRE_FALSE(types.ok());
  CHECK_THAT(types.error().message(), Contains("device types (GPU and CPU)"));
  CHECK_THAT(placement::merge(parsed("/cpu:0"), parsed("/cpu:1")).error().message(),
             Contains("device ids (0 and 1)"));

  auto soft_type =
      placement::merge(parsed("/job:ps/gpu:0"), parsed("/cpu:1"), placement::merge_mode::soft);
  REQUIRE(soft_type.ok());
  CHECK(placement::to_string(*soft_type) == "/job:ps");
  auto soft_id = placement::merge(parsed("/gpu:0"), parsed("/gpu:1"), placement::merge_mode::soft);
  REQUIRE(soft_id.ok());
  CHECK(placement::to_string(*soft_id) == "/device:GPU:*");

  auto over = placement::merge(parsed("/job:ps/task:0/cpu:0"), parsed("/job:worker/gpu:1"),
                               placement::merge_mode::override);
  REQUIRE(over.ok());
  CHECK(placement::to_string(*over) == "/job:worker/task:0/device:GPU:1");

  CHECK(placement::to_string(placement::fill_missing(parsed("/job:ps"), parsed(k_worker0))) ==
        k_ps0);
}

// --- cluster spec -------------------------------------------------------------------

TEST_CASE("a cluster spec lists its devices and tasks", "[placement][cluster]") {
  auto cluster = placement::cluster_spec::from_task_counts({{"worker", 2}, {"ps", 1}});
  REQUIRE(cluster.ok());
  CHECK(cluster->job_names() == std::vector<std::string>{"ps", "worker"});
  CHECK(cluster->device_names() == std::vector<std::string>{k_ps0, k_worker0, k_worker1});
  CHECK(cluster->task_names() == std::vector<std::string>{"/job:ps/replica:0/task:0",
                                                          "/job:worker/replica:0/task:0",
                                                          "/job:worker/replica:0/task:1"});
  CHECK(*cluster->num_tasks("worker") == 2);
  CHECK_THAT(cluster->num_tasks("chief").error().message(),
             Contains("no job 'chief'") && Contains("'ps', 'worker'"));
  REQUIRE(cluster->task("worker", 1).ok());
  CHECK_THAT(cluster->task("worker", 2).error().message(),
             Contains("no task 2") && Contains("0..1"));
  CHECK(cluster->has_device(parsed(k_worker1)));
  CHECK_FALSE(cluster->has_device(parsed("/job:worker/replica:0/task:2/device:CPU:0")));
  CHECK_FALSE(cluster->has_device(parsed("/job:worker")));

  auto gpus = test_cluster();
  REQUIRE(gpus.ok());
  CHECK(gpus->device_names() ==
        std::vector<std::string>{k_ps0, k_ps1, k_worker0, k_worker0_gpu, k_worker1});

  CHECK(placement::cluster_spec::local().device_names() ==
        std::vector<std::string>{"/job:localhost/replica:0/task:0/device:CPU:0"});
}

TEST_CASE("cluster spec errors say what is wrong", "[placement][cluster]") {
  using placement::cluster_spec;
  using placement::device_count;
  using placement::task_spec;
  auto error = [](result<cluster_spec> c) {
    return c.ok() ? std::string("OK") : c.error().message();
  };
  CHECK_THAT(error(cluster_spec::from_task_counts({{"", 1}})), Contains("empty name"));
  CHECK_THAT(error(cluster_spec::from_task_counts({{"ps", 0}})), Contains("'ps' has 0 tasks"));
  CHECK_THAT(error(cluster_spec::from_task_counts({{"ps", -2}})), Contains("'ps' has -2 tasks"));
  CHECK_THAT(error(cluster_spec::from_task_counts({{"my-job", 1}})),
             Contains("'my-job' is not valid"));
  CHECK_THAT(error(cluster_spec::from_task_counts({})), Contains("at least one job"));
  CHECK_THAT(error(cluster_spec::create({{"ps", {task_spec{}}}, {"ps", {task_spec{}}}})),
             Contains("listed twice"));
  CHECK_THAT(error(cluster_spec::create({{"ps", {task_spec{{}}}}})),
             Contains("task 0 has no devices"));
  CHECK_THAT(error(cluster_spec::create({{"ps", {task_spec{{device_count{"GPU", 0}}}}}})),
             Contains("0 devices of type GPU"));
  CHECK_THAT(error(cluster_spec::create(
                 {{"ps", {task_spec{{device_count{"cpu", 1}, device_count{"CPU", 2}}}}}})),
             Contains("CPU twice"));
  CHECK_THAT(error(cluster_spec::create({{"ps", {task_spec{{device_count{"", 1}}}}}})),
             Contains("device type"));
}

// --- placer -------------------------------------------------------------------------

TEST_CASE("the placer honours explicit, partial and default devices", "[placement][placer]") {
  auto root = graph::scope::new_root();
  auto x = placeholder(root, "x");
  ops::relu(root.with_name("explicit").with_device(k_ps1), x);
  ops::relu(root.with_name("partial").with_device("/job:ps/task:1"), x);
  ops::relu(root.with_name("job_only").with_device("/job:ps"), x);
  ops::relu(root.with_name("legacy").with_device("/job:worker/task:1/cpu:0"), x);
  ops::relu(root.with_name("gpu").with_device("/device:GPU:0"), x);
  ops::relu(root.with_name("free"), x);

  auto relu_on_gpu = [](const graph::node& n, const std::string& type) {
    return type == "CPU" || n.op_name() == "Relu";
  };
  auto p = place_ok(root, with_default("/job:worker/replica:0/task:0/device:CPU:0"), relu_on_gpu);
  CHECK(p.device("x") == k_worker0);
  CHECK(p.device("explicit") == k_ps1);
  CHECK(p.device("partial") == k_ps1);
  CHECK(p.device("job_only") == k_ps0);  // the default fills replica, task, type and id
  CHECK(p.device("legacy") == k_worker1);
  CHECK(p.device("gpu") == k_worker0_gpu);
  CHECK(p.device("free") == k_worker0);

  // A default naming only the task: on it a GPU goes before a CPU (TensorFlow's order),
  // for the nodes that have a GPU kernel.
  auto t = place_ok(root, with_default("/job:worker/replica:0/task:0"), relu_on_gpu);
  CHECK(t.device("free") == k_worker0_gpu);
  CHECK(t.device("x") == k_worker0);
  CHECK(t.device("legacy") == k_worker1);  // an explicit CPU stays a CPU

  // Without a default, an unconstrained node takes the first device that can run it.
  auto q = place_ok(root, {}, relu_on_gpu);
  CHECK(q.device("x") == k_ps0);
  CHECK(q.device("free") == k_ps0);
  CHECK(q.device("gpu") == k_worker0_gpu);

  // The default is a preference: a node its device cannot run goes elsewhere on its task.
  auto root2 = graph::scope::new_root();
  ops::relu(root2.with_name("r"), placeholder(root2, "x"));
  auto r = place_ok(root2, with_default(k_worker0_gpu), cpu_only);
  CHECK(r.device("x") == k_worker0);
  CHECK(r.device("r") == k_worker0);
}

TEST_CASE("a default device that is not in the cluster is only a preference",
          "[placement][placer]") {
  auto root = graph::scope::new_root();
  placeholder(root, "x");
  auto p = place_ok(root, with_default("/job:chief/task:0"));
  CHECK(p.device("x") == k_ps0);
  auto bad = place(build(root), with_default("/job:chief/tsk:0"));
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message(), Contains("default device") && Contains("'tsk:0'"));
}

TEST_CASE("colocation through _class is transitive and overrides the default",
          "[placement][placer]") {
  auto root = graph::scope::new_root();
  auto a = ops::relu(root.with_name("a").with_device("/job:ps/task:1"), placeholder(root, "x"));
  auto b = root.with_name("b").add("Identity", {a}, {{"_class", classes({"loc:@a"})}}).out(0);
  root.with_name("c").add("Neg", {b}, {{"_class", classes({"loc:@b"})}});
  // A label naming no node still groups the nodes that list it.
  root.with_name("d").add("Neg", {b}, {{"_class", classes({"loc:@shared", "other_class"})}});
  root.with_name("e")
      .with_device("/job:worker/task:1")
      .add("Neg", {b}, {{"_class", classes({"loc:@shared"})}});

  auto p = place_ok(root, with_default(k_worker0));
  CHECK(p.device("a") == k_ps1);
  CHECK(p.device("b") == k_ps1);
  CHECK(p.device("c") == k_ps1);
  CHECK(p.device("d") == k_worker1);
  CHECK(p.device("e") == k_worker1);
  CHECK(p.device("x") == k_worker0);

  auto groups = placement::colocation_groups(p.g);
  auto id = [&](const char* name) { return p.g.find(name)->id; };
  CHECK(std::find(groups.begin(), groups.end(), std::vector<int>{id("a"), id("b"), id("c")}) !=
        groups.end());
  CHECK(std::find(groups.begin(), groups.end(), std::vector<int>{id("d"), id("e")}) !=
        groups.end());
}

TEST_CASE("ops taking a resource run where the resource lives", "[placement][placer]") {
  register_test_ops();
  auto root = graph::scope::new_root();
  auto v = variable(root.with_device("/job:ps/task:1"), "v");
  auto value = read(root, "read", v);
  assign(root, "assign", v, ops::neg(root.with_name("update"), value));
  ops::identity(root.with_name("after"), value);

  auto p = place_ok(root, with_default(k_worker0));
  CHECK(p.device("v") == k_ps1);
  CHECK(p.device("read") == k_ps1);
  CHECK(p.device("assign") == k_ps1);
  CHECK(p.device("update") == k_worker0);  // a float input does not colocate
  CHECK(p.device("after") == k_worker0);

  // A kernel the variable lacks moves the whole group: only CPU has the variable ops.
  auto root2 = graph::scope::new_root();
  auto v2 = variable(root2, "v");
  read(root2, "read", v2);
  auto q = place_ok(root2, with_default(k_worker0_gpu),
                    [](const graph::node& n, const std::string& type) {
                      return type == "CPU" || n.op_name() == "TestReadVariableOp";
                    });
  CHECK(q.device("v") == k_worker0);
  CHECK(q.device("read") == k_worker0);
}

TEST_CASE("soft placement moves requests that cannot be met; without it they are errors",
          "[placement][placer]") {
  SECTION("a device type the task does not have") {
    auto root = graph::scope::new_root();
    ops::relu(root.with_name("r").with_device("/job:ps/task:1/device:GPU:0"),
              placeholder(root, "x"));
    CHECK_THAT(place_error(root, with_default(k_worker0)),
               Contains("'r' (Relu) requests device '/job:ps/task:1/device:GPU:0'") &&
                   Contains("no device of the cluster matches") && Contains(k_ps0) &&
                   Contains("allow_soft_placement"));
    CHECK(place_ok(root, with_default(k_worker0, true)).device("r") == k_ps1);  // same task
  }
  SECTION("a device whose type has no kernel for the op") {
    auto root = graph::scope::new_root();
    ops::relu(root.with_name("r").with_device("/job:worker/task:0/device:GPU:0"),
              placeholder(root, "x"));
    CHECK_THAT(place_error(root, with_default(k_worker0), cpu_and_some_gpu),
               Contains("'r' (Relu)") && Contains("no matching device can run it") &&
                   Contains("'r' (Relu) has no GPU kernel"));
    CHECK(place_ok(root, with_default(k_worker1, true), cpu_and_some_gpu).device("r") == k_worker0);
  }
  SECTION("a task that does not exist") {
    auto root = graph::scope::new_root();
    ops::relu(root.with_name("r").with_device("/job:worker/task:7"), placeholder(root, "x"));
    CHECK_THAT(place_error(root, with_default(k_worker0)),
               Contains("no device of the cluster matches"));
    CHECK(place_ok(root, with_default(k_worker1, true)).device("r") == k_worker1);
  }
  SECTION("colocated requests for different device types") {
    auto root = graph::scope::new_root();
    auto a = ops::relu(root.with_name("a").with_device("/device:GPU:0"), placeholder(root, "x"));
    root.with_name("b")
        .with_device("/device:CPU:0")
        .add("Neg", {a}, {{"_class", classes({"loc:@a"})}});
    CHECK_THAT(place_error(root, with_default(k_worker0), cpu_and_some_gpu),
               Contains("'a' (Relu)") && Contains("'b' (Neg)") && Contains("device types"));
    auto p = place_ok(root, with_default(k_worker1, true), cpu_and_some_gpu);
    CHECK(p.device("a") == k_worker1);
    CHECK(p.device("b") == k_worker1);
  }
}

TEST_CASE("unsatisfiable constraints name both nodes and why they are colocated",
          "[placement][placer]") {
  SECTION("colocated through _class, different tasks") {
    auto root = graph::scope::new_root();
    auto a = ops::relu(root.with_name("a").with_device("/job:ps/task:0"), placeholder(root, "x"));
    auto b = root.with_name("b").add("Identity", {a}, {{"_class", classes({"loc:@a"})}}).out(0);
    root.with_name("c")
        .with_device("/job:ps/task:1")
        .add("Neg", {b}, {{"_class", classes({"loc:@b"})}});
    for (bool soft : {false, true}) {
      std::string e = place_error(root, with_default(k_worker0, soft));
      CHECK_THAT(e, Contains("cannot place nodes 'a' (Relu) and 'c' (Neg) on one device") &&
                        Contains("'a' requests '/job:ps/task:0'") &&
                        Contains("'c' requests '/job:ps/task:1'") &&
                        Contains("different tasks (0 and 1)") &&
                        Contains("'b' has _class loc:@a; 'c' has _class loc:@b"));
    }
  }
  SECTION("a read requesting another task than its variable") {
    register_test_ops();
    auto root = graph::scope::new_root();
    auto v = variable(root.with_device("/job:ps/task:0"), "v");
    read(root.with_device("/job:worker"), "read", v);
    CHECK_THAT(place_error(root, with_default(k_worker0, true)),
               Contains("'v' (TestVarHandleOp) and 'read' (TestReadVariableOp)") &&
                   Contains("different jobs") &&
                   Contains("'read' takes resource input 0 from 'v'"));
  }
  SECTION("no device has a kernel") {
    auto root = graph::scope::new_root();
    ops::relu(root.with_name("r"), placeholder(root, "x"));
    CHECK_THAT(
        place_error(root, with_default(k_worker0, true),
                    [](const graph::node& n, const std::string&) { return n.op_name() != "Relu"; }),
        Contains("no device of the cluster can run node 'r' (Relu)") && Contains("no CPU kernel") &&
            Contains("no GPU kernel"));
  }
  SECTION("a malformed _class names the node") {
    auto root = graph::scope::new_root();
    root.with_name("n").add("Neg", {placeholder(root, "x")},
                            {{"_class", graph::attr_value("loc:@x")}});
    CHECK_THAT(place_error(root),
               Contains("node 'n' (Neg): attribute '_class' must be a list of strings"));
  }
  SECTION("a malformed request names the node") {
    auto root = graph::scope::new_root();
    ops::relu(root.with_name("r").with_device("/job:ps/tsk:0"), placeholder(root, "x"));
    CHECK_THAT(place_error(root),
               Contains("node 'r' (Relu) requests a device") && Contains("'tsk:0'"));
  }
}

TEST_CASE("the placer checks its device list and is deterministic", "[placement][placer]") {
  auto root = graph::scope::new_root();
  auto x = placeholder(root, "x");
  for (int i = 0; i < 20; ++i) ops::relu(root.with_device(i % 2 ? "/job:ps" : "/job:worker"), x);
  graph::graph g = build(root);
  auto devices = test_cluster()->device_names();
  auto a = placement::place(g, devices, cpu_only, with_default(k_worker1));
  auto b = placement::place(g, devices, cpu_only, with_default(k_worker1));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a == *b);

  auto error = [&](std::vector<std::string> list) {
    auto p = placement::place(g, list, cpu_only);
    return p.ok() ? std::string("OK") : p.error().message();
  };
  CHECK_THAT(error({}), Contains("at least one device"));
  CHECK_THAT(error({"/job:ps/task:0"}),
             Contains("not a complete device name") && Contains("missing replica"));
  CHECK_THAT(error({k_ps0, "/job:ps/replica:0/task:0/cpu:0"}), Contains("listed twice"));
}

// --- replica_device_setter ----------------------------------------------------------

TEST_CASE("replica_device_setter puts variables round-robin on ps tasks", "[placement][setter]") {
  register_test_ops();
  auto root = graph::scope::new_root();
  auto v0 = variable(root, "v0");
  auto v1 = variable(root, "v1");
  auto v2 = variable(root.with_device("/device:CPU:0"), "v2");
  auto pinned = variable(root.with_device("/job:worker/task:1"), "pinned");
  auto queue = root.with_name("queue").add("TestQueueOp", {});
  auto x = placeholder(root, "x");
  auto r0 = read(root, "r0", v0);
  auto y = ops::add(root.with_name("y"), r0, x);
  assign(root, "a1", v1, y);
  root.with_name("colocated").add("Neg", {y}, {{"_class", classes({"loc:@v2"})}});
  read(root, "r2", v2);
  read(root, "rp", pinned);
  auto def = root.to_graph_def();
  REQUIRE(def.ok());

  placement::replica_device_setter_options options;
  options.ps_tasks = 2;
  options.ps_ops = {"TestVarHandleOp"};
  options.worker_device = "/job:worker/task:0";
  REQUIRE(placement::replica_device_setter(&*def, options).ok());
  auto device = [&](const std::string& name) {
    for (const auto& nd : def->node()) {
      if (nd.name() == name) return nd.device();
    }
    return std::string("(missing)");
  };
  CHECK(device("v0") == "/job:ps/task:0");
  CHECK(device("v1") == "/job:ps/task:1");
  CHECK(device("v2") == "/job:ps/task:0/device:CPU:0");
  CHECK(device("pinned") == "/job:worker/task:1");
  CHECK(device("queue") == "/job:worker/task:0");  // queues are not variables
  CHECK(device("x") == "/job:worker/task:0");
  CHECK(device("y") == "/job:worker/task:0");
  CHECK(device("r0").empty());  // follows its variable in the placer
  CHECK(device("a1").empty());
  CHECK(device("colocated").empty());

  auto g = graph::graph::from_graph_def(*def);
  REQUIRE(g.ok());
  auto placed = place(*g, with_default(k_worker0));
  REQUIRE(placed.ok());
  auto at = [&](const char* name) { return placed->device_of(g->find(name)->id); };
  CHECK(at("r0") == k_ps0);
  CHECK(at("a1") == k_ps1);
  CHECK(at("r2") == k_ps0);
  CHECK(at("colocated") == k_ps0);
  CHECK(at("rp") == k_worker1);
  CHECK(at("y") == k_worker0);

  options.ps_tasks = -1;
  CHECK_THAT(placement::replica_device_setter(&*def, options).message(),
             Contains("ps_tasks is -1"));
}

// --- partitioner --------------------------------------------------------------------

namespace {

graph::endpoint endpoint_of(const graph::graph& g, const std::string& tensor) {
  auto e = g.resolve(tensor);
  REQUIRE(e.ok());
  return *e;
}

const tf::NodeDef* find_node(const tf::GraphDef& def, const std::string& name) {
  for (const auto& nd : def.node()) {
    if (nd.name() == name) return &nd;
  }
  return nullptr;
}

std::vector<const tf::NodeDef*> nodes_of_op(const tf::GraphDef& def, const std::string& op) {
  std::vector<const tf::NodeDef*> out;
  for (const auto& nd : def.node()) {
    if (nd.op() == op) out.push_back(&nd);
  }
  return out;
}

std::string string_attr(const tf::NodeDef& nd, const char* name) {
  std::string value;
  REQUIRE(graph::get_attr(nd, name, &value).ok());
  return value;
}

// Every partition must build into a valid graph with the registry (so _Send/_Recv
// schemas, attributes and types all check).
void require_valid(const placement::partitioned_graph& parts) {
  for (const auto& p : parts.partitions) {
    auto g = graph::graph::from_graph_def(p.graph_def);
    INFO(p.device << ": " << g.to_status());
    REQUIRE(g.ok());
    for (const auto& nd : p.graph_def.node()) CHECK(nd.device() == p.device);
    for (const auto& f : p.feeds) CHECK(g->resolve(f.tensor).ok());
    for (const auto& f : p.fetches) CHECK(g->resolve(f.tensor).ok());
    for (const auto& t : p.targets) CHECK(g->find(t.node) != nullptr);
  }
}

placement::step_spec step_of(std::vector<graph::endpoint> feeds,
                             std::vector<graph::endpoint> fetches = {},
                             std::vector<int> targets = {}) {
  placement::step_spec step;
  step.feeds = std::move(feeds);
  step.fetches = std::move(fetches);
  step.targets = std::move(targets);
  return step;
}

placement::placement assign_devices(const graph::graph& g,
                                    const std::map<std::string, std::string>& devices,
                                    const std::string& otherwise) {
  placement::placement p;
  for (int id = 0; id < g.num_nodes(); ++id) {
    auto it = devices.find(g.get(id).name());
    p.push_back(it == devices.end() ? otherwise : it->second);
  }
  return p;
}

}  // namespace

TEST_CASE("one tensor consumed by three nodes on another device crosses once",
          "[placement][partition]") {
  auto root = graph::scope::new_root();
  // (An Identity: a small Const itself would be copied to the worker, not sent.)
  auto a = ops::identity(root.with_name("a").with_device(k_ps0),
                         ops::constant(root.with_name("a_value").with_device(k_ps0), tensor::from_vector<float>({1, 2})));
  auto b = ops::relu(root.with_name("b"), a);
  auto c = ops::neg(root.with_name("c"), a);
  auto d = ops::square(root.with_name("d"), a);
  auto e = ops::add_n(root.with_name("e"), {b, c, d});
  auto p = place_ok(root, with_default(k_worker0));
  REQUIRE(p.device("a") == k_ps0);

  placement::partition_options options;
  options.incarnations[k_ps0] = 0x1234;
  options.incarnations[k_worker0] = 0x5678;
  auto parts =
      placement::partition_graph(p.g, p.placed, step_of({}, {endpoint_of(p.g, "e")}), options);
  INFO(parts.to_status());
  REQUIRE(parts.ok());
  require_valid(*parts);
  REQUIRE(parts->partitions.size() == 2);
  CHECK(parts->partitions[0].device == k_ps0);  // in device-name order
  CHECK(parts->partitions[1].device == k_worker0);

  REQUIRE(parts->transfers.size() == 1);
  const placement::transfer& t = parts->transfers[0];
  CHECK(t.key == placement::rendezvous_key{k_ps0, 0x1234, k_worker0, "a:0", 0x5678});
  CHECK(t.key.to_string() == std::string(k_ps0) + ";0000000000001234;" + k_worker0 + ";a:0;0:0");
  CHECK(t.type == dtype::float32);
  CHECK_FALSE(t.control);
  CHECK(t.send_node == "a/_send_0_to_worker_task0_CPU_0");
  CHECK(t.recv_node == "a/_recv_0_at_worker_task0_CPU_0");

  const auto& ps = *parts->find(k_ps0);
  const auto& worker = *parts->find(k_worker0);
  CHECK(ps.sends == std::vector<int>{0});
  CHECK(ps.recvs.empty());
  CHECK(worker.recvs == std::vector<int>{0});
  CHECK(ps.graph_def.node_size() == 3);      // a_value, a, its _Send
  CHECK(worker.graph_def.node_size() == 5);  // _Recv, b, c, d, e
  REQUIRE(nodes_of_op(ps.graph_def, "_Send").size() == 1);
  REQUIRE(nodes_of_op(worker.graph_def, "_Recv").size() == 1);

  const tf::NodeDef& send = *find_node(ps.graph_def, t.send_node);
  CHECK(send.input(0) == "a");
  CHECK(string_attr(send, "tensor_name") == "a:0");
  CHECK(string_attr(send, "send_device") == k_ps0);
  CHECK(string_attr(send, "recv_device") == k_worker0);
  std::int64_t incarnation = 0;
  REQUIRE(graph::get_attr(send, "send_device_incarnation", &incarnation).ok());
  CHECK(incarnation == 0x1234);
  REQUIRE(graph::get_attr(send, "recv_device_incarnation", &incarnation).ok());
  CHECK(incarnation == 0x5678);
  bool client_terminated = true;
  REQUIRE(graph::get_attr(send, "client_terminated", &client_terminated).ok());
  CHECK_FALSE(client_terminated);
  dtype type = dtype::invalid;
  REQUIRE(graph::get_attr(send, "T", &type).ok());
  CHECK(type == dtype::float32);

  const tf::NodeDef& recv = *find_node(worker.graph_def, t.recv_node);
  REQUIRE(graph::get_attr(recv, "tensor_type", &type).ok());
  CHECK(type == dtype::float32);
  CHECK(string_attr(recv, "tensor_name") == "a:0");
  for (const char* consumer : {"b", "c", "d"})
    CHECK(find_node(worker.graph_def, consumer)->input(0) == t.recv_node);
  auto worker_graph = graph::graph::from_graph_def(worker.graph_def);
  REQUIRE(worker_graph.ok());
  CHECK(worker_graph->find(t.recv_node)->output_shapes[0] == partial_shape{2});  // from `_shape`

  CHECK(worker.fetches == std::vector<placement::bound_tensor>{{0, "e:0"}});
  CHECK(ps.fetches.empty());

  // Deterministic.
  auto again =
      placement::partition_graph(p.g, p.placed, step_of({}, {endpoint_of(p.g, "e")}), options);
  REQUIRE(again.ok());
  for (std::size_t i = 0; i < parts->partitions.size(); ++i) {
    CHECK(google::protobuf::util::MessageDifferencer::Equals(parts->partitions[i].graph_def,
                                                             again->partitions[i].graph_def));
  }
}

TEST_CASE("a control edge across devices becomes a dummy tensor transfer",
          "[placement][partition]") {
  auto root = graph::scope::new_root();
  auto x = placeholder(root.with_device(k_ps1), "x");
  auto u = ops::relu(root.with_name("u").with_device(k_ps1), x);
  auto t = ops::no_op(root.with_name("t").with_device(k_worker1).with_control_dependencies(
      {graph::operation{u.node, {u}}}));
  auto t2 = ops::no_op(root.with_name("t2").with_device(k_worker1).with_control_dependencies(
      {graph::operation{u.node, {u}}}));
  // Something waits for t and t2 (a NoOp that nothing waits for takes no control
  // transfer: below).
  ops::no_op(root.with_name("end").with_device(k_worker1).with_control_dependencies({t, t2}));
  graph::graph g = build(root);
  placement::placement placed = assign_devices(g, {{"x", k_ps1}, {"u", k_ps1}}, k_worker1);

  auto parts = placement::partition_graph(
      g, placed, step_of({endpoint_of(g, "x")}, {}, {g.find("t")->id, g.find("t2")->id, g.find("end")->id}));
  INFO(parts.to_status());
  REQUIRE(parts.ok());
  require_valid(*parts);
  REQUIRE(parts->transfers.size() == 1);  // one per (source node, destination device)
  const placement::transfer& transfer = parts->transfers[0];
  CHECK(transfer.control);
  CHECK(transfer.key.tensor_name == "u/_control_to_worker_task1_CPU_0:0");
  CHECK(transfer.recv_node == "u/_control_recv_at_worker_task1_CPU_0");

  const auto& ps = *parts->find(k_ps1);
  const tf::NodeDef* dummy = find_node(ps.graph_def, "u/_control_to_worker_task1_CPU_0");
  REQUIRE(dummy != nullptr);
  CHECK(dummy->op() == "Const");
  CHECK(dummy->input(0) == "^u");
  CHECK(find_node(ps.graph_def, transfer.send_node)->input(0) == dummy->name());

  const auto& worker = *parts->find(k_worker1);
  CHECK(find_node(worker.graph_def, "t")->input(0) == "^" + transfer.recv_node);
  CHECK(find_node(worker.graph_def, "t2")->input(0) == "^" + transfer.recv_node);
  CHECK(worker.targets == std::vector<placement::bound_node>{{0, "t"}, {1, "t2"}, {2, "end"}});
  CHECK(ps.feeds == std::vector<placement::bound_tensor>{{0, "x:0"}});
  CHECK(ps.targets.empty());
}

TEST_CASE("a NoOp that nothing in the step waits for takes no control transfer", "[placement][partition]") {
  // tf.group(updates) on the worker, the updates on the PS: the step ends when both
  // partitions have, so the worker's `train` need not wait for a transfer after them.
  auto root = graph::scope::new_root();
  auto x = placeholder(root.with_device(k_ps1), "x");
  auto u1 = ops::relu(root.with_name("u1").with_device(k_ps1), x);
  auto u2 = ops::neg(root.with_name("u2").with_device(k_ps1), x);
  auto local = ops::no_op(root.with_name("local").with_device(k_worker1));
  ops::no_op(root.with_name("train").with_device(k_worker1).with_control_dependencies(
      {graph::operation{u1.node, {u1}}, graph::operation{u2.node, {u2}}, local}));
  // A NoOp that another node waits for keeps its transfer.
  auto waited = ops::no_op(root.with_name("waited").with_device(k_worker1).with_control_dependencies(
      {graph::operation{u1.node, {u1}}}));
  ops::no_op(root.with_name("after").with_device(k_worker1).with_control_dependencies({waited}));
  graph::graph g = build(root);
  placement::placement placed = assign_devices(g, {{"x", k_ps1}, {"u1", k_ps1}, {"u2", k_ps1}}, k_worker1);

  auto parts = placement::partition_graph(g, placed, step_of({endpoint_of(g, "x")}, {}, {g.find("train")->id}));
  INFO(parts.to_status());
  REQUIRE(parts.ok());
  require_valid(*parts);
  CHECK(parts->transfers.empty());
  const auto& ps = *parts->find(k_ps1);
  const auto& worker = *parts->find(k_worker1);
  // The updates still run in the PS's partition; `train` waits for what is local.
  CHECK(find_node(ps.graph_def, "u1") != nullptr);
  CHECK(find_node(ps.graph_def, "u2") != nullptr);
  CHECK(ps.also_run == std::vector<std::string>{"u1", "u2"});
  CHECK(ps.targets.empty());
  const tf::NodeDef* train = find_node(worker.graph_def, "train");
  REQUIRE(train != nullptr);
  REQUIRE(train->input_size() == 1);
  CHECK(train->input(0) == "^local");

  auto both = placement::partition_graph(g, placed,
                                         step_of({endpoint_of(g, "x")}, {}, {g.find("train")->id, g.find("after")->id}));
  INFO(both.to_status());
  REQUIRE(both.ok());
  require_valid(*both);
  REQUIRE(both->transfers.size() == 1);
  CHECK(both->find(k_ps1)->also_run == std::vector<std::string>{"u1", "u2"});
  CHECK(both->transfers[0].recv_node == "u1/_control_recv_at_worker_task1_CPU_0");
  CHECK(find_node(both->find(k_worker1)->graph_def, "waited")->input(0) == "^u1/_control_recv_at_worker_task1_CPU_0");
}

TEST_CASE("control edges from several nodes of one device to one node are one transfer",
          "[placement][partition]") {
  auto root = graph::scope::new_root();
  auto x = placeholder(root.with_device(k_ps1), "x");
  std::vector<graph::operation> updates;
  for (const char* name : {"u1", "u2", "u3"}) {
    auto u = ops::relu(root.with_name(name).with_device(k_ps1), x);
    updates.push_back(graph::operation{u.node, {u}});
  }
  auto local = ops::no_op(root.with_name("local").with_device(k_worker1));
  std::vector<graph::operation> deps = updates;
  deps.push_back(local);
  // t waits for u1..u3 on ps1 (one transfer for the three) and for `local` on its own
  // device; t2 for u1 alone (a transfer of its own).
  auto t_op = ops::no_op(root.with_name("t").with_device(k_worker1).with_control_dependencies(deps));
  auto t2 = ops::no_op(root.with_name("t2").with_device(k_worker1).with_control_dependencies({updates[0]}));
  ops::no_op(root.with_name("end").with_device(k_worker1).with_control_dependencies({t2, t_op}));
  graph::graph g = build(root);
  placement::placement placed = assign_devices(g, {{"x", k_ps1}, {"u1", k_ps1}, {"u2", k_ps1}, {"u3", k_ps1}}, k_worker1);
  auto parts = placement::partition_graph(
      g, placed, step_of({endpoint_of(g, "x")}, {}, {g.find("t")->id, g.find("t2")->id, g.find("end")->id}));
  INFO(parts.to_status());
  REQUIRE(parts.ok());
  require_valid(*parts);
  REQUIRE(parts->transfers.size() == 2);
  const auto& ps = *parts->find(k_ps1);
  const auto& worker = *parts->find(k_worker1);
  const tf::NodeDef* group = find_node(ps.graph_def, "t/_control_from_ps_task1_CPU_0/_control_to_worker_task1_CPU_0");
  REQUIRE(group != nullptr);
  CHECK(group->op() == "Const");
  REQUIRE(group->input_size() == 3);
  CHECK(group->input(0) == "^u1");
  CHECK(group->input(1) == "^u2");
  CHECK(group->input(2) == "^u3");
  const tf::NodeDef* t = find_node(worker.graph_def, "t");
  REQUIRE(t->input_size() == 2);
  CHECK(t->input(0) == "^local");
  CHECK(t->input(1) == "^t/_control_from_ps_task1_CPU_0/_control_recv_at_worker_task1_CPU_0");
  CHECK(find_node(worker.graph_def, "t2")->input(0) == "^u1/_control_recv_at_worker_task1_CPU_0");
  CHECK(find_node(ps.graph_def, "u1/_control_to_worker_task1_CPU_0")->input(0) == "^u1");

  // Nodes whose sources each already cross on their own reuse those transfers.
  auto root2 = graph::scope::new_root();
  auto y = placeholder(root2.with_device(k_ps1), "y");
  auto v1 = ops::relu(root2.with_name("v1").with_device(k_ps1), y);
  auto v2 = ops::relu(root2.with_name("v2").with_device(k_ps1), y);
  auto a = ops::no_op(root2.with_name("a").with_device(k_worker1).with_control_dependencies({graph::operation{v1.node, {v1}}}));
  auto b = ops::no_op(root2.with_name("b").with_device(k_worker1).with_control_dependencies(
      {graph::operation{v2.node, {v2}}, a}));
  auto c = ops::no_op(root2.with_name("c").with_device(k_worker1).with_control_dependencies(
      {graph::operation{v1.node, {v1}}, graph::operation{v2.node, {v2}}, b}));
  ops::no_op(root2.with_name("end").with_device(k_worker1).with_control_dependencies({c}));
  graph::graph g2 = build(root2);
  auto parts2 = placement::partition_graph(g2, assign_devices(g2, {{"y", k_ps1}, {"v1", k_ps1}, {"v2", k_ps1}}, k_worker1),
                                           step_of({endpoint_of(g2, "y")}, {}, {g2.find("end")->id}));
  INFO(parts2.to_status());
  REQUIRE(parts2.ok());
  require_valid(*parts2);
  CHECK(parts2->transfers.size() == 2);  // v1's and v2's, which c shares
}

TEST_CASE("an update's edges from its readers are dropped where the reader is in another process",
          "[placement][partition]") {
  auto root = graph::scope::new_root();
  auto x = placeholder(root.with_device(k_ps0), "x");
  auto reader = ops::relu(root.with_name("reader").with_device(k_worker0), x);
  auto other = ops::neg(root.with_name("other").with_device(k_worker0), x);
  tf::AttrValue readers;
  readers.mutable_list()->add_s("reader");
  ops::square(root.with_name("update")
                  .with_device(k_ps0)
                  .with_control_dependencies({graph::operation{reader.node, {reader}}, graph::operation{other.node, {other}}})
                  .with_attr(graph::k_in_place_after_attr, readers),
              x);
  graph::graph g = build(root);
  CHECK(g.find("update")->def.attr().count(graph::k_in_place_after_attr) == 1);
  placement::placement placed = assign_devices(g, {{"reader", k_worker0}, {"other", k_worker0}}, k_ps0);
  const auto step = step_of({endpoint_of(g, "x")}, {}, {g.find("update")->id});
  auto waits_for = [&](const placement::partition_options& o) {
    auto parts = placement::partition_graph(g, placed, step, o);
    INFO(parts.to_status());
    REQUIRE(parts.ok());
    require_valid(*parts);
    std::vector<std::string> inputs;
    for (const auto& in : find_node(parts->find(k_ps0)->graph_def, "update")->input()) inputs.push_back(in);
    return inputs;
  };
  // One process (no same_process, or one that says so): both edges, in one transfer.
  CHECK(waits_for({}) == std::vector<std::string>{"x", "^update/_control_from_worker_task0_CPU_0/_control_recv_at_ps_task0_CPU_0"});
  placement::partition_options apart;
  apart.same_process = [](const std::string& a, const std::string& b) { return a == b; };
  // Another process: the reader's edge goes, the other control input stays.
  CHECK(waits_for(apart) == std::vector<std::string>{"x", "^other/_control_recv_at_ps_task0_CPU_0"});
}

TEST_CASE("a small constant read on another device is copied there, not sent each step",
          "[placement][partition]") {
  auto root = graph::scope::new_root();
  auto ps = root.with_device(k_ps0);
  auto rate = ops::scalar(ps.with_name("rate"), 0.5f);
  auto big = ops::constant(ps.with_name("big"), tensor::from_vector<float>(std::vector<float>(2000, 1.0f)));
  auto x = placeholder(ps, "x");
  auto gated = ops::scalar(ps.with_name("gated").with_control_dependencies({graph::operation{x.node, {x}}}), 2.0f);
  auto fed = ops::scalar(ps.with_name("fed"), 3.0f);
  auto w = root.with_device(k_worker0);
  auto y = ops::mul(w.with_name("y"), ops::mul(w.with_name("y1"), rate, gated), fed);
  auto z = ops::mul(w.with_name("z"), ops::sum(w.with_name("s"), big, ops::scalar<std::int32_t>(w.with_name("axis"), 0)), rate);
  graph::graph g = build(root);
  placement::placement placed = assign_devices(g, {{"rate", k_ps0}, {"big", k_ps0}, {"x", k_ps0}, {"gated", k_ps0}, {"fed", k_ps0}}, k_worker0);
  auto parts = placement::partition_graph(g, placed, step_of({endpoint_of(g, "x"), endpoint_of(g, "fed")},
                                                             {endpoint_of(g, "y"), endpoint_of(g, "z")}));
  INFO(parts.to_status());
  REQUIRE(parts.ok());
  require_valid(*parts);
  std::set<std::string> sent;
  for (const auto& t : parts->transfers) sent.insert(t.key.tensor_name);
  // The large one, the one with a control input and the fed one still cross; `rate`
  // is copied once for its two readers.
  CHECK(sent == std::set<std::string>{"big:0", "gated:0", "fed:0"});
  const auto& worker = *parts->find(k_worker0);
  const tf::NodeDef* copy = find_node(worker.graph_def, "rate/_copy_at_worker_task0_CPU_0");
  REQUIRE(copy != nullptr);
  CHECK(copy->op() == "Const");
  CHECK(copy->input_size() == 0);
  CHECK(copy->device() == k_worker0);
  CHECK(find_node(worker.graph_def, "y1")->input(0) == copy->name());
  CHECK(find_node(worker.graph_def, "z")->input(1) == copy->name());
  CHECK(nodes_of_op(worker.graph_def, "Const").size() == 2);  // the copy and `axis`
}

TEST_CASE("feeds, fetches and targets are bound to the partitions that hold them",
          "[placement][partition]") {
  auto root = graph::scope::new_root();
  auto x = placeholder(root, "x");  // worker 0, fed
  auto w = ops::constant(root.with_name("w"), tensor::from_vector<float>({3, 4}));
  auto h = ops::mul(root.with_name("h"), x, w);                     // worker 0, fed below
  auto s = ops::relu(root.with_name("s").with_device(k_ps0), h);    // ps 0
  auto z = ops::add(root.with_name("z").with_device(k_ps0), s, x);  // ps 0: x crosses once
  auto unused = ops::neg(root.with_name("unused"), x);
  auto train = ops::no_op(root.with_name("train").with_device(k_ps0).with_control_dependencies(
      {graph::operation{z.node, {z}}}));
  (void)unused;
  auto p = place_ok(root, with_default(k_worker0));

  placement::step_spec step;
  step.feeds = {endpoint_of(p.g, "x"), endpoint_of(p.g, "h")};
  step.fetches = {endpoint_of(p.g, "z"), endpoint_of(p.g, "h"), endpoint_of(p.g, "x")};
  step.targets = {p.g.find("train")->id};
  auto parts = placement::partition_graph(p.g, p.placed, step);
  INFO(parts.to_status());
  REQUIRE(parts.ok());
  require_valid(*parts);
  REQUIRE(parts->partitions.size() == 2);
  const auto& ps = *parts->find(k_ps0);
  const auto& worker = *parts->find(k_worker0);

  // Fed tensors are delivered where their producer lives; h's producer (Mul) does not
  // run, so a Placeholder stands in for it.
  CHECK(worker.feeds == std::vector<placement::bound_tensor>{{0, "x:0"}, {1, "h/_feed_0:0"}});
  CHECK(ps.feeds.empty());
  CHECK(find_node(worker.graph_def, "h") == nullptr);
  CHECK(find_node(worker.graph_def, "w") == nullptr);
  CHECK(find_node(worker.graph_def, "unused") == nullptr);  // not needed by the step
  CHECK(find_node(worker.graph_def, "h/_feed_0")->op() == "Placeholder");

  CHECK(ps.fetches == std::vector<placement::bound_tensor>{{0, "z:0"}});
  CHECK(worker.fetches == std::vector<placement::bound_tensor>{{1, "h/_feed_0:0"}, {2, "x:0"}});
  CHECK(ps.targets == std::vector<placement::bound_node>{{0, "train"}});

  REQUIRE(parts->transfers.size() == 2);  // x:0 and h:0, each once
  std::set<std::string> sent;
  for (const auto& t : parts->transfers) {
    sent.insert(t.key.tensor_name);
    CHECK(t.key.send_device == k_worker0);
    CHECK(t.key.recv_device == k_ps0);
  }
  CHECK(sent == std::set<std::string>{"x:0", "h:0"});
  const auto& h_send = *find_node(worker.graph_def, "h/_send_0_to_ps_task0_CPU_0");
  CHECK(h_send.input(0) == "h/_feed_0");
  CHECK(find_node(ps.graph_def, "s")->input(0) == "h/_recv_0_at_ps_task0_CPU_0");
  CHECK(find_node(ps.graph_def, "z")->input(1) == "x/_recv_0_at_ps_task0_CPU_0");

  auto twice = placement::partition_graph(p.g, p.placed, step_of({step.feeds[0], step.feeds[0]}));
  REQUIRE_FALSE(twice.ok());
  CHECK_THAT(twice.error().message(), Contains("'x:0' is fed twice"));
  auto bad_fetch = placement::partition_graph(p.g, p.placed, step_of({}, {{p.g.find("x")->id, 3}}));
  REQUIRE_FALSE(bad_fetch.ok());
  CHECK_THAT(bad_fetch.error().message(), Contains("fetch 0 'x:3'") && Contains("has 1 outputs"));
  placement::placement short_placement = p.placed;
  short_placement.index.pop_back();
  CHECK_THAT(placement::partition_graph(p.g, short_placement, step).error().message(),
             Contains("covers"));
  placement::placement partial = p.placed;
  partial.assign(p.g.find("z")->id, "/job:ps");
  CHECK_THAT(placement::partition_graph(p.g, partial, step).error().message(),
             Contains("node 'z'") && Contains("not a complete device name"));
}

TEST_CASE("a graph on one device is one partition without Send or Recv", "[placement][partition]") {
  register_test_ops();
  auto root = graph::scope::new_root();
  auto v = variable(root, "v");
  auto x = placeholder(root, "x");
  auto y = ops::add(root.with_name("y"), read(root, "r", v), x);
  assign(root, "a", v, y);
  auto p = place_ok(root, with_default(k_worker1));
  auto parts = placement::partition_graph(
      p.g, p.placed,
      step_of({endpoint_of(p.g, "x")}, {endpoint_of(p.g, "y")}, {p.g.find("a")->id}));
  REQUIRE(parts.ok());
  require_valid(*parts);
  REQUIRE(parts->partitions.size() == 1);
  CHECK(parts->transfers.empty());
  const auto& only = parts->partitions[0];
  CHECK(only.device == k_worker1);
  CHECK(only.graph_def.node_size() == p.g.num_nodes());
  CHECK(nodes_of_op(only.graph_def, "_Send").empty());
  CHECK(nodes_of_op(only.graph_def, "_Recv").empty());
  CHECK(only.feeds == std::vector<placement::bound_tensor>{{0, "x:0"}});
  CHECK(only.fetches == std::vector<placement::bound_tensor>{{0, "y:0"}});
  CHECK(only.targets == std::vector<placement::bound_node>{{0, "a"}});
}

TEST_CASE("_Send and _Recv are registered, stateful, with TensorFlow's attributes",
          "[placement][partition]") {
  const auto* send = graph::op_registry::builtin().find("_Send");
  const auto* recv = graph::op_registry::builtin().find("_Recv");
  REQUIRE(send != nullptr);
  REQUIRE(recv != nullptr);
  CHECK(send->is_stateful);
  CHECK(recv->is_stateful);
  for (const auto* op : {send, recv}) {
    for (const char* attr : {"tensor_name", "send_device", "send_device_incarnation", "recv_device",
                             "client_terminated"}) {
      CHECK(op->find_attr(attr) != nullptr);
    }
  }
  CHECK(send->find_attr("T") != nullptr);
  CHECK(recv->find_attr("tensor_type") != nullptr);
  CHECK(send->outputs.empty());
  CHECK(recv->inputs.empty());
}

// --- DOT ----------------------------------------------------------------------------

TEST_CASE("DOT output has one cluster per device and dashed transfers", "[placement][dot]") {
  auto root = graph::scope::new_root();
  auto a = ops::identity(root.with_name("a").with_device(k_ps0),
                         ops::constant(root.with_name("a_value").with_device(k_ps0), tensor::from_vector<float>({1, 2})));
  auto b = ops::relu(root.with_name("b").with_device("/job:worker/task:1"), a);
  ops::neg(root.with_name(R"(c"quoted)"), b);
  auto p = place_ok(root, with_default(k_worker0));
  auto parts =
      placement::partition_graph(p.g, p.placed, step_of({}, {endpoint_of(p.g, R"(c"quoted)")}));
  REQUIRE(parts.ok());
  REQUIRE(parts->partitions.size() == 3);

  std::string dot = placement::partitions_to_dot(*parts);
  CHECK_THAT(dot, StartsWith("digraph"));
  for (const auto& part : parts->partitions)
    CHECK_THAT(dot, Contains(R"(label=")" + part.device + R"(")"));
  CHECK_THAT(dot, Contains("subgraph cluster_0") && Contains("subgraph cluster_1") &&
                      Contains("subgraph cluster_2"));
  CHECK_THAT(dot, !Contains("subgraph cluster_3"));
  CHECK_THAT(dot,
             Contains(R"("a/_send_0_to_worker_task1_CPU_0" -> "a/_recv_0_at_worker_task1_CPU_0" )"
                      R"([style=dashed, color=blue, label="a:0"])"));
  CHECK_THAT(dot, Contains(R"("c\"quoted")"));

  std::string placed_dot = placement::graph_to_dot(p.g, &p.placed);
  CHECK_THAT(placed_dot, Contains("subgraph cluster_2") && !Contains("subgraph cluster_3"));
  CHECK_THAT(placed_dot, Contains(R"("a" -> "b" [style=dashed])"));
  // By requested device: a, b and an unassigned node outside any cluster.
  std::string requested = placement::graph_to_dot(p.g);
  CHECK_THAT(requested, Contains("subgraph cluster_1") && !Contains("subgraph cluster_2"));
  CHECK_THAT(requested, Contains(R"(label="/job:worker/task:1")"));
}

// --- with the real resource-variable ops, when they are registered ------------------

TEST_CASE("real variables: set on ps, reads colocated, partitions valid",
          "[placement][partition]") {
  const auto& registry = graph::op_registry::builtin();
  if (!registry.find("VarHandleOp") || !registry.find("ReadVariableOp") ||
      !registry.find("AssignVariableOp")) {
    WARN("VarHandleOp, ReadVariableOp or AssignVariableOp is not registered; skipped");
    return;
  }
  auto root = graph::scope::new_root();
  auto f32 = graph::attr_value(dtype::float32);
  auto var = [&](const char* name) {
    return root.with_name(name)
        .add("VarHandleOp", {},
             {{"dtype", f32},
              {"shape", graph::attr_value(partial_shape{2})},
              {"shared_name", graph::attr_value(name)}})
        .out(0);
  };
  auto w = var("w");
  auto b = var("b");
  auto x = placeholder(root, "x");
  auto rw = root.with_name("read_w").add("ReadVariableOp", {w}, {{"dtype", f32}}).out(0);
  auto rb = root.with_name("read_b").add("ReadVariableOp", {b}, {{"dtype", f32}}).out(0);
  auto y = ops::add(root.with_name("y"), ops::mul(root.with_name("xw"), x, rw), rb);
  root.with_name("update_b").add("AssignVariableOp", {b, y});
  auto def = root.to_graph_def();
  INFO(def.to_status());
  REQUIRE(def.ok());
  placement::replica_device_setter_options options;
  options.ps_tasks = 2;
  REQUIRE(placement::replica_device_setter(&*def, options).ok());
  auto g = graph::graph::from_graph_def(*def);
  REQUIRE(g.ok());
  auto placed = place(*g, with_default(k_worker0));
  REQUIRE(placed.ok());
  auto at = [&](const char* name) { return placed->device_of(g->find(name)->id); };
  CHECK(at("w") == k_ps0);
  CHECK(at("read_w") == k_ps0);
  CHECK(at("b") == k_ps1);
  CHECK(at("read_b") == k_ps1);
  CHECK(at("update_b") == k_ps1);
  CHECK(at("y") == k_worker0);

  placement::step_spec step =
      step_of({endpoint_of(*g, "x")}, {endpoint_of(*g, "y")}, {g->find("update_b")->id});
  auto parts = placement::partition_graph(*g, *placed, step);
  INFO(parts.to_status());
  REQUIRE(parts.ok());
  require_valid(*parts);
  CHECK(parts->partitions.size() == 3);
  std::set<std::string> sent;
  for (const auto& t : parts->transfers)
    sent.insert(t.key.tensor_name + " -> " + t.key.recv_device);
  // No resource handle crosses devices: the values do.
  CHECK(sent == std::set<std::string>{std::string("read_w:0 -> ") + k_worker0,
                                      std::string("read_b:0 -> ") + k_worker0,
                                      std::string("y:0 -> ") + k_ps1});
}
