// Sum, Mean, Max, Min, Prod, ArgMax, ArgMin: the kernels against reference loops over
// every element (double accumulation for floats, exact int64 arithmetic for integers) on
// random shapes and axis sets (seed 42), every dtype and index type, keep_dims, negative
// and empty axes, empty tensors, large inputs that take the parallel paths, and the error
// paths; the shape functions with known and unknown axes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "kernels/kernel_runner.h"

namespace troupe {
namespace {

using reduction_types = type_list<float, double, std::int8_t, std::int16_t, std::int32_t,
                                  std::int64_t, std::uint8_t, std::uint16_t>;

enum class reduction { sum, mean, max, min, prod };

const char* op_name(reduction r) {
  switch (r) {
    case reduction::sum: return "Sum";
    case reduction::mean: return "Mean";
    case reduction::max: return "Max";
    case reduction::min: return "Min";
    case reduction::prod: return "Prod";
  }
  return "?";
}

tf::NodeDef reduction_node(const std::string& op, dtype type, dtype index_type, bool keep_dims) {
  tf::NodeDef node;
  node.set_name("reduce");
  node.set_op(op);
  (*node.mutable_attr())["T"] = graph::attr_value(type);
  (*node.mutable_attr())["Tidx"] = graph::attr_value(index_type);
  (*node.mutable_attr())["keep_dims"] = graph::attr_value(keep_dims);
  return node;
}

tensor axes_tensor(const std::vector<std::int64_t>& axes, dtype index_type, bool as_scalar = false) {
  tensor_shape shape = as_scalar ? tensor_shape{} : tensor_shape{static_cast<std::int64_t>(axes.size())};
  tensor t(index_type, shape);
  visit_dtype<index_types>(index_type, [&]<class I>() {
    for (std::size_t i = 0; i < axes.size(); ++i) t.data<I>()[i] = static_cast<I>(axes[i]);
  });
  return t;
}

// Values for which every reference below is exact or well conditioned: small integers,
// floats in [-1, 1], and for Prod magnitudes near 1 so long products neither vanish nor
// explode.
template <class T>
tensor random_tensor(const tensor_shape& shape, std::mt19937& rng, reduction r) {
  tensor t(dtype_of<T>, shape);
  if constexpr (std::is_floating_point_v<T>) {
    std::uniform_real_distribution<double> dist(r == reduction::prod ? 0.6 : -1.0, r == reduction::prod ? 1.4 : 1.0);
    std::bernoulli_distribution negative(0.5);
    for (T& x : t.flat<T>()) {
      double v = dist(rng);
      if (r == reduction::prod && negative(rng)) v = -v;
      x = static_cast<T>(v);
    }
  } else {
    int low = std::is_signed_v<T> ? -9 : 0;
    if (r == reduction::prod) low = std::is_signed_v<T> ? -2 : 1;
    int high = r == reduction::prod ? 2 : 9;
    std::uniform_int_distribution<int> dist(low, high);
    for (T& x : t.flat<T>()) x = static_cast<T>(dist(rng));
  }
  return t;
}

// The expected output of a reduction: values and per-element tolerances.
struct expectation {
  tensor_shape shape;
  std::vector<double> values;
  std::vector<double> tolerances;
};

template <class T>
expectation reference_reduction(const tensor& input, const std::vector<bool>& reduced,
                                bool keep_dims, reduction r) {
  expectation e;
  int rank = input.rank();
  std::vector<std::int64_t> out_strides(static_cast<std::size_t>(rank), 0);
  std::int64_t out_size = 1, count = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (!reduced[static_cast<std::size_t>(i)]) {
      out_strides[static_cast<std::size_t>(i)] = out_size;
      out_size *= input.dim(i);
    } else {
      count *= input.dim(i);
    }
  }
  for (int i = 0; i < rank; ++i) {
    if (!reduced[static_cast<std::size_t>(i)]) e.shape.add_dim(input.dim(i));
    else if (keep_dims) e.shape.add_dim(1);
  }
  bool floating = std::is_floating_point_v<T>;
  double init = 0;
  if (r == reduction::prod) init = 1;
  if (r == reduction::max) init = floating ? -INFINITY : static_cast<double>(std::numeric_limits<T>::lowest());
  if (r == reduction::min) init = floating ? INFINITY : static_cast<double>(std::numeric_limits<T>::max());
  std::vector<double> acc(static_cast<std::size_t>(out_size), init);
  // Exact integer results, modulo 2^64 (the narrowing below then wraps as T does).
  std::vector<std::uint64_t> exact(static_cast<std::size_t>(out_size), r == reduction::prod ? 1 : 0);
  std::vector<double> magnitude(static_cast<std::size_t>(out_size), 0.0);
  std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0);
  const T* in = input.data<T>();
  for (std::int64_t flat = 0; flat < input.num_elements(); ++flat) {
    std::int64_t o = 0;
    for (int i = 0; i < rank; ++i) o += index[static_cast<std::size_t>(i)] * out_strides[static_cast<std::size_t>(i)];
    double x = static_cast<double>(in[flat]);
    auto& a = acc[static_cast<std::size_t>(o)];
    auto& n = exact[static_cast<std::size_t>(o)];
    switch (r) {
      case reduction::sum:
      case reduction::mean: a += x; n += static_cast<std::uint64_t>(static_cast<std::int64_t>(in[flat])); break;
      case reduction::prod: a *= x; n *= static_cast<std::uint64_t>(static_cast<std::int64_t>(in[flat])); break;
      case reduction::max: a = std::max(a, x); break;
      case reduction::min: a = std::min(a, x); break;
    }
    magnitude[static_cast<std::size_t>(o)] += std::abs(x);
    for (int i = rank - 1; i >= 0; --i) {
      if (++index[static_cast<std::size_t>(i)] < input.dim(i)) break;
      index[static_cast<std::size_t>(i)] = 0;
    }
  }
  double eps = std::is_same_v<T, float> ? 1.2e-7 : 2.3e-16;
  for (std::int64_t o = 0; o < out_size; ++o) {
    double a = acc[static_cast<std::size_t>(o)];
    std::uint64_t n = exact[static_cast<std::size_t>(o)];
    double tolerance = 0;
    if (!floating) {
      // Sum and Prod wrap as the type does; Mean is the truncated quotient of the exact sum.
      if (r == reduction::sum || r == reduction::prod) a = static_cast<double>(static_cast<T>(n));
      if (r == reduction::mean) {
        a = count == 0 ? 0.0 : static_cast<double>(static_cast<T>(static_cast<std::int64_t>(n) / count));
      }
    } else {
      if (r == reduction::mean) a /= static_cast<double>(count);
      if (r == reduction::sum || r == reduction::mean) {
        tolerance = 2 * eps * static_cast<double>(count + 2) * magnitude[static_cast<std::size_t>(o)] /
                    (r == reduction::mean ? std::max<double>(1, static_cast<double>(count)) : 1.0);
      }
      if (r == reduction::prod) {
        // Long products may underflow in T: allow for the smallest normal numbers.
        tolerance = 2 * eps * static_cast<double>(count + 2) * std::abs(a) +
                    4 * static_cast<double>(std::numeric_limits<T>::min());
      }
    }
    e.values.push_back(a);
    e.tolerances.push_back(tolerance);
  }
  return e;
}

