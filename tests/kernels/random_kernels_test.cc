// Random kernels (RandomUniform, RandomStandardNormal, TruncatedNormal): seeding as
// TensorFlow (same seeds replay the same sequence of tensors from a fresh kernel, seed =
// seed2 = 0 is non-deterministic), values independent of the pool's thread count, and the
// moments of each distribution on 100k samples for float and double.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "kernels/kernel_registry.h"
#include "kernels/kernel_runner.h"

namespace troupe {
namespace {

const char* const k_random_ops[] = {"RandomUniform", "RandomStandardNormal", "TruncatedNormal"};

compute_pool& pool_of(int threads) {
  static compute_pool one(1);
  static compute_pool two(2);
  static compute_pool four(4);
  return threads == 1 ? one : threads == 2 ? two : four;
}

tf::NodeDef random_node(const std::string& op, dtype type, std::int64_t seed, std::int64_t seed2,
                        dtype shape_type = dtype::int32) {
  tf::NodeDef node;
  node.set_name("random");
  node.set_op(op);
  (*node.mutable_attr())["dtype"] = graph::attr_value(type);
  (*node.mutable_attr())["T"] = graph::attr_value(shape_type);
  (*node.mutable_attr())["seed"] = graph::attr_value(seed);
  (*node.mutable_attr())["seed2"] = graph::attr_value(seed2);
  return node;
}

tensor shape_input(const tensor_shape& shape, dtype type = dtype::int32) {
  if (type == dtype::int64) return tensor::from_vector<std::int64_t>(shape.dims());
  std::vector<std::int32_t> dims(shape.dims().begin(), shape.dims().end());
  return tensor::from_vector<std::int32_t>(dims);
}

// A kernel built once and run several times, as an executor runs it across steps.
class random_kernel_instance {
 public:
  explicit random_kernel_instance(tf::NodeDef node) : node_(std::move(node)) {
    const graph::op_def* op = graph::op_registry::builtin().find(node_.op());
    REQUIRE(op != nullptr);
    REQUIRE(graph::add_defaults_and_validate_attrs(*op, &node_).ok());
    std::vector<dtype> input_types;
    REQUIRE(graph::input_output_types(*op, node_, &input_types, &output_types_).ok());
    auto kernel =
        kernels::kernel_registry::builtin().create("CPU", node_, *op, input_types, output_types_);
    if (!kernel.ok()) FAIL(kernel.error().to_string());
    kernel_ = std::move(*kernel);
  }

  tensor run(const tensor_shape& shape, int threads = 1, dtype shape_type = dtype::int32) {
    kernels::step_info step;
    step.pool = &pool_of(threads);
    std::vector<tensor> inputs = {shape_input(shape, shape_type)};
    std::vector<tensor> outputs(1);
    kernels::kernel_context ctx(inputs, outputs, output_types_, step);
    kernel_->compute(ctx);
    if (!ctx.ok()) FAIL(ctx.get_status().to_string());
    REQUIRE(outputs[0].shape() == shape);
    return outputs[0];
  }

