// graph/text_format.h against protobuf's TextFormat::Parser, the reference it replaces:
// on every case both accept or both refuse, and what both accept is the same message.
#include <google/protobuf/stubs/logging.h>

#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "fuzz/text_reference.h"
#include "graph/graph_io.h"
#include "graph/text_format.h"

namespace troupe {
namespace {

namespace pb = google::protobuf;

// Serializing a `string` field that holds invalid UTF-8 (both parsers accept "\xff") logs
// a complaint; the bytes are still written.
std::string canonical_bytes(const pb::Message& message) {
  static const bool quiet = [] {
    pb::SetLogHandler([](pb::LogLevel, const char*, int, const std::string&) {});
    return true;
  }();
  (void)quiet;
  return fuzz::canonical_bytes(message);
}

using fuzz::reference_parse_text;

void check_same_as_protobuf(const std::string& text) {
  INFO("input: " << text);
  tf::GraphDef reference;
  const bool reference_ok = reference_parse_text(text, &reference);
  tf::GraphDef ours;
  const status parsed = graph::parse_text_message(text, &ours);
  INFO("ours: " << (parsed.ok() ? std::string("ok") : parsed.message()));
  REQUIRE(parsed.ok() == reference_ok);
  if (reference_ok) CHECK(canonical_bytes(ours) == canonical_bytes(reference));
}

const std::vector<std::string> k_accepted = {
    "",
    "# only a comment\n",
    R"(node { name: "a" op: "Const" })",
    R"(node < name: "a" op: "Const" > node { name: "b" })",
    R"(node: { name: "a" }, node { name: 'b' };)",
    R"(node [ { name: "a" }, < name: "b" > ] node: [] node [])",
    R"(node { input: ["a", "b:1", '^c'] input: "d" input: [] })",
    R"(node { name: "con" "cat" 'en' "ated" })",
    R"(node { name: "esc \a\b\f\n\r\t\v\\\?\'\" \101\60\7 \x41\x4 \u00e9 \U0001F600 \ud83d\ude00" })",
    R"(node { attr { key: "s" value { s: "\377\000\x80 bytes" } } })",
    R"(node { attr { key: "i" value { i: -9223372036854775808 } } attr { key: "j" value { i: 0x7fffffffffffffff } } })",
    R"(node { attr { key: "o" value { i: 0777 } } attr { key: "z" value { i: 0 } } })",
    R"(node { attr { key: "f" value { f: 1.5 } } attr { key: "g" value { f: -.25e-3 } } })",
    R"(node { attr { key: "f" value { f: 1e39 } } attr { key: "g" value { f: -1e400 } } })",
    R"(node { attr { key: "f" value { f: 2f } } attr { key: "g" value { f: 3.F } } })",
    R"(node { attr { key: "f" value { f: inf } } attr { key: "g" value { f: -Infinity } } attr { key: "h" value { f: NaN } } })",
    R"(node { attr { key: "f" value { f: 12345678901234567890123 } } })",
    R"(node { attr { key: "b" value { b: true } } attr { key: "c" value { b: f } } attr { key: "d" value { b: 1 } } attr { key: "e" value { b: True } } })",
    R"(node { attr { key: "t" value { type: DT_FLOAT } } attr { key: "u" value { type: 7 } } attr { key: "v" value { type: 999 } } attr { key: "w" value { type: -3 } } })",
    R"(node { attr { key: "l" value { list { i: [1, -2, 0x3] f: [1, 2.5] type: [DT_INT32, 3] s: ["a", "b"] b: [true, 0] } } } })",
    R"(node { attr { key: "shape" value { shape { dim { size: 2 } dim { size: -1 name: "batch" } } } } })",
    R"(node { attr { key: "t" value { tensor { dtype: DT_FLOAT tensor_shape { dim { size: 2 } } float_val: [1, 2] } } } })",
    R"(node { attr { key: "k" value { i: 1 } } attr { key: "k" value { i: 2 } } })",
    R"(node { attr { key: "fn" value { func { name: "f" attr { key: "x" value { list { } } } } } } })",
    R"(unknown: 1 unknown_string: "x" "y" unknown_message { a: 1 b { c: [1, "x", {d: 2}] } } node { name: "a" })",
    R"(node { future_field: -inf other: -5 msg: < x: 1 > z: [1, [2, {}]] name: "a" })",
    R"(u { a: 1, b: 2; c: [<x: 1>, 2] } node { })",
    R"(7: 1 node { 12: "x" name: "a" } [ext.name]: 3 [ext.message] { x: 1 })",
    R"(u { [type.googleapis.com/foo.Bar] { x: 1 } [a/b]: 2 })",
    R"(node { name: "\U00110000 \U0010ffff \ud800\u0041 \ud83d\U0000de00" })",
    R"(versions { producer: 27 min_consumer: 12 bad_consumers: [1, 2] } version: 5)",
    R"(node { name: "" name: "b" })",
    "node {\n  name: \"a\"\r\n  op: \"Neg\"\t}\f\v",
    R"(node { name: "a" } # trailing comment without newline)",
    R"(node { experimental_debug_info { original_node_names: "x" } })",
    R"(node { attr { key: "i" value { i: -0 } } })",
};

const std::vector<std::string> k_refused = {
    "}",
    "node {",
    R"(node { name: "a" )",
    R"(node { name: "a" >)",
    R"(node { name "a" })",
    R"(node { name: a })",
    R"(node { name: "a" name: "b" })",
    R"(versions { } versions { })",
    R"(node { attr { key: "k" value { s: "" i: 1 } } })",
    R"(node { name: "a\q" })",
    R"(node { name: "a\x" })",
    R"(node { name: "\u12" })",
    "node { name: \"a\nb\" }",
    R"(node { name: "a })",
    "node { name: \"a\" }\x01",
    std::string("node { name: \"a\" }\0", 20),
    std::string("node { name: \"a\0b\" }", 21),
    "node { name: \"a\" } \xc3\xa9",
    R"(node { attr { key: "i" value { i: 9223372036854775808 } } })",
    R"(node { attr { key: "i" value { i: -9223372036854775809 } } })",
    R"(node { attr { key: "i" value { i: 1.5 } } })",
    R"(node { attr { key: "i" value { i: 08 } } })",
    R"(node { attr { key: "i" value { i: 0x } } })",
    R"(node { attr { key: "i" value { i: 0x1.5 } } })",
    R"(node { attr { key: "i" value { i: 12abc } } })",
    R"(node { attr { key: "f" value { f: 1.5.3 } } })",
    R"(node { attr { key: "f" value { f: 1e } } })",
    R"(node { attr { key: "f" value { f: 0x10 } } })",
    R"(node { attr { key: "f" value { f: 010 } } })",
    R"(node { attr { key: "f" value { f: infinite } } })",
    R"(node { attr { key: "b" value { b: 2 } } })",
    R"(node { attr { key: "b" value { b: yes } } })",
    R"(node { attr { key: "t" value { type: DT_NOPE } } })",
    R"(node { attr { key: "t" value { type: 2147483648 } } })",
    R"(versions { producer: 2147483648 })",
    R"(versions { producer: -2147483649 })",
    R"(node { name: ["a"] })",
    R"(node { input: ["a" "b"] })",
    R"(node { input: ["a",] })",
    R"(unknown: -"x")",
    R"(unknown: -abc)",
    R"(unknown: { a: 1 )",
    R"(unknown: [1, 2)",
    R"([ext.name: 1)",
    R"(node { name: "a" }, , node { })",
    R"(node.name: "a")",
    R"([type.googleapis.com/foo.Bar] { x: 1 })",
    R"(node { name: "\U00200000" })",
    R"(node { name: "\U0000004" })",
    R"(unknown: 1, node { })",
    R"(node { unknown: [] })",
    R"(node { unknown [ {} ] })",
    R"(node { name: "a" } x.5: 1)",
};

