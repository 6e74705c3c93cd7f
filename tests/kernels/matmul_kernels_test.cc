// MatMul: the kernel against a double-precision reference loop on random shapes (seed 42),
// every transpose combination and dtype, empty matrices, and the error paths; the shape
// function on known, unknown and mismatched shapes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "kernels/kernel_runner.h"

namespace troupe {
namespace {

using matmul_types = type_list<float, double, std::int32_t, std::int64_t>;

tf::NodeDef matmul_node(dtype type, bool transpose_a, bool transpose_b) {
  tf::NodeDef node;
  node.set_name("matmul");
  node.set_op("MatMul");
  (*node.mutable_attr())["T"] = graph::attr_value(type);
  (*node.mutable_attr())["transpose_a"] = graph::attr_value(transpose_a);
  (*node.mutable_attr())["transpose_b"] = graph::attr_value(transpose_b);
  return node;
}

template <class T>
tensor random_tensor(const tensor_shape& shape, std::mt19937& rng) {
  tensor t(dtype_of<T>, shape);
  if constexpr (std::is_floating_point_v<T>) {
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    for (T& x : t.flat<T>()) x = static_cast<T>(dist(rng));
  } else {
    std::uniform_int_distribution<int> dist(-20, 20);
    for (T& x : t.flat<T>()) x = static_cast<T>(dist(rng));
  }
  return t;
}

// Element (i, j) of op(x) for a row-major matrix x.
template <class T>
double element(const tensor& x, bool transpose, std::int64_t i, std::int64_t j) {
  std::int64_t cols = x.dim(1);
  return static_cast<double>(transpose ? x.data<T>()[j * cols + i] : x.data<T>()[i * cols + j]);
}

// Checks product == op(a) * op(b), with a tolerance scaled by sum |a_ik * b_kj| for floats
// and exactly for integers.
template <class T>
void check_product(const tensor& a, const tensor& b, bool transpose_a, bool transpose_b,
                   const tensor& product) {
  std::int64_t m = a.dim(transpose_a ? 1 : 0);
  std::int64_t k = a.dim(transpose_a ? 0 : 1);
  std::int64_t n = b.dim(transpose_b ? 0 : 1);
  REQUIRE(product.type() == dtype_of<T>);
  REQUIRE(product.shape() == tensor_shape{m, n});
  double eps = std::is_same_v<T, float> ? 1e-6 : std::is_same_v<T, double> ? 1e-14 : 0.0;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double want = 0, magnitude = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        double term = element<T>(a, transpose_a, i, p) * element<T>(b, transpose_b, p, j);
        want += term;
        magnitude += std::abs(term);
      }
      double got = static_cast<double>(product.data<T>()[i * n + j]);
      double tolerance = eps * (static_cast<double>(k) + 4) * magnitude;
      if (std::abs(got - want) > tolerance) {
        FAIL_CHECK("product(" << i << ", " << j << ") = " << got << ", want " << want
                              << " (tolerance " << tolerance << ")");
        return;
      }
    }
  }
}

template <class T>
void check_random_case(std::mt19937& rng, std::int64_t m, std::int64_t n, std::int64_t k,
                       bool transpose_a, bool transpose_b, compute_pool* pool) {
  tensor_shape a_shape = transpose_a ? tensor_shape{k, m} : tensor_shape{m, k};
  tensor_shape b_shape = transpose_b ? tensor_shape{n, k} : tensor_shape{k, n};
  tensor a = random_tensor<T>(a_shape, rng);
  tensor b = random_tensor<T>(b_shape, rng);
  INFO("dtype " << dtype_name(dtype_of<T>) << ", a " << a_shape << (transpose_a ? "^T" : "")
                << ", b " << b_shape << (transpose_b ? "^T" : "") << ", seed 42");
  auto out = kernels::run_kernel(matmul_node(dtype_of<T>, transpose_a, transpose_b), {a, b}, pool);
  REQUIRE(out.ok());
  REQUIRE(out->size() == 1);
  check_product<T>(a, b, transpose_a, transpose_b, (*out)[0]);
}

