// BiasAdd, BiasAddGrad, Softmax, LogSoftmax and the two softmax cross-entropy ops: the
// kernels against double-precision reference loops on random shapes (seed 42), both data
// formats, every dtype, broadcast labels, extreme logits, empty tensors and the error
// paths; the shape functions.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
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

using bias_types = type_list<float, double, std::int8_t, std::int16_t, std::int32_t,
                             std::int64_t, std::uint8_t, std::uint16_t>;

tf::NodeDef make_node(const std::string& op, dtype type) {
  tf::NodeDef node;
  node.set_name(op);
  node.set_op(op);
  (*node.mutable_attr())["T"] = graph::attr_value(type);
  return node;
}

template <class T>
tensor random_tensor(const tensor_shape& shape, std::mt19937& rng, double scale = 1.0) {
  tensor t(dtype_of<T>, shape);
  if constexpr (std::is_floating_point_v<T>) {
    std::uniform_real_distribution<double> dist(-scale, scale);
    for (T& x : t.flat<T>()) x = static_cast<T>(dist(rng));
  } else {
    std::uniform_int_distribution<int> dist(std::is_signed_v<T> ? -50 : 0, 50);
    for (T& x : t.flat<T>()) x = static_cast<T>(dist(rng));
  }
  return t;
}

tensor_shape random_shape(std::mt19937& rng, int min_rank, int max_rank, int max_dim) {
  std::uniform_int_distribution<int> rank_dist(min_rank, max_rank), dim_dist(0, max_dim);
  std::bernoulli_distribution keep_zero(0.15);
  tensor_shape shape;
  int rank = rank_dist(rng);
  for (int i = 0; i < rank; ++i) {
    int d = dim_dist(rng);
    if (d == 0 && !keep_zero(rng)) d = 1;
    shape.add_dim(d);
  }
  return shape;
}

// Checks got[i] against want[i] within rel * max(1, |want[i]|).
template <class T>
void check_close(const tensor& got, const tensor_shape& shape, const std::vector<double>& want,
                 double rel) {
  REQUIRE(got.type() == dtype_of<T>);
  REQUIRE(got.shape() == shape);
  REQUIRE(static_cast<std::size_t>(got.num_elements()) == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    double g = static_cast<double>(got.data<T>()[i]);
    double tolerance = rel * std::max(1.0, std::abs(want[i]));
    if (!(std::abs(g - want[i]) <= tolerance)) {
      FAIL_CHECK("output[" << i << "] = " << g << ", want " << want[i] << " (tolerance "
                           << tolerance << ")");
      return;
    }
  }
}

template <class T>
double tolerance_for() {
  return std::is_same_v<T, float> ? 2e-5 : std::is_same_v<T, double> ? 1e-12 : 0.0;
}

// ---- BiasAdd, BiasAddGrad ----

TEST_CASE("BiasAdd and BiasAddGrad match the reference in both data formats") {
  std::mt19937 rng(42);
  compute_pool pool(2);
  for_each_type<bias_types>([&]<class T>() {
    for (int trial = 0; trial < 40; ++trial) {
      bool nchw = trial % 2 == 1;
      tensor_shape shape = random_shape(rng, 2, 5, 6);
      if (trial == 0) shape = tensor_shape{64, 3000};      // large enough for the pool
      if (trial == 1) shape = tensor_shape{4, 16, 40, 40};
      if (trial == 2) shape = tensor_shape{3, 7, 9, 6};  // channels last in periods of 8 rows, 5 rows left over
      if (trial == 4) shape = tensor_shape{5, 9, 33};    // 33 channels: no period (lcm 528)
      int channel_dim = nchw ? 1 : shape.rank() - 1;
      std::int64_t channels = shape.dim(channel_dim);
      std::int64_t spatial = 1;
      for (int i = channel_dim + 1; i < shape.rank(); ++i) spatial *= shape.dim(i);
      tensor value = random_tensor<T>(shape, rng);
      tensor bias = random_tensor<T>({channels}, rng);
      INFO("dtype " << dtype_name(dtype_of<T>) << " value " << shape << (nchw ? " NCHW" : " NHWC")
                    << ", seed 42");
      tf::NodeDef node = make_node("BiasAdd", dtype_of<T>);
      (*node.mutable_attr())["data_format"] = graph::attr_value(nchw ? "NCHW" : "NHWC");
      auto out = kernels::run_kernel(node, {value, bias}, &pool);
      REQUIRE(out.ok());
      std::vector<double> want, want_grad(static_cast<std::size_t>(channels), 0.0);
      for (std::int64_t i = 0; i < value.num_elements(); ++i) {
        std::int64_t c = (i / spatial) % channels;
        // The sum in T, as the kernel computes it (integers wrap).
        want.push_back(static_cast<double>(static_cast<T>(value.data<T>()[i] + bias.data<T>()[c])));
        want_grad[static_cast<std::size_t>(c)] += static_cast<double>(value.data<T>()[i]);
      }
      check_close<T>((*out)[0], shape, want, tolerance_for<T>());

      if constexpr (std::is_floating_point_v<T> || sizeof(T) >= 4) {  // no wrap-around
        tf::NodeDef grad_node = make_node("BiasAddGrad", dtype_of<T>);
        (*grad_node.mutable_attr())["data_format"] = graph::attr_value(nchw ? "NCHW" : "NHWC");
        auto grad = kernels::run_kernel(grad_node, {value}, &pool);
        REQUIRE(grad.ok());
        check_close<T>((*grad)[0], tensor_shape{channels}, want_grad,
                       tolerance_for<T>() * static_cast<double>(value.num_elements() + 1));
      }
    }
  });
}