TEST_CASE("the text reader accepts what protobuf accepts and builds the same GraphDef", "[graph]") {
  for (const auto& text : k_accepted) check_same_as_protobuf(text);
}

TEST_CASE("the text reader refuses what protobuf refuses", "[graph]") {
  for (const auto& text : k_refused) check_same_as_protobuf(text);
}

TEST_CASE("nesting: up to 100 levels as protobuf, deeper refused where protobuf's stack overflows", "[graph]") {
  for (int depth : {10, 32, 33, 99, 100, 101, 5000}) {
    INFO("depth " << depth);
    // AttrValue nests through func { attr { value { func ... } } }: three levels a step,
    // after node { attr { value { ... } } }.
    std::string known = "node { attr { key: \"k\" value { ";
    for (int i = 0; i < depth; ++i) known += "func { attr { key: \"k\" value { ";
    for (int i = 0; i < depth; ++i) known += "} } } ";
    known += "} } }";
    std::string unknown, lists = "u: ";
    for (int i = 0; i < depth; ++i) unknown += "u { ";
    unknown += "x: 1 ";
    for (int i = 0; i < depth; ++i) unknown += "} ";
    lists += std::string(static_cast<size_t>(depth), '[') + "1" + std::string(static_cast<size_t>(depth), ']');
    for (const auto& [text, levels] : {std::pair{known, 3 + 3 * depth}, std::pair{unknown, depth}, std::pair{lists, depth}}) {
      if (levels <= 100) {
        check_same_as_protobuf(text);
      } else {
        tf::GraphDef def;
        const status s = graph::parse_text_message(text, &def);
        REQUIRE_FALSE(s.ok());
        CHECK(s.message().find("Message nesting deeper than 100 levels.") != std::string::npos);
      }
    }
  }
}

TEST_CASE("errors name the line and column", "[graph]") {
  tf::GraphDef def;
  const status s = graph::parse_text_message("node {\n  name: \"a\"\n  name: \"b\"\n}\n", &def);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message() == "3:7: Non-repeated field \"name\" is specified multiple times.");
  const status bad = graph::parse_text_message("node { name: 12x }", &def);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.message().rfind("1:16: Need space between number and identifier.", 0) == 0);
  auto through_io = graph::parse_graph_def_text("node {", "model.pbtxt");
  REQUIRE_FALSE(through_io.ok());
  CHECK(through_io.error().message().rfind("model.pbtxt:1:", 0) == 0);
}

// Mutations of valid GraphDefs (bytes replaced, inserted, deleted; pieces swapped): the
// verdicts and messages stay the same as protobuf's. The fuzz target does this at scale.
TEST_CASE("random mutations of GraphDefs get protobuf's verdict", "[graph]") {
  const std::string alphabet = "{}<>[]:;,-.\"'\\ \n#0123456789xefEFabnu_nodeattr";
  std::mt19937 rng(20261203);
  int accepted = 0;
  for (int round = 0; round < 4000; ++round) {
    std::string text = k_accepted[rng() % k_accepted.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0: text[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: text.insert(text.begin() + static_cast<long>(at), alphabet[rng() % alphabet.size()]); break;
        default: text.erase(at, 1 + rng() % 3); break;
      }
    }
    tf::GraphDef reference;
    const bool reference_ok = reference_parse_text(text, &reference);
    accepted += reference_ok ? 1 : 0;
    check_same_as_protobuf(text);
  }
  CHECK(accepted > 200);  // the mutations keep exercising the accepting paths
}

}  // namespace
}  // namespace troupe