TEST_CASE("MatMul matches the reference on random shapes, transposes and dtypes") {
  std::mt19937 rng(42);
  compute_pool pool(2);
  std::uniform_int_distribution<int> size(0, 37);
  for_each_type<matmul_types>([&]<class T>() {
    for (int trial = 0; trial < 40; ++trial) {
      std::int64_t m = size(rng), n = size(rng), k = size(rng);
      for (bool transpose_a : {false, true}) {
        for (bool transpose_b : {false, true}) {
          check_random_case<T>(rng, m, n, k, transpose_a, transpose_b, &pool);
        }
      }
    }
  });
}

TEST_CASE("MatMul on larger matrices, with one and two threads") {
  std::mt19937 rng(42);
  for (int threads : {1, 2}) {
    compute_pool pool(threads);
    for_each_type<matmul_types>([&]<class T>() {
      for (bool transpose_a : {false, true}) {
        for (bool transpose_b : {false, true}) {
          check_random_case<T>(rng, 131, 97, 203, transpose_a, transpose_b, &pool);
        }
      }
      check_random_case<T>(rng, 1, 300, 257, false, false, &pool);   // a row vector
      check_random_case<T>(rng, 300, 1, 257, false, true, &pool);    // a column result
    });
  }
}

TEST_CASE("MatMul of empty matrices") {
  std::mt19937 rng(42);
  for_each_type<matmul_types>([&]<class T>() {
    INFO("dtype " << dtype_name(dtype_of<T>));
    // k = 0 gives zeros.
    for (bool transpose_a : {false, true}) {
      for (bool transpose_b : {false, true}) {
        tensor a(dtype_of<T>, transpose_a ? tensor_shape{0, 3} : tensor_shape{3, 0});
        tensor b(dtype_of<T>, transpose_b ? tensor_shape{4, 0} : tensor_shape{0, 4});
        auto out = kernels::run_kernel(matmul_node(dtype_of<T>, transpose_a, transpose_b), {a, b});
        REQUIRE(out.ok());
        const tensor& c = (*out)[0];
        REQUIRE(c.shape() == tensor_shape{3, 4});
        for (T x : c.flat<T>()) REQUIRE(x == T(0));
      }
    }
    // m = 0 or n = 0 gives an empty product.
    auto out = kernels::run_kernel(matmul_node(dtype_of<T>, false, false),
                                   {random_tensor<T>({0, 5}, rng), random_tensor<T>({5, 7}, rng)});
    REQUIRE(out.ok());
    REQUIRE((*out)[0].shape() == tensor_shape{0, 7});
    out = kernels::run_kernel(matmul_node(dtype_of<T>, false, true),
                              {random_tensor<T>({6, 5}, rng), random_tensor<T>({0, 5}, rng)});
    REQUIRE(out.ok());
    REQUIRE((*out)[0].shape() == tensor_shape{6, 0});
  });
}

TEST_CASE("MatMul rejects incompatible and non-matrix inputs") {
  tensor a(dtype::float32, {2, 3});
  tensor b(dtype::float32, {4, 5});
  SECTION("inner dimensions differ: the error names both shapes") {
    auto out = kernels::run_kernel(matmul_node(dtype::float32, false, false), {a, b});
    REQUIRE_FALSE(out.ok());
    CHECK(out.error().error_code() == code::invalid_argument);
    CHECK_THAT(out.error().message(), Catch::Contains("[2,3]") && Catch::Contains("[4,5]"));
  }
  SECTION("a transpose can make them agree, or not") {
    tensor c(dtype::float32, {2, 4});
    CHECK(kernels::run_kernel(matmul_node(dtype::float32, true, false), {c, b}).ok() == false);
    CHECK(kernels::run_kernel(matmul_node(dtype::float32, true, false), {a, c}).ok());
  }
  SECTION("vectors are not matrices") {
    auto out = kernels::run_kernel(matmul_node(dtype::float32, false, false),
                                   {tensor(dtype::float32, {3}), b});
    REQUIRE_FALSE(out.ok());
    CHECK(out.error().error_code() == code::invalid_argument);
    CHECK_THAT(out.error().message(), Catch::Contains("[3]"));
  }
  SECTION("unsupported dtype") {
    tensor x(dtype::int8, {2, 2});
    auto out = kernels::run_kernel(matmul_node(dtype::int8, false, false), {x, x});
    REQUIRE_FALSE(out.ok());
    CHECK(out.error().error_code() == code::invalid_argument);
  }
}

