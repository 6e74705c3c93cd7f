// graph/attr: tensor_from_proto checks a TensorProto before allocating its tensor, so a
// few bytes of GraphDef that declare an absurd constant give an error naming it, never an
// exception or a wrapped-around size.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "core/buffer.h"
#include "graph/attr.h"
#include "graph/graph.h"
#include "graph/graph_io.h"

namespace troupe::graph {
namespace {

tf::TensorProto proto_of(dtype type, std::vector<std::int64_t> dims) {
  tf::TensorProto proto;
  proto.set_dtype(static_cast<tf::DataType>(type));
  for (auto d : dims) proto.mutable_tensor_shape()->add_dim()->set_size(d);
  return proto;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("A constant beyond the memory limit is RESOURCE_EXHAUSTED naming the node", "[attr]") {
  // 10^15 floats written as one value: 4 PB, more than any machine's limit.
  auto def = parse_graph_def_text(R"(
    node { name: "huge" op: "Const"
           attr { key: "dtype" value { type: DT_FLOAT } }
           attr { key: "value" value { tensor { dtype: DT_FLOAT
               tensor_shape { dim { size: 1000000 } dim { size: 1000000 } dim { size: 1000 } }
               float_val: 1 } } } })",
                                  "huge.pbtxt");
  REQUIRE(def.ok());
  auto g = graph::from_graph_def(*def);
  REQUIRE_FALSE(g.ok());
  CHECK(g.error().error_code() == code::resource_exhausted);
  CHECK(contains(g.error().message(), "attribute 'value' of node 'huge'"));
  CHECK(contains(g.error().message(), "float [1000000,1000000,1000]"));
}

TEST_CASE("tensor_content is checked against the shape before anything is allocated", "[attr]") {
  // 2^61 + 1 doubles need 2^64 + 8 bytes: 8 modulo 2^64, the bytes present.
  auto proto = proto_of(dtype::float64, {2305843009213693953});
  proto.set_tensor_content(std::string(8, '\0'));
  std::int64_t before = get_allocator_stats().allocations;
  auto t = tensor_from_proto(proto, "c");
  CHECK(get_allocator_stats().allocations == before);
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().message() ==
        "c: tensor_content has 8 bytes but double [2305843009213693953] needs 2305843009213693953 x 8");

  auto short_content = proto_of(dtype::int32, {1000000000000});
  short_content.set_tensor_content(std::string(12, '\0'));
  t = tensor_from_proto(short_content, "c");
  CHECK(get_allocator_stats().allocations == before);
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().message() == "c: tensor_content has 12 bytes but int32 [1000000000000] needs 4000000000000");

  auto too_many = proto_of(dtype::float32, {2});
  for (float v : {1.0f, 2.0f, 3.0f}) too_many.add_float_val(v);
  t = tensor_from_proto(too_many, "c");
  CHECK(get_allocator_stats().allocations == before);
  REQUIRE_FALSE(t.ok());
  CHECK(t.error().message() == "c: TensorProto has 3 values but shape [2] holds 2");
}

TEST_CASE("Short value lists repeat their last value; bool bytes read as 0 or 1", "[attr]") {
  auto proto = proto_of(dtype::int32, {5});
  proto.add_int_val(7);
  proto.add_int_val(-1);
  auto t = tensor_from_proto(proto, "c");
  REQUIRE(t.ok());
  CHECK(t->equals(tensor::from_vector<std::int32_t>({7, -1, -1, -1, -1})));

  auto zeros = tensor_from_proto(proto_of(dtype::float64, {3}), "c");
  REQUIRE(zeros.ok());
  CHECK(zeros->equals(tensor::from_vector<double>({0, 0, 0})));

  auto flags = proto_of(dtype::bool_, {3});
  flags.set_tensor_content(std::string("\x00\x02\xff", 3));
  auto b = tensor_from_proto(flags, "c");
  REQUIRE(b.ok());
  const auto* bytes = static_cast<const std::uint8_t*>(b->raw_data());
  CHECK(bytes[0] == 0);
  CHECK(bytes[1] == 1);
  CHECK(bytes[2] == 1);
}

}  // namespace troupe::graph