template <class T>
void check_against(const tensor& got, const expectation& want) {
  REQUIRE(got.type() == dtype_of<T>);
  REQUIRE(got.shape() == want.shape);
  for (std::size_t i = 0; i < want.values.size(); ++i) {
    double g = static_cast<double>(got.data<T>()[i]);
    double w = want.values[i];
    bool same = (std::isnan(g) && std::isnan(w)) || g == w || std::abs(g - w) <= want.tolerances[i];
    if (!same) {
      FAIL_CHECK("output[" << i << "] = " << g << ", want " << w << " (tolerance "
                           << want.tolerances[i] << ")");
      return;
    }
  }
}

std::string axes_string(const std::vector<std::int64_t>& axes) {
  std::string s = "{";
  for (auto a : axes) s += std::to_string(a) + ",";
  return s + "}";
}

// Runs `r` on `input` over `axes` and compares with the reference.
template <class T>
void check_reduction(reduction r, const tensor& input, const std::vector<std::int64_t>& axes,
                     bool keep_dims, dtype index_type, compute_pool* pool) {
  INFO(op_name(r) << " dtype " << dtype_name(dtype_of<T>) << " input " << input.shape()
                  << " axes " << axes_string(axes) << " keep_dims " << keep_dims << " Tidx "
                  << dtype_name(index_type) << ", seed 42");
  std::vector<bool> reduced(static_cast<std::size_t>(input.rank()), false);
  for (auto a : axes) reduced[static_cast<std::size_t>(a < 0 ? a + input.rank() : a)] = true;
  auto out = kernels::run_kernel(reduction_node(op_name(r), dtype_of<T>, index_type, keep_dims),
                                 {input, axes_tensor(axes, index_type)}, pool);
  REQUIRE(out.ok());
  check_against<T>((*out)[0], reference_reduction<T>(input, reduced, keep_dims, r));
}