TEST_CASE("BiasAddGrad gives the same bits on any pool size") {
  std::mt19937 rng(42);
  for (const tensor_shape& shape : {tensor_shape{64, 28, 28, 6}, tensor_shape{64, 1000}, tensor_shape{8, 50, 30, 30}}) {
    const bool nchw = shape.rank() == 4 && shape.dim(1) == 50;
    INFO("value " << shape << (nchw ? " NCHW" : " NHWC") << ", seed 42");
    tensor value = random_tensor<float>(shape, rng);
    tf::NodeDef node = make_node("BiasAddGrad", dtype::float32);
    (*node.mutable_attr())["data_format"] = graph::attr_value(nchw ? "NCHW" : "NHWC");
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      compute_pool pool(threads);
      auto grad = kernels::run_kernel(node, {value}, &pool);
      REQUIRE(grad.ok());
      std::vector<float> got((*grad)[0].data<float>(), (*grad)[0].data<float>() + (*grad)[0].num_elements());
      if (first.empty()) first = got;
      else CHECK(got == first);
    }
  }
}

TEST_CASE("BiasAdd errors") {
  tf::NodeDef node = make_node("BiasAdd", dtype::float32);
  auto out = kernels::run_kernel(node, {tensor(dtype::float32, {2, 3}), tensor(dtype::float32, {4})});
  REQUIRE_FALSE(out.ok());
  CHECK(out.error().error_code() == code::invalid_argument);
  CHECK_THAT(out.error().message(), Catch::Contains("[4]") && Catch::Contains("[2,3]"));
  out = kernels::run_kernel(node, {tensor(dtype::float32, {3}), tensor(dtype::float32, {3})});
  REQUIRE_FALSE(out.ok());
  CHECK(out.error().error_code() == code::invalid_argument);
  (*node.mutable_attr())["data_format"] = graph::attr_value("NCWH");
  out = kernels::run_kernel(node, {tensor(dtype::float32, {2, 3}), tensor(dtype::float32, {3})});
  REQUIRE_FALSE(out.ok());
  CHECK_THAT(out.error().message(), Catch::Contains("NCWH"));
}

// ---- Softmax, LogSoftmax ----

// Softmax (or its log) of each row of `classes` values, in double.
std::vector<double> reference_softmax(const std::vector<double>& x, std::int64_t classes, bool log) {
  std::vector<double> y(x.size());
  for (std::size_t start = 0; start < x.size(); start += static_cast<std::size_t>(classes)) {
    double max = -INFINITY;
    for (std::int64_t j = 0; j < classes; ++j) max = std::max(max, x[start + j]);
    double sum = 0;
    for (std::int64_t j = 0; j < classes; ++j) sum += std::exp(x[start + j] - max);
    for (std::int64_t j = 0; j < classes; ++j) {
      y[start + j] = log ? x[start + j] - max - std::log(sum) : std::exp(x[start + j] - max) / sum;
    }
  }
  return y;
}

template <class T>
std::vector<double> as_doubles(const tensor& t) {
  std::vector<double> v;
  for (T x : t.flat<T>()) v.push_back(static_cast<double>(x));
  return v;
}