 private:
  tf::NodeDef node_;
  std::vector<dtype> output_types_;
  std::unique_ptr<kernels::op_kernel> kernel_;
};

TEST_CASE("Random ops are stateful and give fully known shapes from a constant shape", "[random]") {
  for (const char* op : k_random_ops) {
    INFO(op);
    const graph::op_def* def = graph::op_registry::builtin().find(op);
    REQUIRE(def != nullptr);
    CHECK(def->is_stateful);
    tf::NodeDef node = random_node(op, dtype::float32, 1, 2, dtype::int64);
    REQUIRE(graph::add_defaults_and_validate_attrs(*def, &node).ok());
    tensor shape = tensor::from_vector<std::int64_t>({3, 4});
    graph::shape_context known(node, *def, {partial_shape{2}}, {&shape}, {dtype::int64}, 1);
    REQUIRE(def->shape(known).ok());
    CHECK(known.outputs()[0] == partial_shape{3, 4});
    graph::shape_context rank_only(node, *def, {partial_shape{2}}, {nullptr}, {dtype::int64}, 1);
    REQUIRE(def->shape(rank_only).ok());
    CHECK(rank_only.outputs()[0] == partial_shape{-1, -1});
    tensor negative = tensor::from_vector<std::int64_t>({3, -4});
    graph::shape_context bad(node, *def, {partial_shape{2}}, {&negative}, {dtype::int64}, 1);
    CHECK_FALSE(def->shape(bad).ok());
  }
}

TEST_CASE("Same seeds replay the same sequence of tensors from a fresh kernel", "[random]") {
  for (const char* op : k_random_ops) {
    for (dtype type : {dtype::float32, dtype::float64}) {
      INFO(op << " " << dtype_name(type));
      random_kernel_instance a(random_node(op, type, 42, 7));
      tensor a1 = a.run({5, 7});
      tensor a2 = a.run({5, 7});
      tensor a3 = a.run({3});
      CHECK_FALSE(a1.equals(a2));  // consecutive calls differ

      random_kernel_instance b(random_node(op, type, 42, 7, dtype::int64));
      CHECK(b.run({5, 7}, 1, dtype::int64).equals(a1));
      CHECK(b.run({5, 7}, 2, dtype::int64).equals(a2));
      CHECK(b.run({3}, 4, dtype::int64).equals(a3));

      // Either seed alone is enough to make the op deterministic, and each matters.
      random_kernel_instance other_seed(random_node(op, type, 43, 7));
      CHECK_FALSE(other_seed.run({5, 7}).equals(a1));
      random_kernel_instance other_seed2(random_node(op, type, 42, 8));
      CHECK_FALSE(other_seed2.run({5, 7}).equals(a1));
      random_kernel_instance only_seed2_1(random_node(op, type, 0, 3));
      random_kernel_instance only_seed2_2(random_node(op, type, 0, 3));
      CHECK(only_seed2_1.run({16}).equals(only_seed2_2.run({16})));
    }
  }
}

TEST_CASE("seed = seed2 = 0 draws a fresh seed for every kernel", "[random]") {
  for (const char* op : k_random_ops) {
    INFO(op);
    random_kernel_instance a(random_node(op, dtype::float32, 0, 0));
    random_kernel_instance b(random_node(op, dtype::float32, 0, 0));
    CHECK_FALSE(a.run({64}).equals(b.run({64})));
  }
}

TEST_CASE("Random values do not depend on the pool's thread count", "[random]") {
  // Large enough that parallel_for splits the work.
  tensor_shape shape{1000, 203};
  for (const char* op : k_random_ops) {
    for (dtype type : {dtype::float32, dtype::float64}) {
      INFO(op << " " << dtype_name(type));
      random_kernel_instance one(random_node(op, type, 5, 6));
      random_kernel_instance two(random_node(op, type, 5, 6));
      random_kernel_instance four(random_node(op, type, 5, 6));
      for (int call = 0; call < 2; ++call) {
        tensor expected = one.run(shape, 1);
        CHECK(two.run(shape, 2).equals(expected));
        CHECK(four.run(shape, 4).equals(expected));
      }
    }
  }
}

TEST_CASE("Random ops through run_kernel, including empty shapes", "[random]") {
  for (const char* op : k_random_ops) {
    INFO(op);
    auto out = kernels::run_kernel(random_node(op, dtype::float64, 1, 1),
                                   {tensor::from_vector<std::int32_t>({2, 0, 3})});
    REQUIRE(out.ok());
    CHECK((*out)[0].shape() == tensor_shape{2, 0, 3});
    auto scalar =
        kernels::run_kernel(random_node(op, dtype::float32, 1, 1), {tensor(dtype::int32, {0})});
    REQUIRE(scalar.ok());
    CHECK((*scalar)[0].shape() == tensor_shape{});
    auto bad = kernels::run_kernel(random_node(op, dtype::float32, 1, 1),
                                   {tensor::from_vector<std::int32_t>({2, -3})});
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(bad.error().message(), Catch::Contains("2, -3"));
    auto matrix = kernels::run_kernel(random_node(op, dtype::float32, 1, 1),
                                      {tensor::from_vector<std::int32_t>({2, 3}, {1, 2})});
    REQUIRE_FALSE(matrix.ok());
    CHECK_THAT(matrix.error().message(), Catch::Contains("vector"));
  }
}

TEST_CASE("Random values follow TensorFlow's layout of the Philox stream", "[random]") {
  // Call k starts at block k * 256 * n of philox(seed, seed2); fixed-cost distributions use
  // the blocks in order (4 floats or 2 doubles per block).
  const std::int64_t n = 10;
  philox stream(99, 5);
  std::vector<float> uniform_floats, normal_floats;
  std::vector<double> uniform_doubles;
  for (int call = 0; call < 2; ++call) {
    philox gen = stream;
    for (int b = 0; b < 3; ++b) {
      philox::block block = gen.next();
      for (std::uint32_t x : block) uniform_floats.push_back(uint32_to_float(x));
      uniform_doubles.push_back(uint64_to_double(block[0], block[1]));
      uniform_doubles.push_back(uint64_to_double(block[2], block[3]));
      for (std::size_t pair = 0; pair < 2; ++pair) {
        auto z = box_muller(uint32_to_float(block[2 * pair]), uint32_to_float(block[2 * pair + 1]));
        normal_floats.push_back(static_cast<float>(z[0]));
        normal_floats.push_back(static_cast<float>(z[1]));
      }
    }
    stream.skip(static_cast<std::uint64_t>(n) * 256);
  }
  random_kernel_instance uniform_float(random_node("RandomUniform", dtype::float32, 99, 5));
  random_kernel_instance uniform_double(random_node("RandomUniform", dtype::float64, 99, 5));
  random_kernel_instance normal_float(random_node("RandomStandardNormal", dtype::float32, 99, 5));
  for (int call = 0; call < 2; ++call) {
    INFO("call " << call);
    tensor u = uniform_float.run({n});
    tensor d = uniform_double.run({n});
    tensor z = normal_float.run({n});
    for (std::int64_t i = 0; i < n; ++i) {
      auto at = static_cast<std::size_t>(call * 12 + i);
      auto at_double = static_cast<std::size_t>(call * 6 + i);
      INFO("element " << i);
      if (i < 6) CHECK(d.data<double>()[i] == uniform_doubles[at_double]);
      CHECK(u.data<float>()[i] == uniform_floats[at]);
      CHECK(z.data<float>()[i] == normal_floats[at]);
    }
  }
}

TEST_CASE("TruncatedNormal keeps the first candidates within 2 of each group's stream",
          "[random]") {
  // Group g of 4 floats starts at block 256 * g and takes the candidates in order.
  const std::int64_t n = 4000;
  random_kernel_instance k(random_node("TruncatedNormal", dtype::float32, 17, 4));
  tensor t = k.run({n}, 2);
  bool all_match = true;
  for (std::int64_t g = 0; g < n / 4; ++g) {
    philox gen(17, 4);
    gen.skip(static_cast<std::uint64_t>(g) * 256);
    std::vector<float> kept;
    while (kept.size() < 4) {
      philox::block block = gen.next();
      for (std::size_t pair = 0; pair < 2; ++pair) {
        auto z = box_muller(uint32_to_float(block[2 * pair]), uint32_to_float(block[2 * pair + 1]));
        for (double v : z) {
          auto f = static_cast<float>(v);
          if (kept.size() < 4 && std::abs(f) < 2.0f) kept.push_back(f);
        }
      }
    }
    for (std::int64_t i = 0; i < 4; ++i) {
      all_match &= t.data<float>()[g * 4 + i] == kept[static_cast<std::size_t>(i)];
    }
  }
  CHECK(all_match);
}

struct moments {
  double mean = 0, variance = 0, min = INFINITY, max = -INFINITY;
};

template <class T>
moments moments_of(const tensor& t) {
  moments m;
  double sum = 0, sum_squares = 0;
  for (T x : t.flat<T>()) {
    double v = static_cast<double>(x);
    sum += v;
    sum_squares += v * v;
    m.min = std::min(m.min, v);
    m.max = std::max(m.max, v);
  }
  double n = static_cast<double>(t.num_elements());
  m.mean = sum / n;
  m.variance = sum_squares / n - m.mean * m.mean;
  return m;
}

moments moments_of(const tensor& t) {
  return t.type() == dtype::float32 ? moments_of<float>(t) : moments_of<double>(t);
}

TEST_CASE("Random distributions have the right moments", "[random]") {
  // 100k samples: the standard error of the mean is ~0.003 for unit variance.
  tensor_shape shape{100000};
  // Variance of a standard normal truncated to (-2, 2).
  const double truncated_variance = 1.0 - 4.0 * std::exp(-2.0) / std::sqrt(2.0 * std::numbers::pi) /
                                              std::erf(2.0 / std::sqrt(2.0));
  for (dtype type : {dtype::float32, dtype::float64}) {
    INFO(dtype_name(type));
    {
      random_kernel_instance k(random_node("RandomUniform", type, 1234, 1));
      moments m = moments_of(k.run(shape, 4));
      CHECK(m.mean == Approx(0.5).margin(0.005));
      CHECK(m.variance == Approx(1.0 / 12).margin(0.002));
      CHECK(m.min >= 0.0);
      CHECK(m.max < 1.0);
    }
    {
      random_kernel_instance k(random_node("RandomStandardNormal", type, 1234, 2));
      moments m = moments_of(k.run(shape, 4));
      CHECK(m.mean == Approx(0.0).margin(0.015));
      CHECK(m.variance == Approx(1.0).margin(0.02));
      CHECK(m.max > 3.0);  // tails are present
    }
    {
      random_kernel_instance k(random_node("TruncatedNormal", type, 1234, 3));
      moments m = moments_of(k.run(shape, 4));
      CHECK(m.mean == Approx(0.0).margin(0.015));
      CHECK(m.variance == Approx(truncated_variance).margin(0.015));
      CHECK(m.min >= -2.0);
      CHECK(m.max <= 2.0);
      CHECK(m.max > 1.9);
    }
  }
}

}  // namespace
}  // namespace troupe