// A random subset of [0, rank) in random order, each axis written negative half the time.
std::vector<std::int64_t> random_axes(int rank, std::mt19937& rng) {
  std::vector<std::int64_t> axes;
  std::bernoulli_distribution pick(0.5), negative(0.5);
  for (int i = 0; i < rank; ++i) {
    if (pick(rng)) axes.push_back(negative(rng) ? i - rank : i);
  }
  std::shuffle(axes.begin(), axes.end(), rng);
  return axes;
}

tensor_shape random_shape(std::mt19937& rng, int max_rank, int max_dim) {
  std::uniform_int_distribution<int> rank_dist(0, max_rank), dim_dist(0, max_dim);
  std::bernoulli_distribution allow_zero(0.1);
  tensor_shape shape;
  int rank = rank_dist(rng);
  for (int i = 0; i < rank; ++i) {
    int d = dim_dist(rng);
    if (d == 0 && !allow_zero(rng)) d = 1;
    shape.add_dim(d);
  }
  return shape;
}

constexpr reduction k_reductions[] = {reduction::sum, reduction::mean, reduction::max,
                                      reduction::min, reduction::prod};

TEST_CASE("Reductions match the reference on random shapes, axes and dtypes") {
  std::mt19937 rng(42);
  compute_pool pool(2);
  for (reduction r : k_reductions) {
    for_each_type<reduction_types>([&]<class T>() {
      for (int trial = 0; trial < 40; ++trial) {
        tensor_shape shape = random_shape(rng, 5, 6);
        tensor input = random_tensor<T>(shape, rng, r);
        bool keep_dims = trial % 3 == 0;
        dtype index_type = trial % 2 == 0 ? dtype::int32 : dtype::int64;
        check_reduction<T>(r, input, random_axes(shape.rank(), rng), keep_dims, index_type, &pool);
      }
    });
  }
}

TEST_CASE("Reductions over large inputs take the parallel paths correctly") {
  std::mt19937 rng(42);
  struct case_def {
    tensor_shape shape;
    std::vector<std::int64_t> axes;
  };
  const std::vector<case_def> cases = {
      {{300000}, {0}},              // one long row: split into chunks
      {{4, 70000}, {1}},            // few long rows
      {{70000, 3}, {0}},            // few long columns
      {{2000, 300}, {0}},           // many columns, in blocks
      {{2000, 300}, {1}},           // many rows
      {{2000, 300}, {0, 1}},        // everything
      {{40, 300, 50}, {1}},         // a middle run
      {{40, 300, 50}, {0, 2}},      // two passes
      {{6, 50, 7, 60, 3}, {1, 3}},  // three kept groups, two passes
      {{6, 50, 7, 60, 3}, {0, 2, 4}},
      {{3, 5000, 1, 9}, {-3, -1}},  // a size-1 axis among the reduced ones
  };
  for (int threads : {1, 2}) {
    compute_pool pool(threads);
    for (const auto& c : cases) {
      for (reduction r : {reduction::sum, reduction::mean, reduction::max, reduction::prod}) {
        check_reduction<float>(r, random_tensor<float>(c.shape, rng, r), c.axes, false, dtype::int32, &pool);
      }
      check_reduction<double>(reduction::sum, random_tensor<double>(c.shape, rng, reduction::sum),
                              c.axes, true, dtype::int64, &pool);
      check_reduction<std::int32_t>(reduction::mean,
                                    random_tensor<std::int32_t>(c.shape, rng, reduction::mean),
                                    c.axes, false, dtype::int64, &pool);
      check_reduction<std::int8_t>(reduction::sum,
                                   random_tensor<std::int8_t>(c.shape, rng, reduction::sum), c.axes,
                                   false, dtype::int32, &pool);
      check_reduction<std::uint16_t>(reduction::min,
                                     random_tensor<std::uint16_t>(c.shape, rng, reduction::min),
                                     c.axes, true, dtype::int32, &pool);
    }
  }
}