TEST_CASE("Softmax and LogSoftmax match the reference") {
  std::mt19937 rng(42);
  compute_pool pool(2);
  for (bool log : {false, true}) {
    for_each_type<float_types>([&]<class T>() {
      for (int trial = 0; trial < 40; ++trial) {
        tensor_shape shape = random_shape(rng, 1, 4, 9);
        if (trial == 0) shape = tensor_shape{300, 1000};
        double scale = trial % 4 == 0 ? 80.0 : 3.0;  // wide logits test the max shift
        tensor logits = random_tensor<T>(shape, rng, scale);
        INFO((log ? "LogSoftmax" : "Softmax") << " dtype " << dtype_name(dtype_of<T>) << " logits "
                                              << shape << " scale " << scale << ", seed 42");
        auto out = kernels::run_kernel(make_node(log ? "LogSoftmax" : "Softmax", dtype_of<T>),
                                       {logits}, &pool);
        REQUIRE(out.ok());
        std::int64_t classes = shape.dim(shape.rank() - 1);
        std::vector<double> want =
            classes == 0 ? std::vector<double>{} : reference_softmax(as_doubles<T>(logits), classes, log);
        check_close<T>((*out)[0], shape, want, 4 * tolerance_for<T>());
      }
    });
  }
}

TEST_CASE("Softmax is stable for huge logits and rejects scalars") {
  tensor logits = tensor::from_vector<float>({1000, 1001, 1002, -1000, -1001, -1002}, {2, 3});
  auto out = kernels::run_kernel(make_node("Softmax", dtype::float32), {logits});
  REQUIRE(out.ok());
  std::vector<double> want = reference_softmax(as_doubles<float>(logits), 3, false);
  check_close<float>((*out)[0], {2, 3}, want, 1e-6);
  out = kernels::run_kernel(make_node("LogSoftmax", dtype::float32), {logits});
  REQUIRE(out.ok());
  check_close<float>((*out)[0], {2, 3}, reference_softmax(as_doubles<float>(logits), 3, true), 1e-5);
  out = kernels::run_kernel(make_node("Softmax", dtype::float32), {tensor::scalar<float>(1)});
  REQUIRE_FALSE(out.ok());
  CHECK(out.error().error_code() == code::invalid_argument);
}

// ---- Cross-entropy ----

// Loss and backprop of softmax cross-entropy for a [batch, classes] matrix, in double.
void reference_xent(const std::vector<double>& x, const std::vector<double>& labels,
                    std::int64_t batch, std::int64_t classes, std::vector<double>* loss,
                    std::vector<double>* backprop) {
  std::vector<double> log_p = reference_softmax(x, classes, true);
  loss->assign(static_cast<std::size_t>(batch), 0.0);
  backprop->resize(x.size());
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t c = 0; c < classes; ++c) {
      std::size_t i = static_cast<std::size_t>(b * classes + c);
      (*loss)[static_cast<std::size_t>(b)] -= labels[i] * log_p[i];
      (*backprop)[i] = std::exp(log_p[i]) - labels[i];
    }
  }
}

// Values of a [rows, cols] (or lower-rank) tensor broadcast to [batch, classes].
template <class T>
std::vector<double> broadcast(const tensor& t, std::int64_t batch, std::int64_t classes) {
  std::int64_t rows = t.rank() == 2 ? t.dim(0) : 1;
  std::int64_t cols = t.rank() >= 1 ? t.dim(t.rank() - 1) : 1;
  std::vector<double> out;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t c = 0; c < classes; ++c) {
      out.push_back(static_cast<double>(t.data<T>()[(rows == 1 ? 0 : b) * cols + (cols == 1 ? 0 : c)]));
    }
  }
  return out;
}

// Rows of non-negative values summing to one.
template <class T>
tensor random_distribution(const tensor_shape& shape, std::mt19937& rng) {
  tensor t(dtype_of<T>, shape);
  std::uniform_real_distribution<double> dist(0.0, 1.0);
  std::int64_t cols = shape.rank() == 0 ? 1 : shape.dim(shape.rank() - 1);
  for (std::int64_t start = 0; start < t.num_elements(); start += cols) {
    double sum = 0;
    std::vector<double> row;
    for (std::int64_t j = 0; j < cols; ++j) sum += row.emplace_back(dist(rng));
    for (std::int64_t j = 0; j < cols; ++j) t.data<T>()[start + j] = static_cast<T>(row[static_cast<std::size_t>(j)] / sum);
  }
  return t;
}

