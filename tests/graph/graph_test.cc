// graph: GraphDef parsing and round trips, validation errors, shape inference, the
// builder API and pruning.
#include <catch2/catch.hpp>

#include <google/protobuf/util/message_differencer.h>

#include "graph/graph_io.h"
#include "graph/ops.h"
#include "graph/prune.h"

using namespace troupe;


namespace {

// A GraphDef as TensorFlow 1.x writes it (tf.compat.v1, as_graph_def()).
constexpr const char* k_tf_graph = R"pb(
node {
  name: "x"
  op: "Placeholder"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "shape" value { shape { dim { size: -1 } dim { size: 3 } } } }
}
node {
  name: "w"
  op: "Const"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr {
    key: "value"
    value {
      tensor {
        dtype: DT_FLOAT
        tensor_shape { dim { size: 3 } dim { size: 2 } }
        tensor_content: "\000\000\200?\000\000\000@\000\000@@\000\000\200@\000\000\240@\000\000\300@"
      }
    }
  }
}
node {
  name: "y"
  op: "MatMul"
  input: "x"
  input: "w"
  attr { key: "T" value { type: DT_FLOAT } }
  attr { key: "transpose_a" value { b: false } }
  attr { key: "transpose_b" value { b: false } }
}
node {
  name: "z"
  op: "Relu"
  input: "y"
  attr { key: "T" value { type: DT_FLOAT } }
}
versions { producer: 27 }
library { }
)pb";

std::string error_of(const std::string& text) {
  auto def = graph::parse_graph_def_text(text, "test.pbtxt");
  if (!def.ok()) return def.error().message();
  auto g = graph::graph::from_graph_def(*def);
  return g.ok() ? std::string("OK") : g.error().message();
}

bool same(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

}  // namespace

TEST_CASE("a TensorFlow text GraphDef loads, infers shapes and round-trips", "[graph]") {
  auto def = graph::parse_graph_def_text(k_tf_graph, "tf.pbtxt");
  REQUIRE(def.ok());
  auto g = graph::graph::from_graph_def(*def);
  REQUIRE(g.ok());
  CHECK(g->num_nodes() == 4);
  const auto* y = g->find("y");
  REQUIRE(y != nullptr);
  CHECK(y->output_types[0] == dtype::float32);
  CHECK(y->output_shapes[0] == partial_shape{-1, 2});
  CHECK(g->versions().producer() == 27);
  const tensor* w = g->constant_value({g->find("w")->id, 0});
  REQUIRE(w != nullptr);
  CHECK(w->data<float>()[5] == 6.0f);

  // Text -> binary -> text is lossless.
  auto binary = graph::graph_def_to_binary(*def);
  auto reparsed = graph::parse_graph_def_binary(binary, "bin");
  REQUIRE(reparsed.ok());
  CHECK(same(*reparsed, *def));
  auto text_again = graph::parse_graph_def_text(graph::graph_def_to_text(*reparsed), "again");
  REQUIRE(text_again.ok());
  CHECK(same(*text_again, *def));

  // graph -> GraphDef -> graph is a fixed point.
  auto out = g->to_graph_def();
  auto g2 = graph::graph::from_graph_def(out);
  REQUIRE(g2.ok());
  CHECK(same(g2->to_graph_def(), out));
}

TEST_CASE("unknown fields are skipped in binary and text GraphDefs", "[graph]") {
  auto def = graph::parse_graph_def_text(k_tf_graph, "tf.pbtxt");
  REQUIRE(def.ok());
  std::string binary = graph::graph_def_to_binary(*def);
  // Field 2 (the function library, which troupe does not model): tag 0x12, length 2, "hi".
  binary += std::string("\x12\x02hi", 4);
  // Field 99 on the graph (varint).
  binary += std::string("\x98\x06\x01", 3);
  auto with_unknown = graph::parse_graph_def_binary(binary, "future.pb");
  REQUIRE(with_unknown.ok());
  CHECK(graph::graph::from_graph_def(*with_unknown).ok());
  // Kept on re-serialization.
  CHECK(graph::graph_def_to_binary(*with_unknown).size() == binary.size());
  CHECK(error_of(std::string(k_tf_graph) + "some_future_field: 3\n") == "OK");
}

