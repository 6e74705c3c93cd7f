// The helper ops of gradients (BroadcastGradientArgs, ReluGrad, TanhGrad, SigmoidGrad,
// SqrtGrad, RsqrtGrad, Sign, Slice, Unpack, InvertPermutation, ConcatOffset): kernels
// against hand-computed or reference values, their error paths, and shape functions.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/op_registry.h"
#include "graph/ops.h"
#include "kernels/kernel_runner.h"

namespace troupe {
namespace {

tf::NodeDef make_node(const std::string& op, std::vector<std::pair<std::string, tf::AttrValue>> attrs) {
  tf::NodeDef node;
  node.set_name(op);
  node.set_op(op);
  for (auto& [name, value] : attrs) (*node.mutable_attr())[name] = value;
  return node;
}

template <class T>
std::vector<T> values_of(const tensor& t) {
  auto f = t.flat<T>();
  return {f.begin(), f.end()};
}

TEST_CASE("BroadcastGradientArgs gives the axes each operand was broadcast over", "[kernels]") {
  auto run = [](std::vector<std::int32_t> a, std::vector<std::int32_t> b) {
    auto out = kernels::run_kernel(make_node("BroadcastGradientArgs", {{"T", graph::attr_value(dtype::int32)}}),
                                   {tensor::from_vector(a), tensor::from_vector(b)});
    REQUIRE(out.ok());
    return std::make_pair(values_of<std::int32_t>((*out)[0]), values_of<std::int32_t>((*out)[1]));
  };
  auto [r0, r1] = run({2, 3}, {3});
  CHECK(r0.empty());
  CHECK(r1 == std::vector<std::int32_t>{0});
  std::tie(r0, r1) = run({2, 1}, {1, 3});
  CHECK(r0 == std::vector<std::int32_t>{1});
  CHECK(r1 == std::vector<std::int32_t>{0});
  std::tie(r0, r1) = run({}, {2, 3});
  CHECK(r0 == std::vector<std::int32_t>{0, 1});
  CHECK(r1.empty());
  std::tie(r0, r1) = run({1, 4}, {1, 4});
  CHECK(r0 == std::vector<std::int32_t>{0});  // size-1 axes of both: harmless to sum
  CHECK(r1 == std::vector<std::int32_t>{0});

  auto out64 = kernels::run_kernel(make_node("BroadcastGradientArgs", {{"T", graph::attr_value(dtype::int64)}}),
                                   {tensor::from_vector<std::int64_t>({5, 1}), tensor::from_vector<std::int64_t>({5, 7})});
  REQUIRE(out64.ok());
  CHECK(values_of<std::int64_t>((*out64)[0]) == std::vector<std::int64_t>{1});

  auto bad = kernels::run_kernel(make_node("BroadcastGradientArgs", {{"T", graph::attr_value(dtype::int32)}}),
                                 {tensor::from_vector<std::int32_t>({2, 3}), tensor::from_vector<std::int32_t>({4})});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message().find("do not broadcast") != std::string::npos);
}

TEST_CASE("element-wise gradient kernels match their formulas", "[kernels]") {
  std::mt19937 rng(7);
  INFO("seed std::mt19937(7)");
  std::uniform_real_distribution<double> dist(0.2, 1.5);
  std::vector<double> a, b;
  for (int i = 0; i < 11; ++i) {
    a.push_back(dist(rng) * (i % 3 == 0 ? -1 : 1));
    b.push_back(dist(rng) - 0.7);
  }
  struct row {
    const char* op;
    double (*want)(double, double);
  };
  const row rows[] = {
      {"ReluGrad", [](double g, double f) { return f > 0 ? g : 0.0; }},
      {"TanhGrad", [](double y, double dy) { return dy * (1 - y * y); }},
      {"SigmoidGrad", [](double y, double dy) { return dy * y * (1 - y); }},
      {"SqrtGrad", [](double y, double dy) { return dy * 0.5 / y; }},
      {"RsqrtGrad", [](double y, double dy) { return dy * -0.5 * y * y * y; }},
  };
  for (const row& r : rows) {
    INFO(r.op);
    for (dtype type : {dtype::float32, dtype::float64}) {
      tensor ta(type, {11}), tb(type, {11});
      for (int i = 0; i < 11; ++i) {
        if (type == dtype::float32) {
          ta.data<float>()[i] = static_cast<float>(a[i]);
          tb.data<float>()[i] = static_cast<float>(b[i]);
        } else {
          ta.data<double>()[i] = a[i];
          tb.data<double>()[i] = b[i];
        }
      }
      auto out = kernels::run_kernel(make_node(r.op, {{"T", graph::attr_value(type)}}), {ta, tb});
      REQUIRE(out.ok());
      for (int i = 0; i < 11; ++i) {
        double got = type == dtype::float32 ? (*out)[0].data<float>()[i] : (*out)[0].data<double>()[i];
        double x = type == dtype::float32 ? static_cast<float>(a[i]) : a[i];
        double y = type == dtype::float32 ? static_cast<float>(b[i]) : b[i];
        CHECK(got == Approx(r.want(x, y)).epsilon(1e-5).margin(1e-6));
      }
    }
    auto mismatch = kernels::run_kernel(make_node(r.op, {{"T", graph::attr_value(dtype::float64)}}),
                                        {tensor::from_vector<double>({1, 2}), tensor::from_vector<double>({1})});
    CHECK_FALSE(mismatch.ok());
  }
}

TEST_CASE("Sign", "[kernels]") {
  auto out = kernels::run_kernel(make_node("Sign", {{"T", graph::attr_value(dtype::int32)}}),
                                 {tensor::from_vector<std::int32_t>({-5, 0, 7})});
  REQUIRE(out.ok());
  CHECK(values_of<std::int32_t>((*out)[0]) == std::vector<std::int32_t>{-1, 0, 1});
  auto f = kernels::run_kernel(make_node("Sign", {{"T", graph::attr_value(dtype::float64)}}),
                               {tensor::from_vector<double>({-0.5, 0.0, 2.0})});
  REQUIRE(f.ok());
  CHECK(values_of<double>((*f)[0]) == std::vector<double>{-1, 0, 1});
}

TEST_CASE("Slice copies a block, any dtype, size -1 to the end", "[kernels]") {
  std::vector<std::int32_t> data(24);
  for (int i = 0; i < 24; ++i) data[static_cast<std::size_t>(i)] = i;
  tensor input = tensor::from_vector(data, {2, 3, 4});
  auto node = make_node("Slice", {{"T", graph::attr_value(dtype::int32)}, {"Index", graph::attr_value(dtype::int64)}});
  auto out = kernels::run_kernel(node, {input, tensor::from_vector<std::int64_t>({1, 1, 1}),
                                        tensor::from_vector<std::int64_t>({1, -1, 2})});
  REQUIRE(out.ok());
  CHECK((*out)[0].shape() == tensor_shape{1, 2, 2});
  CHECK(values_of<std::int32_t>((*out)[0]) == std::vector<std::int32_t>{17, 18, 21, 22});

  auto d = make_node("Slice", {{"T", graph::attr_value(dtype::float64)}, {"Index", graph::attr_value(dtype::int32)}});
  auto empty = kernels::run_kernel(d, {tensor::from_vector<double>({1, 2, 3}), tensor::from_vector<std::int32_t>({3}),
                                       tensor::from_vector<std::int32_t>({0})});
  REQUIRE(empty.ok());
  CHECK((*empty)[0].num_elements() == 0);
  auto outside = kernels::run_kernel(d, {tensor::from_vector<double>({1, 2, 3}), tensor::from_vector<std::int32_t>({2}),
                                         tensor::from_vector<std::int32_t>({2})});
  REQUIRE_FALSE(outside.ok());
  CHECK(outside.error().message().find("do not lie within") != std::string::npos);
}

TEST_CASE("Unpack splits along an axis", "[kernels]") {
  tensor input = tensor::from_vector<double>({0, 1, 2, 3, 4, 5}, {2, 3});
  auto node = make_node("Unpack", {{"T", graph::attr_value(dtype::float64)}, {"num", graph::attr_value(3)},
                                   {"axis", graph::attr_value(-1)}});
  auto out = kernels::run_kernel(node, {input});
  REQUIRE(out.ok());
  REQUIRE(out->size() == 3);
  CHECK(values_of<double>((*out)[0]) == std::vector<double>{0, 3});
  CHECK(values_of<double>((*out)[2]) == std::vector<double>{2, 5});
  auto node0 = make_node("Unpack", {{"T", graph::attr_value(dtype::float64)}, {"num", graph::attr_value(2)}});
  auto rows = kernels::run_kernel(node0, {input});
  REQUIRE(rows.ok());
  CHECK(values_of<double>((*rows)[1]) == std::vector<double>{3, 4, 5});
  auto wrong = make_node("Unpack", {{"T", graph::attr_value(dtype::float64)}, {"num", graph::attr_value(4)}});
  CHECK_FALSE(kernels::run_kernel(wrong, {input}).ok());
}

TEST_CASE("InvertPermutation", "[kernels]") {
  auto node = make_node("InvertPermutation", {{"T", graph::attr_value(dtype::int32)}});
  auto out = kernels::run_kernel(node, {tensor::from_vector<std::int32_t>({2, 0, 3, 1})});
  REQUIRE(out.ok());
  CHECK(values_of<std::int32_t>((*out)[0]) == std::vector<std::int32_t>{1, 3, 0, 2});
  auto bad = kernels::run_kernel(node, {tensor::from_vector<std::int32_t>({0, 0, 1})});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message().find("not a permutation") != std::string::npos);
}