TEST_CASE("SoftmaxCrossEntropyWithLogits matches the reference, with broadcast labels") {
  std::mt19937 rng(42);
  compute_pool pool(2);
  for_each_type<float_types>([&]<class T>() {
    std::uniform_int_distribution<int> batch_dist(0, 9), class_dist(1, 12);
    for (int trial = 0; trial < 40; ++trial) {
      std::int64_t batch = batch_dist(rng), classes = class_dist(rng);
      if (trial == 0) batch = 500, classes = 1000;
      tensor_shape features_shape{batch, classes}, labels_shape{batch, classes};
      switch (trial % 5) {
        case 1: labels_shape = tensor_shape{classes}; break;
        case 2: labels_shape = tensor_shape{1, classes}; break;
        case 3: features_shape = tensor_shape{1, classes}; break;
        default: break;
      }
      tensor features = random_tensor<T>(features_shape, rng, trial % 3 == 0 ? 30.0 : 2.0);
      tensor labels = random_distribution<T>(labels_shape, rng);
      INFO("dtype " << dtype_name(dtype_of<T>) << " features " << features_shape << " labels "
                    << labels_shape << ", seed 42");
      auto out = kernels::run_kernel(make_node("SoftmaxCrossEntropyWithLogits", dtype_of<T>),
                                     {features, labels}, &pool);
      REQUIRE(out.ok());
      REQUIRE(out->size() == 2);
      std::vector<double> loss, backprop;
      reference_xent(broadcast<T>(features, batch, classes), broadcast<T>(labels, batch, classes),
                     batch, classes, &loss, &backprop);
      check_close<T>((*out)[0], tensor_shape{batch}, loss, 4 * tolerance_for<T>());
      check_close<T>((*out)[1], tensor_shape{batch, classes}, backprop, 4 * tolerance_for<T>());
    }
  });
}

TEST_CASE("SoftmaxCrossEntropyWithLogits errors") {
  auto run = [](tensor_shape f, tensor_shape l) {
    return kernels::run_kernel(make_node("SoftmaxCrossEntropyWithLogits", dtype::float32),
                               {tensor::zeros(dtype::float32, f), tensor::zeros(dtype::float32, l)});
  };
  auto out = run({2, 3}, {2, 4});
  REQUIRE_FALSE(out.ok());
  CHECK(out.error().error_code() == code::invalid_argument);
  CHECK_THAT(out.error().message(), Catch::Contains("[2,3]") && Catch::Contains("[2,4]"));
  CHECK_FALSE(run({2, 3, 4}, {2, 3, 4}).ok());
  CHECK_FALSE(run({3}, {3}).ok());
  CHECK(run({3, 0}, {3, 0}).ok());
}

template <class T, class Label>
void check_sparse_case(std::mt19937& rng, std::int64_t batch, std::int64_t classes, compute_pool* pool) {
  tensor features = random_tensor<T>({batch, classes}, rng, 5.0);
  tensor labels(dtype_of<Label>, {batch});
  std::uniform_int_distribution<std::int64_t> label_dist(0, classes - 1);
  for (Label& y : labels.flat<Label>()) y = static_cast<Label>(label_dist(rng));
  INFO("dtype " << dtype_name(dtype_of<T>) << " Tlabels " << dtype_name(dtype_of<Label>)
                << " features " << features.shape() << ", seed 42");
  tf::NodeDef node = make_node("SparseSoftmaxCrossEntropyWithLogits", dtype_of<T>);
  (*node.mutable_attr())["Tlabels"] = graph::attr_value(dtype_of<Label>);
  auto out = kernels::run_kernel(node, {features, labels}, pool);
  REQUIRE(out.ok());
  std::vector<double> one_hot(static_cast<std::size_t>(batch * classes), 0.0);
  for (std::int64_t b = 0; b < batch; ++b) {
    one_hot[static_cast<std::size_t>(b * classes + static_cast<std::int64_t>(labels.data<Label>()[b]))] = 1.0;
  }
  std::vector<double> loss, backprop;
  reference_xent(as_doubles<T>(features), one_hot, batch, classes, &loss, &backprop);
  check_close<T>((*out)[0], tensor_shape{batch}, loss, 4 * tolerance_for<T>());
  check_close<T>((*out)[1], tensor_shape{batch, classes}, backprop, 4 * tolerance_for<T>());
}

TEST_CASE("SparseSoftmaxCrossEntropyWithLogits matches the reference") {
  std::mt19937 rng(42);
  compute_pool pool(2);
  std::uniform_int_distribution<int> batch_dist(0, 9), class_dist(1, 12);
  for_each_type<float_types>([&]<class T>() {
    for_each_type<index_types>([&]<class Label>() {
      check_sparse_case<T, Label>(rng, 640, 1000, &pool);
      for (int trial = 0; trial < 30; ++trial) {
        check_sparse_case<T, Label>(rng, batch_dist(rng), class_dist(rng), &pool);
      }
    });
  });
}

