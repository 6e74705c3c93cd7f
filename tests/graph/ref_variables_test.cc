// graph/ref_variables.h: TF 1.x reference variables rewritten to resource variables at
// load. (That such graphs train as TensorFlow trains them is the corpus's job:
// tests/tf_compat/corpus/ref_variables_*.)
#include <catch2/catch.hpp>

#include "graph/graph.h"
#include "graph/graph_io.h"
#include "graph/ref_variables.h"

using namespace troupe;

namespace {

// w (VariableV2) initialized by Assign, read by Identity (w/read) and directly by MatMul,
// updated by ApplyGradientDescent.
constexpr const char* k_graph = R"pb(
node { name: "w" op: "VariableV2" device: "/job:ps/task:0"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "shape" value { shape { dim { size: 2 } dim { size: 2 } } } }
  attr { key: "container" value { s: "" } }
  attr { key: "shared_name" value { s: "" } } }
node { name: "init_value" op: "Const"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 2 } dim { size: 2 } } float_val: 1 } } } }
node { name: "w/Assign" op: "Assign" input: "w" input: "init_value"
  attr { key: "T" value { type: DT_FLOAT } }
  attr { key: "validate_shape" value { b: true } }
  attr { key: "use_locking" value { b: true } }
  attr { key: "_class" value { list { s: "loc:@w" } } } }
node { name: "w/read" op: "Identity" input: "w" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "y" op: "MatMul" input: "w/read" input: "w:0" attr { key: "T" value { type: DT_FLOAT } } }
node { name: "lr" op: "Const"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape {} float_val: 0.5 } } } }
node { name: "update" op: "ApplyGradientDescent" input: "w" input: "lr" input: "y"
  attr { key: "T" value { type: DT_FLOAT } }
  attr { key: "use_locking" value { b: false } } }
node { name: "train" op: "NoOp" input: "^update" }
)pb";

tf::GraphDef parse(const std::string& text) {
  auto def = graph::parse_graph_def_text(text, "test");
  REQUIRE(def.ok());
  return *def;
}

const tf::NodeDef& node_named(const tf::GraphDef& def, const std::string& name) {
  for (const auto& n : def.node()) {
    if (n.name() == name) return n;
  }
  FAIL("no node " << name);
  return def.node(0);
}

}  // namespace

TEST_CASE("reference variables become resource variables, names kept") {
  tf::GraphDef def = parse(k_graph);
  REQUIRE(graph::has_ref_variables(def));
  REQUIRE(graph::rewrite_ref_variables(&def).ok());
  CHECK_FALSE(graph::has_ref_variables(def));

  const auto& w = node_named(def, "w");
  CHECK(w.op() == "VarHandleOp");
  CHECK(w.device() == "/job:ps/task:0");
  CHECK(w.attr().at("dtype").type() == tf::DT_FLOAT);
  CHECK(w.attr().at("shape").shape().dim_size() == 2);

  // Assign: the update under a new name; its own name reads the new value after it.
  const auto& assign = node_named(def, "w/Assign/_troupe_update");
  CHECK(assign.op() == "AssignVariableOp");
  CHECK(assign.input(0) == "w");
  CHECK(assign.input(1) == "init_value");
  CHECK(assign.attr().at("dtype").type() == tf::DT_FLOAT);
  CHECK(assign.attr().contains("_class"));
  CHECK_FALSE(assign.attr().contains("use_locking"));  // AssignVariableOp has none
  const auto& assign_read = node_named(def, "w/Assign");
  CHECK(assign_read.op() == "ReadVariableOp");
  CHECK(assign_read.input(1) == "^w/Assign/_troupe_update");

  CHECK(node_named(def, "w/read").op() == "ReadVariableOp");
  // A direct value read goes through the one added read.
  const auto& y = node_named(def, "y");
  CHECK(y.input(0) == "w/read");
  CHECK(y.input(1) == "w/_troupe_value");
  CHECK(node_named(def, "w/_troupe_value").op() == "ReadVariableOp");

  const auto& update = node_named(def, "update/_troupe_update");
  CHECK(update.op() == "ResourceApplyGradientDescent");
  CHECK(update.attr().at("T").type() == tf::DT_FLOAT);
  CHECK(update.attr().contains("use_locking"));

  // The rewritten graph loads (schemas, dtypes and edges all check).
  auto g = graph::graph::from_graph_def(parse(k_graph));
  REQUIRE(g.ok());
  CHECK(g->find("update/_troupe_update") != nullptr);
}

TEST_CASE("reference ops troupe cannot rewrite are errors that name the node") {
  SECTION("an update op without a twin") {
    std::string text = std::string(k_graph) +
                       R"pb(node { name: "sub" op: "ScatterSub" input: "w" input: "lr" input: "lr"
                              attr { key: "T" value { type: DT_FLOAT } } })pb";
    auto g = graph::graph::from_graph_def(parse(text));
    REQUIRE_FALSE(g.ok());
    CHECK_THAT(g.error().message(), Catch::Contains("'sub' (ScatterSub)") && Catch::Contains("ApplyAdam"));
  }
  SECTION("a reference that does not come straight from a variable") {
    std::string text = std::string(k_graph) +
                       R"pb(node { name: "r" op: "Identity" input: "lr" attr { key: "T" value { type: DT_FLOAT } } }
                            node { name: "bad" op: "Assign" input: "r" input: "lr"
                              attr { key: "T" value { type: DT_FLOAT } } })pb";
    auto g = graph::graph::from_graph_def(parse(text));
    REQUIRE_FALSE(g.ok());
    CHECK_THAT(g.error().message(), Catch::Contains("'bad' (Assign): input 0 (r)"));
  }
  SECTION("a name the rewrite needs is taken") {
    std::string text = std::string(k_graph) + R"pb(node { name: "update/_troupe_update" op: "NoOp" })pb";
    auto g = graph::graph::from_graph_def(parse(text));
    REQUIRE_FALSE(g.ok());
    CHECK_THAT(g.error().message(), Catch::Contains("'update/_troupe_update'"));
  }
}