TEST_CASE("MatMul shape function") {
  const graph::op_def* op = graph::op_registry::builtin().find("MatMul");
  REQUIRE(op != nullptr);
  REQUIRE(op->shape);
  auto infer = [&](bool transpose_a, bool transpose_b, partial_shape a,
                   partial_shape b) -> result<partial_shape> {
    tf::NodeDef node = matmul_node(dtype::float32, transpose_a, transpose_b);
    graph::shape_context ctx(node, *op, {a, b}, {nullptr, nullptr},
                             {dtype::float32, dtype::float32}, 1);
    status s = op->shape(ctx);
    if (!s.ok()) return s;
    return ctx.outputs()[0];
  };
  CHECK(*infer(false, false, {2, 3}, {3, 5}) == partial_shape{2, 5});
  CHECK(*infer(true, true, {3, 2}, {5, 3}) == partial_shape{2, 5});
  CHECK(*infer(false, false, {-1, 3}, {-1, -1}) == partial_shape{-1, -1});
  CHECK(*infer(false, true, partial_shape::unknown(), {7, 4}) == partial_shape{-1, 7});
  auto bad = infer(false, false, {2, 3}, {4, 5});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message(), Catch::Contains("[2,3]") && Catch::Contains("[4,5]"));
  CHECK_FALSE(infer(false, false, {2, 3, 4}, {4, 5}).ok());
}

}  // namespace
}  // namespace troupe