TEST_CASE("Reductions: empty axes, scalar axes and keep_dims shapes") {
  std::mt19937 rng(42);
  tensor input = random_tensor<float>({2, 3, 4}, rng, reduction::sum);
  SECTION("no axes: the output is the input") {
    for (reduction r : k_reductions) {
      auto out = kernels::run_kernel(reduction_node(op_name(r), dtype::float32, dtype::int32, false),
                                     {input, axes_tensor({}, dtype::int32)});
      REQUIRE(out.ok());
      CHECK((*out)[0].equals(input));
    }
  }
  SECTION("a scalar axis") {
    auto out = kernels::run_kernel(reduction_node("Sum", dtype::float32, dtype::int64, false),
                                   {input, axes_tensor({-2}, dtype::int64, true)});
    REQUIRE(out.ok());
    CHECK((*out)[0].shape() == tensor_shape{2, 4});
  }
  SECTION("keep_dims keeps every axis as 1") {
    auto out = kernels::run_kernel(reduction_node("Max", dtype::float32, dtype::int32, true),
                                   {input, axes_tensor({0, 2}, dtype::int32)});
    REQUIRE(out.ok());
    CHECK((*out)[0].shape() == tensor_shape{1, 3, 1});
  }
  SECTION("a scalar input with no axes") {
    tensor s = tensor::scalar<std::int32_t>(7);
    auto out = kernels::run_kernel(reduction_node("Prod", dtype::int32, dtype::int32, false),
                                   {s, axes_tensor({}, dtype::int32)});
    REQUIRE(out.ok());
    CHECK((*out)[0].scalar_value<std::int32_t>() == 7);
  }
  SECTION("Tidx defaults to int32 and keep_dims to false") {
    tf::NodeDef node;
    node.set_op("Sum");
    (*node.mutable_attr())["T"] = graph::attr_value(dtype::float32);
    auto out = kernels::run_kernel(node, {input, axes_tensor({1}, dtype::int32)});
    REQUIRE(out.ok());
    CHECK((*out)[0].shape() == tensor_shape{2, 4});
  }
}

TEST_CASE("Reductions over empty dimensions give the identity") {
  tensor input(dtype::float32, {0, 3});
  auto run = [&](const char* op) {
    auto out = kernels::run_kernel(reduction_node(op, dtype::float32, dtype::int32, false),
                                   {input, axes_tensor({0}, dtype::int32)});
    REQUIRE(out.ok());
    REQUIRE((*out)[0].shape() == tensor_shape{3});
    return (*out)[0].data<float>()[0];
  };
  CHECK(run("Sum") == 0.0f);
  CHECK(run("Prod") == 1.0f);
  CHECK(run("Max") == -INFINITY);
  CHECK(run("Min") == INFINITY);
  CHECK(std::isnan(run("Mean")));
  tensor ints(dtype::int32, {2, 0});
  auto out = kernels::run_kernel(reduction_node("Mean", dtype::int32, dtype::int32, true),
                                 {ints, axes_tensor({1}, dtype::int32)});
  REQUIRE(out.ok());
  REQUIRE((*out)[0].shape() == tensor_shape{2, 1});
  CHECK((*out)[0].data<std::int32_t>()[1] == 0);
  // Reducing a non-empty axis of an empty tensor gives an empty tensor.
  out = kernels::run_kernel(reduction_node("Sum", dtype::int32, dtype::int32, false),
                            {ints, axes_tensor({0}, dtype::int32)});
  REQUIRE(out.ok());
  CHECK((*out)[0].shape() == tensor_shape{0});
}

TEST_CASE("Max and Min propagate NaN") {
  tensor x = tensor::from_vector<float>({1, NAN, 3, 4, 5, 6}, {2, 3});
  for (const char* op : {"Max", "Min"}) {
    auto out = kernels::run_kernel(reduction_node(op, dtype::float32, dtype::int32, false),
                                   {x, axes_tensor({1}, dtype::int32)});
    REQUIRE(out.ok());
    CHECK(std::isnan((*out)[0].data<float>()[0]));
    CHECK_FALSE(std::isnan((*out)[0].data<float>()[1]));
  }
}