TEST_CASE("default attributes are filled in on load", "[graph]") {
  auto g = graph::graph::from_graph_def(*graph::parse_graph_def_text(R"pb(
    node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }
    node { name: "m" op: "MatMul" input: "a" input: "a" attr { key: "T" value { type: DT_FLOAT } } }
  )pb", "t"));
  REQUIRE(g.ok());
  bool transpose_a = true;
  REQUIRE(graph::get_attr(g->find("m")->def, "transpose_a", &transpose_a).ok());
  CHECK_FALSE(transpose_a);
}

TEST_CASE("invalid graphs are rejected with the node's name", "[graph]") {
  const std::string placeholder =
      R"(node { name: "a" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } } )";
  SECTION("duplicate names") {
    CHECK_THAT(error_of(placeholder + placeholder), Catch::Contains("duplicate node name 'a'"));
  }
  SECTION("unknown op, with a suggestion") {
    CHECK_THAT(error_of(R"(node { name: "n" op: "MatMull" })"),
               Catch::Contains("node 'n'") && Catch::Contains("unknown op 'MatMull'") &&
                   Catch::Contains("did you mean 'MatMul'"));
  }
  SECTION("dangling input") {
    CHECK_THAT(error_of(placeholder + R"(node { name: "r" op: "Relu" input: "nope" attr { key: "T" value { type: DT_FLOAT } } })"),
               Catch::Contains("node 'r' input 0 refers to 'nope'"));
  }
  SECTION("output index out of range") {
    CHECK_THAT(error_of(placeholder + R"(node { name: "r" op: "Relu" input: "a:1" attr { key: "T" value { type: DT_FLOAT } } })"),
               Catch::Contains("'a' (Placeholder) has only 1 output"));
  }
  SECTION("wrong number of inputs") {
    CHECK_THAT(error_of(placeholder + R"(node { name: "r" op: "Relu" input: "a" input: "a" attr { key: "T" value { type: DT_FLOAT } } })"),
               Catch::Contains("node 'r' (Relu) has 2 data inputs but the op takes 1"));
  }
  SECTION("control input before a data input") {
    CHECK_THAT(error_of(placeholder + R"(node { name: "r" op: "Relu" input: "^a" input: "a" attr { key: "T" value { type: DT_FLOAT } } })"),
               Catch::Contains("control inputs must be last"));
  }
  SECTION("dtype mismatch on an edge") {
    CHECK_THAT(error_of(placeholder + R"(node { name: "r" op: "Relu" input: "a" attr { key: "T" value { type: DT_INT32 } } })"),
               Catch::Contains("node 'r' (Relu) input 0 must be int32 but 'a' is float"));
  }
  SECTION("cycle") {
    CHECK_THAT(error_of(R"(node { name: "p" op: "Identity" input: "q" attr { key: "T" value { type: DT_FLOAT } } }
                           node { name: "q" op: "Identity" input: "p" attr { key: "T" value { type: DT_FLOAT } } })"),
               Catch::Contains("cycle") && Catch::Contains("'p'") && Catch::Contains("'q'"));
  }
  SECTION("missing required attribute") {
    CHECK_THAT(error_of(R"(node { name: "p" op: "Placeholder" })"),
               Catch::Contains("node 'p' (Placeholder) is missing required attribute 'dtype'"));
  }
  SECTION("attribute of the wrong kind") {
    CHECK_THAT(error_of(placeholder + R"(node { name: "m" op: "MatMul" input: "a" input: "a" attr { key: "T" value { type: DT_FLOAT } } attr { key: "transpose_a" value { i: 1 } } })"),
               Catch::Contains("attribute 'transpose_a' is int but must be bool"));
  }
  SECTION("disallowed type") {
    CHECK_THAT(error_of(R"(node { name: "p" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }
                           node { name: "m" op: "MatMul" input: "p" input: "p" attr { key: "T" value { type: DT_BOOL } } })"),
               Catch::Contains("not one of the allowed types"));
  }
  SECTION("shape function error") {
    CHECK_THAT(error_of(R"(node { name: "p" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: 2 } dim { size: 3 } } } } }
                           node { name: "m" op: "MatMul" input: "p" input: "p" attr { key: "T" value { type: DT_FLOAT } } })"),
               Catch::Contains("'m'"));
  }
  SECTION("malformed text names line and column") {
    CHECK_THAT(error_of("node {\n  name: \"a\"\n  op: Placeholder\n}\n"),
               Catch::StartsWith("test.pbtxt:3:"));
  }
  SECTION("not a binary GraphDef") {
    auto def = graph::parse_graph_def_binary(std::string("\xff\xff\xff\xff", 4), "junk.pb");
    CHECK_THAT(def.error().message(), Catch::Contains("junk.pb: not a valid binary GraphDef"));
  }
}