TEST_CASE("SparseSoftmaxCrossEntropyWithLogits rejects out-of-range labels") {
  tensor features = tensor::zeros(dtype::float32, {3, 4});
  tf::NodeDef node = make_node("SparseSoftmaxCrossEntropyWithLogits", dtype::float32);
  SECTION("Tlabels defaults to int64; a label past the end names its value and index") {
    auto out = kernels::run_kernel(node, {features, tensor::from_vector<std::int64_t>({0, 3, 4})});
    REQUIRE_FALSE(out.ok());
    CHECK(out.error().error_code() == code::invalid_argument);
    CHECK_THAT(out.error().message(), Catch::Contains("label 4 at index 2"));
  }
  SECTION("a negative label") {
    (*node.mutable_attr())["Tlabels"] = graph::attr_value(dtype::int32);
    auto out = kernels::run_kernel(node, {features, tensor::from_vector<std::int32_t>({0, -1, 2})});
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message(), Catch::Contains("label -1 at index 1"));
  }
  SECTION("batch sizes disagree") {
    auto out = kernels::run_kernel(node, {features, tensor::from_vector<std::int64_t>({0, 1})});
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.error().message(), Catch::Contains("[3,4]") && Catch::Contains("[2]"));
  }
}

// ---- Shape functions ----

result<std::vector<partial_shape>> infer(const tf::NodeDef& node, std::vector<partial_shape> inputs) {
  const graph::op_def* op = graph::op_registry::builtin().find(node.op());
  REQUIRE(op != nullptr);
  REQUIRE(op->shape);
  tf::NodeDef full = node;
  REQUIRE(graph::add_defaults_and_validate_attrs(*op, &full).ok());
  std::vector<dtype> input_types, output_types;
  REQUIRE(graph::input_output_types(*op, full, &input_types, &output_types).ok());
  std::vector<const tensor*> values(inputs.size(), nullptr);
  graph::shape_context ctx(full, *op, std::move(inputs), values, input_types,
                           static_cast<int>(output_types.size()));
  status s = op->shape(ctx);
  if (!s.ok()) return s;
  return ctx.outputs();
}

TEST_CASE("nn shape functions") {
  tf::NodeDef bias_add = make_node("BiasAdd", dtype::float32);
  CHECK((*infer(bias_add, {{-1, 5}, {-1}}))[0] == partial_shape{-1, 5});
  CHECK((*infer(bias_add, {{2, -1}, {5}}))[0] == partial_shape{2, 5});
  auto bad = infer(bias_add, {{2, 3}, {4}});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message(), Catch::Contains("[2,3]") && Catch::Contains("[4]"));
  (*bias_add.mutable_attr())["data_format"] = graph::attr_value("NCHW");
  CHECK((*infer(bias_add, {{2, -1, 7, 7}, {3}}))[0] == partial_shape{2, 3, 7, 7});

  tf::NodeDef grad = make_node("BiasAddGrad", dtype::float32);
  CHECK((*infer(grad, {{2, 7, 5}}))[0] == partial_shape{5});

  tf::NodeDef softmax = make_node("Softmax", dtype::float32);
  CHECK((*infer(softmax, {{-1, 10}}))[0] == partial_shape{-1, 10});
  CHECK_FALSE(infer(softmax, {partial_shape(std::vector<std::int64_t>{})}).ok());

  tf::NodeDef xent = make_node("SoftmaxCrossEntropyWithLogits", dtype::float32);
  auto x = infer(xent, {{-1, 10}, {10}});
  REQUIRE(x.ok());
  CHECK((*x)[0] == partial_shape{-1});
  CHECK((*x)[1] == partial_shape{-1, 10});
  CHECK_FALSE(infer(xent, {{4, 10}, {4, 9}}).ok());
  CHECK_FALSE(infer(xent, {{4, 10, 2}, {4, 10, 2}}).ok());

  tf::NodeDef sparse = make_node("SparseSoftmaxCrossEntropyWithLogits", dtype::float32);
  auto s = infer(sparse, {{-1, 10}, {32}});
  REQUIRE(s.ok());
  CHECK((*s)[0] == partial_shape{32});
  CHECK((*s)[1] == partial_shape{32, 10});
  CHECK_FALSE(infer(sparse, {{16, 10}, {32}}).ok());
}

}  // namespace
}  // namespace troupe