TEST_CASE("Reductions reject bad axes") {
  tensor input(dtype::float32, {2, 3, 4});
  auto run = [&](const tensor& axes) {
    return kernels::run_kernel(reduction_node("Sum", dtype::float32, axes.type(), false), {input, axes});
  };
  auto out = run(axes_tensor({3}, dtype::int32));
  REQUIRE_FALSE(out.ok());
  CHECK(out.error().error_code() == code::invalid_argument);
  CHECK_THAT(out.error().message(), Catch::Contains("axis 3") && Catch::Contains("[2,3,4]"));
  out = run(axes_tensor({-4}, dtype::int64));
  REQUIRE_FALSE(out.ok());
  CHECK_THAT(out.error().message(), Catch::Contains("-4"));
  out = run(axes_tensor({1, -2}, dtype::int32));
  REQUIRE_FALSE(out.ok());
  CHECK(out.error().error_code() == code::invalid_argument);
  CHECK_THAT(out.error().message(), Catch::Contains("twice"));
  out = run(tensor(dtype::int32, {1, 1}));
  REQUIRE_FALSE(out.ok());
  CHECK(out.error().error_code() == code::invalid_argument);
}

// ---- ArgMax, ArgMin ----

tf::NodeDef arg_node(const std::string& op, dtype type, dtype index_type, dtype output_type) {
  tf::NodeDef node;
  node.set_name("arg");
  node.set_op(op);
  (*node.mutable_attr())["T"] = graph::attr_value(type);
  (*node.mutable_attr())["Tidx"] = graph::attr_value(index_type);
  if (output_type != dtype::invalid) (*node.mutable_attr())["output_type"] = graph::attr_value(output_type);
  return node;
}

// The index of the first maximum (or minimum) along `axis`.
template <class T>
std::vector<std::int64_t> reference_arg(const tensor& input, int axis, bool max) {
  std::int64_t outer = 1, inner = 1, n = input.dim(axis);
  for (int i = 0; i < axis; ++i) outer *= input.dim(i);
  for (int i = axis + 1; i < input.rank(); ++i) inner *= input.dim(i);
  std::vector<std::int64_t> result;
  const T* in = input.data<T>();
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t j = 0; j < inner; ++j) {
      std::int64_t best = 0;
      for (std::int64_t r = 1; r < n; ++r) {
        T x = in[(o * n + r) * inner + j];
        T b = in[(o * n + best) * inner + j];
        if (max ? x > b : x < b) best = r;
      }
      result.push_back(best);
    }
  }
  return result;
}

TEST_CASE("ArgMax and ArgMin match the reference, first index on ties") {
  std::mt19937 rng(42);
  compute_pool pool(2);
  for (bool max : {true, false}) {
    for_each_type<reduction_types>([&]<class T>() {
      for (int trial = 0; trial < 30; ++trial) {
        tensor_shape shape;
        std::uniform_int_distribution<int> rank_dist(1, 4), dim_dist(1, 7);
        int rank = rank_dist(rng);
        for (int i = 0; i < rank; ++i) shape.add_dim(dim_dist(rng));
        if (trial == 0) shape = tensor_shape{3, 3000, 2};  // long enough for the pool
        // Small integers make ties common.
        tensor input = random_tensor<T>(shape, rng, reduction::sum);
        std::uniform_int_distribution<int> axis_dist(-rank, rank - 1);
        int axis = trial == 0 ? 1 : axis_dist(rng);
        dtype index_type = trial % 2 ? dtype::int64 : dtype::int32;
        dtype output_type = trial % 3 == 0 ? dtype::int32 : trial % 3 == 1 ? dtype::int64 : dtype::invalid;
        INFO((max ? "ArgMax" : "ArgMin") << " dtype " << dtype_name(dtype_of<T>) << " input "
                                         << shape << " axis " << axis << ", seed 42");
        auto out = kernels::run_kernel(arg_node(max ? "ArgMax" : "ArgMin", dtype_of<T>, index_type, output_type),
                                       {input, axes_tensor({axis}, index_type, true)}, &pool);
        REQUIRE(out.ok());
        const tensor& got = (*out)[0];
        int a = axis < 0 ? axis + rank : axis;
        tensor_shape want_shape = shape;
        want_shape.remove_dim(a);
        REQUIRE(got.shape() == want_shape);
        // output_type defaults to int64.
        REQUIRE(got.type() == (output_type == dtype::int32 ? dtype::int32 : dtype::int64));
        std::vector<std::int64_t> want = reference_arg<T>(input, a, max);
        for (std::size_t i = 0; i < want.size(); ++i) {
          std::int64_t g = got.type() == dtype::int32 ? got.data<std::int32_t>()[i] : got.data<std::int64_t>()[i];
          if (g != want[i]) {
            FAIL_CHECK("output[" << i << "] = " << g << ", want " << want[i]);
            break;
          }
        }
      }
    });
  }
}