namespace troupe {

namespace {

tf::NodeDef batch_matmul_node(const char* op, dtype type, bool adj_x, bool adj_y) {
  tf::NodeDef node;
  node.set_name("bmm");
  node.set_op(op);
  (*node.mutable_attr())["T"] = graph::attr_value(type);
  (*node.mutable_attr())["adj_x"] = graph::attr_value(adj_x);
  (*node.mutable_attr())["adj_y"] = graph::attr_value(adj_y);
  return node;
}

// Matrix `index` (row-major over the batch dimensions) of t, as a 2-D tensor.
template <class T>
tensor matrix_at(const tensor& t, std::int64_t index) {
  const std::int64_t rows = t.dim(t.rank() - 2), cols = t.dim(t.rank() - 1);
  tensor out(dtype_of<T>, {rows, cols});
  std::copy_n(t.data<T>() + index * rows * cols, rows * cols, out.data<T>());
  return out;
}

// Which matrix of an operand with batch dimensions `dims` (aligned on the right) the
// output's batch multi-index `at` reads: broadcast dimensions (size 1) read index 0.
std::int64_t operand_matrix(const std::vector<std::int64_t>& dims, const std::vector<std::int64_t>& at) {
  std::int64_t index = 0;
  const std::size_t skip = at.size() - dims.size();
  for (std::size_t d = 0; d < dims.size(); ++d) index = index * dims[d] + (dims[d] == 1 ? 0 : at[skip + d]);
  return index;
}

template <class T>
void check_batch_case(std::mt19937& rng, const tensor_shape& xs, const tensor_shape& ys, bool adj_x, bool adj_y) {
  tensor x = random_tensor<T>(xs, rng), y = random_tensor<T>(ys, rng);
  INFO("dtype " << dtype_name(dtype_of<T>) << ", x " << xs << (adj_x ? "^T" : "") << ", y " << ys
                << (adj_y ? "^T" : ""));
  auto out = kernels::run_kernel(batch_matmul_node("BatchMatMulV2", dtype_of<T>, adj_x, adj_y), {x, y});
  REQUIRE(out.ok());
  const tensor& z = (*out)[0];
  std::vector<std::int64_t> xb(xs.dims().begin(), xs.dims().end() - 2), yb(ys.dims().begin(), ys.dims().end() - 2);
  std::vector<std::int64_t> zb(z.shape().dims().begin(), z.shape().dims().end() - 2);
  std::int64_t batches = 1;
  for (std::int64_t d : zb) batches *= d;
  std::vector<std::int64_t> at(zb.size(), 0);
  for (std::int64_t b = 0; b < batches; ++b) {
    INFO("output matrix " << b);
    check_product<T>(matrix_at<T>(x, operand_matrix(xb, at)), matrix_at<T>(y, operand_matrix(yb, at)), adj_x, adj_y,
                     matrix_at<T>(z, b));
    for (int d = static_cast<int>(zb.size()) - 1; d >= 0; --d) {
      if (++at[static_cast<std::size_t>(d)] < zb[static_cast<std::size_t>(d)]) break;
      at[static_cast<std::size_t>(d)] = 0;
    }
  }
}

}  // namespace

TEST_CASE("BatchMatMulV2 matches per-matrix products, with broadcast batch dimensions and adjoints") {
  std::mt19937 rng(42);
  struct shapes {
    tensor_shape x, y;  // without adjoints: [..., m, k] and [..., k, n]
  };
  const shapes cases[] = {{{2, 3, 4}, {2, 4, 5}}, {{3, 4}, {2, 4, 5}}, {{2, 1, 3, 4}, {3, 4, 2}},
                          {{1, 3, 4}, {5, 4, 2}}, {{2, 3, 0}, {2, 0, 4}}, {{0, 3, 4}, {4, 2}}};
  for_each_type<matmul_types>([&]<class T>() {
    for (const shapes& c : cases) {
      for (bool adj_x : {false, true}) {
        for (bool adj_y : {false, true}) {
          auto swap_last = [](tensor_shape s) {
            std::vector<std::int64_t> d = s.dims();
            std::swap(d[d.size() - 1], d[d.size() - 2]);
            return tensor_shape(d);
          };
          check_batch_case<T>(rng, adj_x ? swap_last(c.x) : c.x, adj_y ? swap_last(c.y) : c.y, adj_x, adj_y);
        }
      }
    }
  });
}

TEST_CASE("BatchMatMul errors name the shapes; version 1 does not broadcast") {
  auto run = [](const char* op, tensor_shape xs, tensor_shape ys) {
    return kernels::run_kernel(batch_matmul_node(op, dtype::float32, false, false),
                               {tensor::zeros(dtype::float32, xs), tensor::zeros(dtype::float32, ys)});
  };
  auto inner = run("BatchMatMulV2", {2, 3, 4}, {2, 5, 6});
  REQUIRE_FALSE(inner.ok());
  CHECK_THAT(inner.error().message(), Catch::Contains("matrix size-incompatible") && Catch::Contains("[2,3,4]"));
  auto batch = run("BatchMatMulV2", {2, 3, 4}, {3, 4, 6});
  REQUIRE_FALSE(batch.ok());
  CHECK_THAT(batch.error().message(), Catch::Contains("do not broadcast"));
  auto rank = run("BatchMatMulV2", {4}, {4, 6});
  REQUIRE_FALSE(rank.ok());
  CHECK_THAT(rank.error().message(), Catch::Contains("rank 2 or more"));
  auto v1 = run("BatchMatMul", {1, 3, 4}, {2, 4, 6});
  REQUIRE_FALSE(v1.ok());
  CHECK_THAT(v1.error().message(), Catch::Contains("batch dimensions differ"));
  REQUIRE(run("BatchMatMul", {2, 3, 4}, {2, 4, 6}).ok());
}

}  // namespace troupe
