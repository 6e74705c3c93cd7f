// Array kernels: Transpose, ConcatV2 and Pack against element-by-element reference loops
// on random shapes (ranks 0-5, dimensions of 0 and 1, negative axes) for every dtype and
// for one and four threads; Reshape, Fill, Shape/Size/Rank, ExpandDims and Squeeze on
// their TensorFlow semantics and error messages; Const, Placeholder and Identity-like ops
// sharing buffers; and the shape functions with and without graph-time constant inputs.
// Random cases use fixed seeds, printed through INFO on failure.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "kernels/kernel_registry.h"
#include "kernels/kernel_runner.h"

namespace troupe {
namespace {

using attr_list = std::vector<std::pair<std::string, tf::AttrValue>>;

tf::NodeDef make_node(const std::string& op, const attr_list& attrs, const std::string& name = "") {
  tf::NodeDef node;
  node.set_name(name.empty() ? op : name);
  node.set_op(op);
  for (const auto& [key, value] : attrs) (*node.mutable_attr())[key] = value;
  return node;
}

compute_pool& one_thread() {
  static compute_pool pool(1);
  return pool;
}
compute_pool& four_threads() {
  static compute_pool pool(4);
  return pool;
}

std::vector<tensor> run_ok(const tf::NodeDef& node, const std::vector<tensor>& inputs,
                           compute_pool* pool = nullptr) {
  auto outputs = kernels::run_kernel(node, inputs, pool);
  if (!outputs.ok()) FAIL(outputs.error().to_string());
  return std::move(*outputs);
}

std::string run_error(const tf::NodeDef& node, const std::vector<tensor>& inputs) {
  auto outputs = kernels::run_kernel(node, inputs);
  REQUIRE_FALSE(outputs.ok());
  return outputs.error().to_string();
}

// A kernel built once, to be run several times (as an executor does).
struct kernel_instance {
  std::unique_ptr<kernels::op_kernel> kernel;
  std::vector<dtype> output_types;