TEST_CASE("ArgMax errors") {
  tensor input(dtype::float32, {2, 0, 3});
  auto out = kernels::run_kernel(arg_node("ArgMax", dtype::float32, dtype::int32, dtype::invalid),
                                 {input, axes_tensor({1}, dtype::int32, true)});
  REQUIRE_FALSE(out.ok());
  CHECK(out.error().error_code() == code::invalid_argument);
  CHECK_THAT(out.error().message(), Catch::Contains("[2,0,3]"));
  // An empty tensor reduced over a non-empty axis is fine.
  out = kernels::run_kernel(arg_node("ArgMin", dtype::float32, dtype::int32, dtype::invalid),
                            {input, axes_tensor({2}, dtype::int32, true)});
  REQUIRE(out.ok());
  CHECK((*out)[0].shape() == tensor_shape{2, 0});
  out = kernels::run_kernel(arg_node("ArgMax", dtype::float32, dtype::int64, dtype::invalid),
                            {input, axes_tensor({3}, dtype::int64, true)});
  REQUIRE_FALSE(out.ok());
  CHECK_THAT(out.error().message(), Catch::Contains("dimension 3"));
  out = kernels::run_kernel(arg_node("ArgMax", dtype::float32, dtype::int32, dtype::invalid),
                            {input, axes_tensor({0}, dtype::int32)});
  REQUIRE_FALSE(out.ok());
  CHECK_THAT(out.error().message(), Catch::Contains("scalar"));
}

// ---- Shape functions ----

result<partial_shape> infer(const tf::NodeDef& node, const partial_shape& input,
                            const partial_shape& axes_shape, const tensor* axes) {
  const graph::op_def* op = graph::op_registry::builtin().find(node.op());
  REQUIRE(op != nullptr);
  REQUIRE(op->shape);
  graph::shape_context ctx(node, *op, {input, axes_shape}, {nullptr, axes},
                           {dtype::float32, dtype::int32}, 1);
  status s = op->shape(ctx);
  if (!s.ok()) return s;
  return ctx.outputs()[0];
}

TEST_CASE("Reduction shape functions") {
  tf::NodeDef keep = reduction_node("Mean", dtype::float32, dtype::int32, true);
  tf::NodeDef drop = reduction_node("Mean", dtype::float32, dtype::int32, false);
  tensor axes = axes_tensor({-1, 0}, dtype::int32);
  CHECK(*infer(drop, {2, -1, 4}, {2}, &axes) == partial_shape{-1});
  CHECK(*infer(keep, {2, -1, 4}, {2}, &axes) == partial_shape{1, -1, 1});
  CHECK(*infer(keep, {2, 3, 4}, {2}, nullptr) == partial_shape::unknown_of_rank(3));
  CHECK(*infer(drop, {2, 3, 4}, {2}, nullptr) == partial_shape::unknown());
  CHECK(*infer(drop, partial_shape::unknown(), {2}, &axes) == partial_shape::unknown());
  tensor duplicate = axes_tensor({1, -2}, dtype::int32);
  CHECK_FALSE(infer(drop, {2, 3, 4}, {2}, &duplicate).ok());
  tensor out_of_range = axes_tensor({3}, dtype::int32);
  auto bad = infer(drop, {2, 3, 4}, {1}, &out_of_range);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message(), Catch::Contains("[2,3,4]"));

  tf::NodeDef arg = arg_node("ArgMax", dtype::float32, dtype::int32, dtype::int64);
  tensor axis = axes_tensor({-2}, dtype::int32, true);
  CHECK(*infer(arg, {2, 3, 4}, {}, &axis) == partial_shape{2, 4});
  CHECK(*infer(arg, {2, 3, 4}, {}, nullptr) == partial_shape::unknown_of_rank(2));
}

}  // namespace
}  // namespace troupe