TEST_CASE("ConcatOffset", "[kernels]") {
  auto node = make_node("ConcatOffset", {{"N", graph::attr_value(3)}});
  auto out = kernels::run_kernel(node, {tensor::scalar<std::int32_t>(-1), tensor::from_vector<std::int32_t>({2, 3}),
                                        tensor::from_vector<std::int32_t>({2, 1}), tensor::from_vector<std::int32_t>({2, 5})});
  REQUIRE(out.ok());
  CHECK(values_of<std::int32_t>((*out)[0]) == std::vector<std::int32_t>{0, 0});
  CHECK(values_of<std::int32_t>((*out)[1]) == std::vector<std::int32_t>{0, 3});
  CHECK(values_of<std::int32_t>((*out)[2]) == std::vector<std::int32_t>{0, 4});
  auto bad = kernels::run_kernel(node, {tensor::scalar<std::int32_t>(1), tensor::from_vector<std::int32_t>({2, 3}),
                                        tensor::from_vector<std::int32_t>({3, 1}), tensor::from_vector<std::int32_t>({2, 5})});
  CHECK_FALSE(bad.ok());
}

TEST_CASE("shape functions of the gradient helper ops", "[kernels]") {
  auto root = graph::scope::new_root();
  auto x = ops::placeholder(root, dtype::float32, {4, 5, 6});
  auto slice = root.add("Slice", {x, ops::constant(root, tensor::from_vector<std::int32_t>({1, 0, 2})),
                                  ops::constant(root, tensor::from_vector<std::int32_t>({2, -1, 3}))});
  REQUIRE(root.ok());
  CHECK(slice.out().shape == partial_shape{2, 5, 3});
  auto parts = root.add("Unpack", {x}, {{"num", graph::attr_value(5)}, {"axis", graph::attr_value(1)}});
  REQUIRE(parts.outputs.size() == 5);
  CHECK(parts.out(4).shape == partial_shape{4, 6});
  auto args = root.add("BroadcastGradientArgs", {ops::shape(root, x), ops::shape(root, x)});
  CHECK(args.out(1).shape == partial_shape{-1});
  REQUIRE(root.ok());
  root.add("Unpack", {x}, {{"num", graph::attr_value(3)}});
  REQUIRE_FALSE(root.ok());
  CHECK(root.get_status().message().find("num is 3") != std::string::npos);
}

}  // namespace
}  // namespace troupe