TEST_CASE("the builder names nodes, scopes devices and control dependencies", "[graph]") {
  auto root = graph::scope::new_root();
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 4});
  auto layer = root.sub("layer1");
  auto w = ops::constant(layer.with_name("w"), tensor::zeros(dtype::float32, {4, 3}));
  auto m1 = ops::matmul(layer, x, w);
  auto m2 = ops::matmul(layer, x, w);
  CHECK(m1.node == "layer1/MatMul");
  CHECK(m2.node == "layer1/MatMul_1");
  CHECK(m1.shape == partial_shape{-1, 3});
  CHECK(m1.type == dtype::float32);
  auto init = ops::no_op(root.with_name("init"));
  auto r = ops::relu(root.with_device("/device:CPU:0").with_control_dependencies({init}), m1);
  auto sum = ops::add_n(root, {m1, m2, r});
  auto g = root.to_graph();
  REQUIRE(g.ok());
  const auto* relu = g->find(r.node);
  CHECK(relu->def.device() == "/device:CPU:0");
  REQUIRE(relu->control_inputs.size() == 1);
  CHECK(g->get(relu->control_inputs[0]).name() == "init");
  std::int64_t n = 0;
  REQUIRE(graph::get_attr(g->find(sum.node)->def, "N", &n).ok());
  CHECK(n == 3);
}

TEST_CASE("builder errors are kept and reported, not thrown", "[graph]") {
  auto root = graph::scope::new_root();
  auto a = ops::placeholder(root, dtype::float32, {2, 3});
  auto b = ops::placeholder(root, dtype::int32, {2, 3});
  auto bad = ops::add(root, a, b);  // float + int32
  CHECK_FALSE(bad.valid());
  auto later = ops::relu(root, bad);  // fails quietly
  CHECK_FALSE(later.valid());
  auto g = root.to_graph();
  REQUIRE_FALSE(g.ok());
  CHECK_THAT(g.error().message(), Catch::Contains("AddV2") && Catch::Contains("int32"));
  auto unknown = graph::scope::new_root();
  unknown.add("NoSuchOp", {});
  CHECK_THAT(unknown.get_status().message(), Catch::Contains("unknown op 'NoSuchOp'"));
}

TEST_CASE("pruning keeps only what fetches and targets need; feeds cut edges", "[graph]") {
  auto root = graph::scope::new_root();
  auto a = ops::placeholder(root.with_name("a"), dtype::float32);
  auto b = ops::square(root.with_name("b"), a);
  auto c = ops::neg(root.with_name("c"), b);
  auto side = ops::exp(root.with_name("side"), a);
  auto target = ops::no_op(root.with_name("t").with_control_dependencies({graph::operation{side.node, {side}}}));
  auto g = root.to_graph();
  REQUIRE(g.ok());
  auto id = [&](const char* name) { return g->find(name)->id; };
  auto names = [&](const std::vector<int>& ids) {
    std::vector<std::string> out;
    for (int i : ids) out.push_back(g->get(i).name());
    return out;
  };
  using v = std::vector<std::string>;
  CHECK(names(graph::prune(*g, {}, {{id("c"), 0}}, {})) == v{"a", "b", "c"});
  CHECK(names(graph::prune(*g, {{id("b"), 0}}, {{id("c"), 0}}, {})) == v{"c"});
  CHECK(names(graph::prune(*g, {}, {}, {id("t")})) == v{"a", "side", "t"});
  CHECK(names(graph::prune(*g, {{id("a"), 0}}, {{id("a"), 0}}, {})).empty());
}

TEST_CASE("tensor names parse", "[graph]") {
  auto t = graph::parse_tensor_name("layer/out:2");
  REQUIRE(t.ok());
  CHECK(t->node == "layer/out");
  CHECK(t->index == 2);
  CHECK(graph::parse_tensor_name("^init")->control);
  CHECK_FALSE(graph::parse_tensor_name("x:").ok());
  CHECK_FALSE(graph::parse_tensor_name("x:-1").ok());
  CHECK_FALSE(graph::parse_tensor_name("").ok());
}