  std::vector<tensor> compute(const std::vector<tensor>& inputs) {
    kernels::step_info step;
    step.pool = &one_thread();
    std::vector<tensor> outputs(output_types.size());
    kernels::kernel_context ctx(inputs, outputs, output_types, step);
    kernel->compute(ctx);
    if (!ctx.ok()) FAIL(ctx.get_status().to_string());
    return outputs;
  }
};

kernel_instance make_instance(tf::NodeDef node) {
  const graph::op_def* op = graph::op_registry::builtin().find(node.op());
  REQUIRE(op != nullptr);
  REQUIRE(graph::add_defaults_and_validate_attrs(*op, &node).ok());
  std::vector<dtype> input_types, output_types;
  REQUIRE(graph::input_output_types(*op, node, &input_types, &output_types).ok());
  auto kernel =
      kernels::kernel_registry::builtin().create("CPU", node, *op, input_types, output_types);
  if (!kernel.ok()) FAIL(kernel.error().to_string());
  return {std::move(*kernel), output_types};
}

// Runs the op's shape function as graph construction would.
result<std::vector<partial_shape>> infer_shapes(tf::NodeDef node, std::vector<partial_shape> inputs,
                                                std::vector<const tensor*> values = {}) {
  const graph::op_def* op = graph::op_registry::builtin().find(node.op());
  REQUIRE(op != nullptr);
  REQUIRE(graph::add_defaults_and_validate_attrs(*op, &node).ok());
  std::vector<dtype> input_types, output_types;
  REQUIRE(graph::input_output_types(*op, node, &input_types, &output_types).ok());
  values.resize(inputs.size(), nullptr);
  graph::shape_context ctx(node, *op, std::move(inputs), std::move(values), input_types,
                           static_cast<int>(output_types.size()));
  REQUIRE(op->shape);
  status s = op->shape(ctx);
  if (!s.ok()) return s;
  return ctx.outputs();
}

template <class T>
tensor random_tensor(const tensor_shape& shape, std::mt19937& rng) {
  tensor t(dtype_of<T>, shape);
  for (T& x : t.flat<T>()) {
    if constexpr (std::is_same_v<T, bool>) {
      x = (rng() & 1) != 0;
    } else if constexpr (std::is_floating_point_v<T>) {
      x = static_cast<T>(std::uniform_real_distribution<double>(-10, 10)(rng));
    } else {
      x = static_cast<T>(rng() % 120);
    }
  }
  return t;
}

// A random tensor of runtime dtype `type`.
tensor random_tensor(dtype type, const tensor_shape& shape, std::mt19937& rng) {
  tensor t;
  visit_dtype(type, [&]<class T>() { t = random_tensor<T>(shape, rng); });
  return t;
}

tensor_shape random_shape(int rank, std::mt19937& rng, std::int64_t max_dim = 5) {
  tensor_shape s;
  for (int i = 0; i < rank; ++i) {
    // Mostly 1..max_dim, sometimes 0.
    s.add_dim(rng() % 12 == 0 ? 0 : 1 + static_cast<std::int64_t>(rng() % max_dim));
  }
  return s;
}

std::vector<std::int64_t> strides_of(const tensor_shape& s) {
  std::vector<std::int64_t> strides(static_cast<std::size_t>(s.rank()));
  std::int64_t stride = 1;
  for (int i = s.rank() - 1; i >= 0; --i) {
    strides[static_cast<std::size_t>(i)] = stride;
    stride *= s.dim(i);
  }
  return strides;
}

// The multi-index of linear index `linear` in shape s.
std::vector<std::int64_t> unravel(std::int64_t linear, const tensor_shape& s) {
  std::vector<std::int64_t> index(static_cast<std::size_t>(s.rank()));
  for (int i = s.rank() - 1; i >= 0; --i) {
    index[static_cast<std::size_t>(i)] = linear % s.dim(i);
    linear /= s.dim(i);
  }
  return index;
}

void copy_element(const tensor& from, std::int64_t from_index, tensor& to, std::int64_t to_index) {
  std::size_t size = dtype_size(from.type());
  std::memcpy(
      static_cast<char*>(to.raw_data()) + to_index * static_cast<std::int64_t>(size),
      static_cast<const char*>(from.raw_data()) + from_index * static_cast<std::int64_t>(size),
      size);
}

tensor reference_transpose(const tensor& x, const std::vector<int>& perm) {
  tensor_shape out_shape;
  for (int p : perm) out_shape.add_dim(x.dim(p));
  tensor out(x.type(), out_shape);
  auto in_strides = strides_of(x.shape());
  for (std::int64_t o = 0; o < out.num_elements(); ++o) {
    auto index = unravel(o, out_shape);
    std::int64_t in = 0;
    for (std::size_t i = 0; i < perm.size(); ++i) {
      in += index[i] * in_strides[static_cast<std::size_t>(perm[i])];
    }
    copy_element(x, in, out, o);
  }
  return out;
}

tensor reference_concat(const std::vector<tensor>& values, int axis) {
  tensor_shape out_shape = values[0].shape();
  std::int64_t total = 0;
  for (const auto& v : values) total += v.dim(axis);
  out_shape.set_dim(axis, total);
  tensor out(values[0].type(), out_shape);
  for (std::int64_t o = 0; o < out.num_elements(); ++o) {
    auto index = unravel(o, out_shape);
    auto a = static_cast<std::size_t>(axis);
    std::size_t which = 0;
    while (index[a] >= values[which].dim(axis)) index[a] -= values[which++].dim(axis);
    auto strides = strides_of(values[which].shape());
    std::int64_t in = 0;
    for (std::size_t i = 0; i < index.size(); ++i) in += index[i] * strides[i];
    copy_element(values[which], in, out, o);
  }
  return out;
}

tensor reference_pack(const std::vector<tensor>& values, int axis) {
  tensor_shape out_shape = values[0].shape();
  out_shape.insert_dim(axis, static_cast<std::int64_t>(values.size()));
  tensor out(values[0].type(), out_shape);
  for (std::int64_t o = 0; o < out.num_elements(); ++o) {
    auto index = unravel(o, out_shape);
    auto which = static_cast<std::size_t>(index[static_cast<std::size_t>(axis)]);
    index.erase(index.begin() + axis);
    auto strides = strides_of(values[which].shape());
    std::int64_t in = 0;
    for (std::size_t i = 0; i < index.size(); ++i) in += index[i] * strides[i];
    copy_element(values[which], in, out, o);
  }
  return out;
}

template <class T>
tensor vec(std::vector<T> values) {
  return tensor::from_vector<T>(values);
}

const std::vector<dtype> k_all_dtypes = {dtype::float32, dtype::float64, dtype::int8,
                                         dtype::int16,   dtype::int32,   dtype::int64,
                                         dtype::uint8,   dtype::uint16,  dtype::bool_};

// ---------------------------------------------------------------------------------------

TEST_CASE("Const outputs its value attribute, the same buffer on every run", "[array]") {
  tensor value = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto node = make_node(
      "Const", {{"value", graph::attr_value(value)}, {"dtype", graph::attr_value(dtype::float32)}});
  auto outputs = run_ok(node, {});
  REQUIRE(outputs.size() == 1);
  CHECK(outputs[0].equals(value));

  kernel_instance k = make_instance(node);
  CHECK(k.kernel->estimated_ns({}) == 0);
  tensor first = k.compute({})[0];
  tensor second = k.compute({})[0];
  CHECK(first.shares_buffer_with(second));
  CHECK(first.equals(value));

  for (dtype type : k_all_dtypes) {
    std::mt19937 rng(7);
    tensor v = random_tensor(type, {3, 2}, rng);
    auto out = run_ok(
        make_node("Const", {{"value", graph::attr_value(v)}, {"dtype", graph::attr_value(type)}}),
        {});
    INFO(dtype_name(type));
    CHECK(out[0].equals(v));
  }
}

TEST_CASE("Const rejects a value whose dtype differs from the dtype attribute", "[array]") {
  auto node = make_node("Const", {{"value", graph::attr_value(tensor::scalar<float>(1))},
                                  {"dtype", graph::attr_value(dtype::int32)}});
  std::string error = run_error(node, {});
  CHECK_THAT(error, Catch::Contains("float") && Catch::Contains("int32"));
}

TEST_CASE("Placeholder fails with a clear error when run", "[array]") {
  auto node = make_node("Placeholder",
                        {{"dtype", graph::attr_value(dtype::float32)},
                         {"shape", graph::attr_value(partial_shape{-1, 3})}},
                        "x");
  std::string error = run_error(node, {});
  CHECK_THAT(error, Catch::Contains("placeholder 'x' must be fed"));
  CHECK_THAT(error, Catch::Contains("[?,3]"));
  // The shape attribute defaults to an unknown shape.
  auto bare = make_node("Placeholder", {{"dtype", graph::attr_value(dtype::int64)}}, "y");
  CHECK_THAT(run_error(bare, {}), Catch::Contains("placeholder 'y' must be fed"));
}

TEST_CASE("PlaceholderWithDefault passes its input through", "[array]") {
  tensor x = tensor::from_vector<int32_t>({1, 2, 3}, {3});
  auto node =
      make_node("PlaceholderWithDefault", {{"dtype", graph::attr_value(dtype::int32)},
                                           {"shape", graph::attr_value(partial_shape{-1})}});
  auto out = run_ok(node, {x});
  CHECK(out[0].shares_buffer_with(x));
  CHECK(out[0].equals(x));

  auto strict = make_node(
      "PlaceholderWithDefault",
      {{"dtype", graph::attr_value(dtype::int32)}, {"shape", graph::attr_value(partial_shape{4})}});
  CHECK_THAT(run_error(strict, {x}), Catch::Contains("[3]") && Catch::Contains("[4]"));
}

TEST_CASE("Identity, StopGradient and IdentityN share their inputs' buffers", "[array]") {
  std::mt19937 rng(3);
  for (dtype type : k_all_dtypes) {
    INFO(dtype_name(type));
    tensor x = random_tensor(type, {2, 3}, rng);
    for (const char* op : {"Identity", "StopGradient"}) {
      auto node = make_node(op, {{"T", graph::attr_value(type)}});
      auto out = run_ok(node, {x});
      CHECK(out[0].shares_buffer_with(x));
      CHECK(out[0].equals(x));
      CHECK(make_instance(node).kernel->estimated_ns(std::vector<tensor>{x}) == 0);
    }
  }
  tensor a = tensor::from_vector<float>({1, 2});
  tensor b = tensor::scalar<int64_t>(5);
  tensor c = tensor::from_vector<bool>({true, false, true}, {3, 1});
  auto node = make_node(
      "IdentityN",
      {{"T", graph::attr_value(std::vector<dtype>{dtype::float32, dtype::int64, dtype::bool_})}});
  auto out = run_ok(node, {a, b, c});
  REQUIRE(out.size() == 3);
  CHECK(out[0].shares_buffer_with(a));
  CHECK(out[1].shares_buffer_with(b));
  CHECK(out[2].shares_buffer_with(c));
}

TEST_CASE("NoOp has no inputs and no outputs", "[array]") {
  auto out = run_ok(make_node("NoOp", {}), {});
  CHECK(out.empty());
}

// ---------------------------------------------------------------------------------------
// Reshape

tf::NodeDef reshape_node(dtype type, dtype index_type = dtype::int32) {
  return make_node("Reshape",
                   {{"T", graph::attr_value(type)}, {"Tshape", graph::attr_value(index_type)}});
}

TEST_CASE("Reshape shares the buffer and infers one -1 dimension", "[array]") {
  std::mt19937 rng(11);
  for (dtype type : k_all_dtypes) {
    INFO(dtype_name(type));
    tensor x = random_tensor(type, {2, 3, 4}, rng);
    auto out = run_ok(reshape_node(type), {x, vec<int32_t>({4, -1})});
    CHECK(out[0].shape() == tensor_shape{4, 6});
    CHECK(out[0].shares_buffer_with(x));
    CHECK(std::memcmp(out[0].raw_data(), x.raw_data(), x.byte_size()) == 0);
  }
  tensor x = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(run_ok(reshape_node(dtype::float32, dtype::int64), {x, vec<int64_t>({3, 2})})[0].shape() ==
        tensor_shape{3, 2});
  CHECK(run_ok(reshape_node(dtype::float32), {x, vec<int32_t>({-1})})[0].shape() ==
        tensor_shape{6});
  CHECK(run_ok(reshape_node(dtype::float32), {x, vec<int32_t>({1, -1, 1, 2})})[0].shape() ==
        tensor_shape{1, 3, 1, 2});
  // A one-element tensor to a scalar, and a scalar shape operand (legacy form of [6]).
  CHECK(run_ok(reshape_node(dtype::float32),
               {tensor::from_vector<float>({5}, {1, 1}), tensor(dtype::int32, {0})})[0]
            .shape() == tensor_shape{});
  CHECK(run_ok(reshape_node(dtype::float32), {x, tensor::scalar<int32_t>(6)})[0].shape() ==
        tensor_shape{6});
  // Zero-element tensors: -1 is inferred from the non-zero dimensions.
  tensor empty(dtype::float32, {0, 6});
  CHECK(run_ok(reshape_node(dtype::float32), {empty, vec<int32_t>({0, -1, 2})})[0].shape() ==
        tensor_shape{0, 3, 2});
  CHECK(run_ok(reshape_node(dtype::float32), {empty, vec<int32_t>({3, 0})})[0].shape() ==
        tensor_shape{3, 0});
  CHECK(make_instance(reshape_node(dtype::float32)).kernel->estimated_ns({}) == 0);
}

TEST_CASE("Reshape errors name both shapes", "[array]") {
  tensor x = tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  std::string error = run_error(reshape_node(dtype::float32), {x, vec<int32_t>({4})});
  CHECK_THAT(error, Catch::Contains("[2,3]") && Catch::Contains("[4]"));
  CHECK_THAT(run_error(reshape_node(dtype::float32), {x, vec<int32_t>({4, -1})}),
             Catch::Contains("[2,3]") && Catch::Contains("4, -1"));
  CHECK_THAT(run_error(reshape_node(dtype::float32), {x, vec<int32_t>({-1, -1})}),
             Catch::Contains("only one"));
  CHECK_THAT(run_error(reshape_node(dtype::float32), {x, vec<int32_t>({-2, -3})}),
             Catch::Contains("negative"));
  CHECK_THAT(
      run_error(reshape_node(dtype::float32), {x, tensor::from_vector<int32_t>({2, 3}, {1, 2})}),
      Catch::Contains("vector"));
}

// ---------------------------------------------------------------------------------------
// Shape, Size, Rank

TEST_CASE("Shape, Size and Rank for every dtype and out_type", "[array]") {
  std::mt19937 rng(5);
  for (dtype type : k_all_dtypes) {
    INFO(dtype_name(type));
    tensor x = random_tensor(type, {2, 0, 5}, rng);
    tensor y = random_tensor(type, {3, 4}, rng);
    auto shape32 = run_ok(make_node("Shape", {{"T", graph::attr_value(type)}}), {x});
    CHECK(shape32[0].equals(vec<int32_t>({2, 0, 5})));
    auto shape64 = run_ok(make_node("Shape", {{"T", graph::attr_value(type)},
                                              {"out_type", graph::attr_value(dtype::int64)}}),
                          {x});
    CHECK(shape64[0].equals(vec<int64_t>({2, 0, 5})));
    auto size32 = run_ok(make_node("Size", {{"T", graph::attr_value(type)}}), {y});
    CHECK(size32[0].equals(tensor::scalar<int32_t>(12)));
    auto size64 = run_ok(make_node("Size", {{"T", graph::attr_value(type)},
                                            {"out_type", graph::attr_value(dtype::int64)}}),
                         {x});
    CHECK(size64[0].equals(tensor::scalar<int64_t>(0)));
    auto rank = run_ok(make_node("Rank", {{"T", graph::attr_value(type)}}), {x});
    CHECK(rank[0].equals(tensor::scalar<int32_t>(3)));
  }
  tensor s = tensor::scalar<float>(1);
  CHECK(run_ok(make_node("Shape", {{"T", graph::attr_value(dtype::float32)}}), {s})[0].equals(
      tensor(dtype::int32, {0})));
  CHECK(run_ok(make_node("Rank", {{"T", graph::attr_value(dtype::float32)}}), {s})[0].equals(
      tensor::scalar<int32_t>(0)));
  CHECK(run_ok(make_node("Size", {{"T", graph::attr_value(dtype::float32)}}), {s})[0].equals(
      tensor::scalar<int32_t>(1)));
}

// ---------------------------------------------------------------------------------------
// Fill

TEST_CASE("Fill for every dtype and index type", "[array]") {
  std::mt19937 rng(13);
  for (dtype type : k_all_dtypes) {
    for (dtype index_type : {dtype::int32, dtype::int64}) {
      INFO(dtype_name(type) << " " << dtype_name(index_type));
      tensor value = random_tensor(type, {}, rng);
      tensor dims =
          index_type == dtype::int32 ? vec<int32_t>({3, 1, 700}) : vec<int64_t>({3, 1, 700});
      auto node = make_node(
          "Fill", {{"T", graph::attr_value(type)}, {"index_type", graph::attr_value(index_type)}});
      tensor out = run_ok(node, {dims, value}, &four_threads())[0];
      REQUIRE(out.shape() == tensor_shape{3, 1, 700});
      std::size_t size = dtype_size(type);
      bool all_equal = true;
      for (std::int64_t i = 0; i < out.num_elements(); ++i) {
        all_equal &=
            std::memcmp(static_cast<char*>(out.raw_data()) + i * static_cast<std::int64_t>(size),
                        value.raw_data(), size) == 0;
      }
      CHECK(all_equal);
    }
  }
  auto node = make_node("Fill", {{"T", graph::attr_value(dtype::float32)}});
  CHECK(run_ok(node, {tensor(dtype::int32, {0}), tensor::scalar<float>(2)})[0].equals(
      tensor::scalar<float>(2)));
  CHECK(run_ok(node, {vec<int32_t>({2, 0}), tensor::scalar<float>(2)})[0].shape() ==
        tensor_shape{2, 0});
  CHECK_THAT(run_error(node, {vec<int32_t>({2, -1}), tensor::scalar<float>(2)}),
             Catch::Contains("2, -1"));
  CHECK_THAT(run_error(node, {vec<int32_t>({2}), tensor::from_vector<float>({1, 2})}),
             Catch::Contains("scalar"));
  CHECK_THAT(run_error(node, {tensor::scalar<int32_t>(2), tensor::scalar<float>(1)}),
             Catch::Contains("vector"));
}

// ---------------------------------------------------------------------------------------
// Transpose

tf::NodeDef transpose_node(dtype type, dtype perm_type = dtype::int32) {
  return make_node("Transpose",
                   {{"T", graph::attr_value(type)}, {"Tperm", graph::attr_value(perm_type)}});
}

tensor perm_tensor(const std::vector<int>& perm, dtype type) {
  if (type == dtype::int64) return vec<int64_t>(std::vector<int64_t>(perm.begin(), perm.end()));
  return vec<int32_t>(std::vector<int32_t>(perm.begin(), perm.end()));
}

TEST_CASE("Transpose matches a reference on random shapes and permutations", "[array]") {
  const std::uint32_t seed = 2024;
  std::mt19937 rng(seed);
  INFO("seed " << seed);
  for (int trial = 0; trial < 400; ++trial) {
    int rank = static_cast<int>(rng() % 6);
    dtype type = k_all_dtypes[rng() % k_all_dtypes.size()];
    dtype perm_type = rng() % 2 == 0 ? dtype::int32 : dtype::int64;
    tensor_shape shape = random_shape(rank, rng, 6);
    std::vector<int> perm(static_cast<std::size_t>(rank));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    tensor x = random_tensor(type, shape, rng);
    INFO("trial " << trial << " " << dtype_name(type) << " shape " << shape.to_string() << " perm "
                  << perm_tensor(perm, dtype::int32).debug_string());
    tensor expected = reference_transpose(x, perm);
    for (compute_pool* pool : {&one_thread(), &four_threads()}) {
      tensor y =
          run_ok(transpose_node(type, perm_type), {x, perm_tensor(perm, perm_type)}, pool)[0];
      CHECK(y.equals(expected));
    }
  }
}

TEST_CASE("Transpose of large tensors takes the tiled and parallel paths", "[array]") {
  std::mt19937 rng(99);
  struct transpose_case {
    tensor_shape shape;
    std::vector<int> perm;
  };
  std::vector<transpose_case> cases = {
      {{300, 257}, {1, 0}},            // 2-D, partial tiles
      {{7, 65, 33}, {0, 2, 1}},        // batched 2-D
      {{33, 7, 65}, {1, 0, 2}},        // rows move, contiguous inner runs
      {{9, 1, 40, 31}, {2, 1, 3, 0}},  // size-1 dimension dropped, general
      {{4, 5, 6, 7, 8}, {4, 2, 0, 3, 1}},
      {{16, 8, 32}, {2, 0, 1}},       // collapses to 2-D
      {{3, 1, 1, 40}, {1, 0, 3, 2}},  // only size-1 dims move: no copy
  };
  for (const auto& c : cases) {
    for (dtype type : {dtype::float32, dtype::float64, dtype::int16, dtype::uint8}) {
      INFO(dtype_name(type) << " shape " << c.shape.to_string());
      tensor x = random_tensor(type, c.shape, rng);
      tensor expected = reference_transpose(x, c.perm);
      for (compute_pool* pool : {&one_thread(), &four_threads()}) {
        tensor y = run_ok(transpose_node(type), {x, perm_tensor(c.perm, dtype::int32)}, pool)[0];
        CHECK(y.equals(expected));
      }
    }
  }
}

TEST_CASE("Transpose with an identity permutation shares the buffer", "[array]") {
  std::mt19937 rng(1);
  tensor x = random_tensor<float>({2, 3, 4}, rng);
  tensor y = run_ok(transpose_node(dtype::float32), {x, vec<int32_t>({0, 1, 2})})[0];
  CHECK(y.shares_buffer_with(x));
  CHECK(y.equals(x));
  tensor s = tensor::scalar<float>(3);
  CHECK(run_ok(transpose_node(dtype::float32), {s, tensor(dtype::int32, {0})})[0].equals(s));
}

TEST_CASE("Transpose rejects a perm that is not a permutation", "[array]") {
  tensor x(dtype::float32, {2, 3, 4});
  CHECK_THAT(run_error(transpose_node(dtype::float32), {x, vec<int32_t>({0, 0, 1})}),
             Catch::Contains("not a permutation") && Catch::Contains("0, 0, 1"));
  CHECK_THAT(run_error(transpose_node(dtype::float32), {x, vec<int32_t>({0, 3, 1})}),
             Catch::Contains("not a permutation"));
  CHECK_THAT(run_error(transpose_node(dtype::float32), {x, vec<int32_t>({-1, 0, 1})}),
             Catch::Contains("not a permutation"));
  CHECK_THAT(run_error(transpose_node(dtype::float32), {x, vec<int32_t>({1, 0})}),
             Catch::Contains("rank 3") && Catch::Contains("[2,3,4]"));
}

// ---------------------------------------------------------------------------------------
// ConcatV2 and Pack

tf::NodeDef concat_node(dtype type, int n, dtype axis_type = dtype::int32) {
  return make_node("ConcatV2", {{"T", graph::attr_value(type)},
                                {"N", graph::attr_value(n)},
                                {"Tidx", graph::attr_value(axis_type)}});
}

tensor axis_tensor(std::int64_t axis, dtype type) {
  if (type == dtype::int64) return tensor::scalar<int64_t>(axis);
  return tensor::scalar<int32_t>(static_cast<int32_t>(axis));
}

TEST_CASE("ConcatV2 matches a reference on every axis, negative axes and empty inputs", "[array]") {
  const std::uint32_t seed = 77;
  std::mt19937 rng(seed);
  INFO("seed " << seed);
  for (int trial = 0; trial < 300; ++trial) {
    int rank = 1 + static_cast<int>(rng() % 5);
    int n = 2 + static_cast<int>(rng() % 4);
    int axis = static_cast<int>(rng() % static_cast<unsigned>(rank));
    bool negative = rng() % 2 == 0;
    dtype type = k_all_dtypes[rng() % k_all_dtypes.size()];
    dtype axis_type = rng() % 2 == 0 ? dtype::int32 : dtype::int64;
    tensor_shape base = random_shape(rank, rng, 5);
    std::vector<tensor> values;
    for (int i = 0; i < n; ++i) {
      tensor_shape s = base;
      s.set_dim(axis, static_cast<std::int64_t>(rng() % 4));  // includes empty inputs
      values.push_back(random_tensor(type, s, rng));
    }
    INFO("trial " << trial << " " << dtype_name(type) << " base " << base.to_string() << " axis "
                  << axis << (negative ? " (negative)" : "") << " n " << n);
    tensor expected = reference_concat(values, axis);
    std::vector<tensor> inputs = values;
    inputs.push_back(axis_tensor(negative ? axis - rank : axis, axis_type));
    for (compute_pool* pool : {&one_thread(), &four_threads()}) {
      tensor y = run_ok(concat_node(type, n, axis_type), inputs, pool)[0];
      CHECK(y.equals(expected));
    }
  }
}

TEST_CASE("ConcatV2 of large inputs in parallel", "[array]") {
  std::mt19937 rng(8);
  for (int axis = 0; axis < 3; ++axis) {
    std::vector<tensor> values = {random_tensor<float>({64, 33, 50}, rng),
                                  random_tensor<float>({64, 33, 50}, rng),
                                  random_tensor<float>({64, 33, 50}, rng)};
    tensor expected = reference_concat(values, axis);
    std::vector<tensor> inputs = values;
    inputs.push_back(tensor::scalar<int32_t>(axis));
    CHECK(run_ok(concat_node(dtype::float32, 3), inputs, &four_threads())[0].equals(expected));
  }
}

TEST_CASE("ConcatV2 errors name the axis and the shapes", "[array]") {
  tensor a(dtype::float32, {2, 3});
  tensor b(dtype::float32, {2, 4});
  tensor c(dtype::float32, {3, 3});
  CHECK(run_ok(concat_node(dtype::float32, 2), {a, b, tensor::scalar<int32_t>(1)})[0].shape() ==
        tensor_shape{2, 7});
  CHECK_THAT(run_error(concat_node(dtype::float32, 2), {a, b, tensor::scalar<int32_t>(0)}),
             Catch::Contains("[2,3]") && Catch::Contains("[2,4]") && Catch::Contains("axis 0"));
  CHECK_THAT(run_error(concat_node(dtype::float32, 2), {a, c, tensor::scalar<int32_t>(2)}),
             Catch::Contains("axis 2") && Catch::Contains("[-2, 2)"));
  CHECK_THAT(run_error(concat_node(dtype::float32, 2), {a, c, tensor::scalar<int32_t>(-3)}),
             Catch::Contains("axis -3"));
  CHECK_THAT(run_error(concat_node(dtype::float32, 2),
                       {a, tensor(dtype::float32, {2, 3, 1}), tensor::scalar<int32_t>(0)}),
             Catch::Contains("[2,3,1]"));
  CHECK_THAT(
      run_error(concat_node(dtype::float32, 2),
                {tensor::scalar<float>(1), tensor::scalar<float>(2), tensor::scalar<int32_t>(0)}),
      Catch::Contains("out of range"));
}

tf::NodeDef pack_node(dtype type, int n, int axis) {
  return make_node("Pack", {{"T", graph::attr_value(type)},
                            {"N", graph::attr_value(n)},
                            {"axis", graph::attr_value(axis)}});
}

TEST_CASE("Pack matches a reference on every axis, including negative ones", "[array]") {
  const std::uint32_t seed = 31;
  std::mt19937 rng(seed);
  INFO("seed " << seed);
  for (int trial = 0; trial < 300; ++trial) {
    int rank = static_cast<int>(rng() % 5);
    int n = 1 + static_cast<int>(rng() % 4);
    int axis = static_cast<int>(rng() % static_cast<unsigned>(rank + 1));
    bool negative = rng() % 2 == 0;
    dtype type = k_all_dtypes[rng() % k_all_dtypes.size()];
    tensor_shape shape = random_shape(rank, rng, 5);
    std::vector<tensor> values;
    for (int i = 0; i < n; ++i) values.push_back(random_tensor(type, shape, rng));
    INFO("trial " << trial << " " << dtype_name(type) << " shape " << shape.to_string() << " axis "
                  << axis << (negative ? " (negative)" : "") << " n " << n);
    tensor expected = reference_pack(values, axis);
    for (compute_pool* pool : {&one_thread(), &four_threads()}) {
      tensor y = run_ok(pack_node(type, n, negative ? axis - rank - 1 : axis), values, pool)[0];
      CHECK(y.equals(expected));
    }
  }
}

TEST_CASE("Pack errors", "[array]") {
  tensor a(dtype::float32, {2, 3});
  tensor b(dtype::float32, {3, 2});
  CHECK_THAT(run_error(pack_node(dtype::float32, 2, 0), {a, b}),
             Catch::Contains("[2,3]") && Catch::Contains("[3,2]"));
  CHECK_THAT(run_error(pack_node(dtype::float32, 2, 3), {a, a}),
             Catch::Contains("axis 3") && Catch::Contains("[-3, 3)"));
  CHECK_THAT(run_error(pack_node(dtype::float32, 2, -4), {a, a}), Catch::Contains("axis -4"));
}

// ---------------------------------------------------------------------------------------
// ExpandDims and Squeeze

TEST_CASE("ExpandDims inserts a dimension of 1 without copying", "[array]") {
  std::mt19937 rng(4);
  tensor x = random_tensor<int16_t>({2, 3}, rng);
  auto node = [](dtype dim_type) {
    return make_node("ExpandDims", {{"T", graph::attr_value(dtype::int16)},
                                    {"Tdim", graph::attr_value(dim_type)}});
  };
  std::vector<std::pair<std::int64_t, tensor_shape>> cases = {
      {0, {1, 2, 3}}, {1, {2, 1, 3}}, {2, {2, 3, 1}}, {-1, {2, 3, 1}}, {-3, {1, 2, 3}}};
  for (const auto& [dim, expected] : cases) {
    INFO("dim " << dim);
    tensor y =
        run_ok(node(dtype::int32), {x, tensor::scalar<int32_t>(static_cast<int32_t>(dim))})[0];
    CHECK(y.shape() == expected);
    CHECK(y.shares_buffer_with(x));
    CHECK(run_ok(node(dtype::int64), {x, vec<int64_t>({dim})})[0].shape() == expected);
  }
  CHECK_THAT(run_error(node(dtype::int32), {x, tensor::scalar<int32_t>(3)}),
             Catch::Contains("dim 3") && Catch::Contains("[2,3]"));
  CHECK_THAT(run_error(node(dtype::int32), {x, tensor::scalar<int32_t>(-4)}),
             Catch::Contains("dim -4"));
}

TEST_CASE("Squeeze removes dimensions of 1 without copying", "[array]") {
  std::mt19937 rng(6);
  tensor x = random_tensor<double>({1, 2, 1, 3, 1}, rng);
  auto node = [](std::vector<std::int64_t> dims) {
    return make_node("Squeeze", {{"T", graph::attr_value(dtype::float64)},
                                 {"squeeze_dims", graph::attr_value(dims)}});
  };
  tensor all = run_ok(make_node("Squeeze", {{"T", graph::attr_value(dtype::float64)}}), {x})[0];
  CHECK(all.shape() == tensor_shape{2, 3});
  CHECK(all.shares_buffer_with(x));
  CHECK(run_ok(node({0, -1}), {x})[0].shape() == tensor_shape{2, 1, 3});
  CHECK(run_ok(node({2}), {x})[0].shape() == tensor_shape{1, 2, 3, 1});
  CHECK_THAT(run_error(node({1}), {x}), Catch::Contains("dim 1") && Catch::Contains("2"));
  CHECK_THAT(run_error(node({5}), {x}), Catch::Contains("dim 5"));
}

// ---------------------------------------------------------------------------------------
// Shape functions

TEST_CASE("Array shape functions use constant inputs when they can", "[array][shape]") {
  using graph::attr_value;
  {
    tensor value(dtype::float32, {2, 5});
    auto s = infer_shapes(
        make_node("Const", {{"value", attr_value(value)}, {"dtype", attr_value(dtype::float32)}}),
        {});
    REQUIRE(s.ok());
    CHECK((*s)[0] == partial_shape{2, 5});
  }
  {
    auto s = infer_shapes(make_node("Placeholder", {{"dtype", attr_value(dtype::float32)},
                                                    {"shape", attr_value(partial_shape{-1, 3})}}),
                          {});
    REQUIRE(s.ok());
    CHECK((*s)[0] == partial_shape{-1, 3});
    auto unknown =
        infer_shapes(make_node("Placeholder", {{"dtype", attr_value(dtype::float32)}}), {});
    REQUIRE(unknown.ok());
    CHECK_FALSE((*unknown)[0].known_rank());
  }
  {
    tensor shape = vec<int32_t>({-1, 4});
    auto known = infer_shapes(reshape_node(dtype::float32), {partial_shape{2, 6}, partial_shape{2}},
                              {nullptr, &shape});
    REQUIRE(known.ok());
    CHECK((*known)[0] == partial_shape{3, 4});
    auto partial = infer_shapes(reshape_node(dtype::float32),
                                {partial_shape{-1, 6}, partial_shape{2}}, {nullptr, &shape});
    REQUIRE(partial.ok());
    CHECK((*partial)[0] == partial_shape{-1, 4});
    auto rank_only =
        infer_shapes(reshape_node(dtype::float32), {partial_shape{2, 6}, partial_shape{3}});
    REQUIRE(rank_only.ok());
    CHECK((*rank_only)[0] == partial_shape{-1, -1, -1});
    tensor bad = vec<int32_t>({5});
    auto error = infer_shapes(reshape_node(dtype::float32), {partial_shape{2, 6}, partial_shape{1}},
                              {nullptr, &bad});
    REQUIRE_FALSE(error.ok());
    CHECK_THAT(error.error().message(), Catch::Contains("[2,6]") && Catch::Contains("[5]"));
  }
  {
    tensor dims = vec<int64_t>({4, 2});
    auto node = make_node(
        "Fill", {{"T", attr_value(dtype::float32)}, {"index_type", attr_value(dtype::int64)}});
    auto s = infer_shapes(node, {partial_shape{2}, partial_shape{}}, {&dims, nullptr});
    REQUIRE(s.ok());
    CHECK((*s)[0] == partial_shape{4, 2});
    auto unknown = infer_shapes(node, {partial_shape{2}, partial_shape{}});
    REQUIRE(unknown.ok());
    CHECK((*unknown)[0] == partial_shape{-1, -1});
  }
  {
    tensor perm = vec<int32_t>({2, 0, 1});
    auto s = infer_shapes(transpose_node(dtype::float32),
                          {partial_shape{2, -1, 4}, partial_shape{3}}, {nullptr, &perm});
    REQUIRE(s.ok());
    CHECK((*s)[0] == partial_shape{4, 2, -1});
    tensor bad = vec<int32_t>({0, 0, 1});
    CHECK_FALSE(infer_shapes(transpose_node(dtype::float32),
                             {partial_shape{2, 3, 4}, partial_shape{3}}, {nullptr, &bad})
                    .ok());
  }
  {
    tensor axis = tensor::scalar<int32_t>(-1);
    auto s = infer_shapes(
        concat_node(dtype::float32, 3),
        {partial_shape{2, 3}, partial_shape{-1, 4}, partial_shape{2, 1}, partial_shape{}},
        {nullptr, nullptr, nullptr, &axis});
    REQUIRE(s.ok());
    CHECK((*s)[0] == partial_shape{2, 8});
    auto no_axis = infer_shapes(concat_node(dtype::float32, 2),
                                {partial_shape{2, 3}, partial_shape::unknown(), partial_shape{}});
    REQUIRE(no_axis.ok());
    CHECK((*no_axis)[0] == partial_shape{-1, -1});
    tensor axis0 = tensor::scalar<int32_t>(0);
    CHECK_FALSE(infer_shapes(concat_node(dtype::float32, 2),
                             {partial_shape{2, 3}, partial_shape{2, 4}, partial_shape{}},
                             {nullptr, nullptr, &axis0})
                    .ok());
  }
  {
    auto s = infer_shapes(pack_node(dtype::float32, 2, -1),
                          {partial_shape{2, -1}, partial_shape{-1, 3}});
    REQUIRE(s.ok());
    CHECK((*s)[0] == partial_shape{2, 3, 2});
  }
  {
    tensor dim = tensor::scalar<int32_t>(1);
    auto node = make_node("ExpandDims", {{"T", attr_value(dtype::float32)}});
    auto s = infer_shapes(node, {partial_shape{2, 3}, partial_shape{}}, {nullptr, &dim});
    REQUIRE(s.ok());
    CHECK((*s)[0] == partial_shape{2, 1, 3});
  }
  {
    auto node = make_node("Squeeze", {{"T", attr_value(dtype::float32)}});
    auto s = infer_shapes(node, {partial_shape{1, 2, 1}});
    REQUIRE(s.ok());
    CHECK((*s)[0] == partial_shape{2});
    auto unknown = infer_shapes(node, {partial_shape{1, -1}});
    REQUIRE(unknown.ok());
    CHECK_FALSE((*unknown)[0].known_rank());
  }
  {
    auto s = infer_shapes(make_node("Shape", {{"T", attr_value(dtype::float32)}}),
                          {partial_shape{2, -1, 3}});
    REQUIRE(s.ok());
    CHECK((*s)[0] == partial_shape{3});
  }
}

}  // namespace
}  // namespace troupe
