// kernels/training_ops.h: every update against a scalar reference loop in float64 (one
// table row per optimizer, several shapes, float64 and float32, with and without a pool
// large enough to split the work), the argument checks (each names the argument and both
// shapes or dtypes, and leaves the tensors unchanged), scatter_add and gather.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/training_ops.h"

using namespace troupe;

namespace {

// A tensor of `type` holding the float64 values `values`.
tensor make(dtype type, const tensor_shape& shape, const std::vector<double>& values) {
  tensor t(type, shape);
  visit_dtype<float_types>(type, [&]<class T>() {
    for (std::size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = static_cast<T>(values[i]);
  });
  return t;
}

tensor scalar(dtype type, double value) { return make(type, tensor_shape{}, {value}); }

std::vector<double> values_of(const tensor& t) {
  std::vector<double> out;
  visit_dtype<float_types>(t.type(), [&]<class T>() {
    for (T v : t.flat<T>()) out.push_back(static_cast<double>(v));
  });
  return out;
}

std::vector<double> random_values(std::int64_t n, std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = dist(rng);
  return v;
}

// One optimizer: how many slots, its hyper-parameters, the function under test and a
// scalar reference. Slots and var are updated element by element by the reference.
struct update_case {
  std::string name;
  int num_slots;
  std::vector<double> hyper;  // in the order the function takes them
  double slot_lo = 0.0;       // slots start uniform in [slot_lo, slot_hi]
  double slot_hi = 1.0;
  std::function<status(tensor& var, std::vector<tensor>& slots, const std::vector<tensor>& hyper,
                       const tensor& grad, compute_pool* pool)>
      apply;
  std::function<void(double& var, std::vector<double*> slots, const std::vector<double>& hyper,
                     double grad)>
      reference;
};

std::vector<update_case> update_cases() {
  std::vector<update_case> cases;
  cases.push_back({"gradient descent", 0, {0.1}, 0, 1,
                   [](tensor& var, std::vector<tensor>&, const std::vector<tensor>& h, const tensor& g,
                      compute_pool* pool) { return kernels::apply_gradient_descent(var, h[0], g, pool); },
                   [](double& var, std::vector<double*>, const std::vector<double>& h, double g) {
                     var -= h[0] * g;
                   }});
  for (bool nesterov : {false, true}) {
    cases.push_back({nesterov ? "momentum (nesterov)" : "momentum", 1, {0.05, 0.9}, -1, 1,
                     [nesterov](tensor& var, std::vector<tensor>& s, const std::vector<tensor>& h,
                                const tensor& g, compute_pool* pool) {
                       return kernels::apply_momentum(var, s[0], h[0], g, h[1], nesterov, pool);
                     },
                     [nesterov](double& var, std::vector<double*> s, const std::vector<double>& h, double g) {
                       double& accum = *s[0];
                       const double lr = h[0], mu = h[1];
                       accum = accum * mu + g;
                       var -= nesterov ? lr * g + lr * mu * accum : lr * accum;
                     }});
  }
  for (bool update_slots : {true, false}) {
    cases.push_back({update_slots ? "adagrad" : "adagrad (no slot update)", 1, {0.1}, 0.1, 1,
                     [update_slots](tensor& var, std::vector<tensor>& s, const std::vector<tensor>& h,
                                    const tensor& g, compute_pool* pool) {
                       return kernels::apply_adagrad(var, s[0], h[0], g, update_slots, pool);
                     },
                     [update_slots](double& var, std::vector<double*> s, const std::vector<double>& h,
                                    double g) {
                       double& accum = *s[0];
                       if (update_slots) accum += g * g;
                       var -= h[0] * g / std::sqrt(accum);
                     }});
  }
  for (bool nesterov : {false, true}) {
    // beta1_power, beta2_power, lr, beta1, beta2, epsilon (the third step: powers 0.9^3, 0.999^3)
    cases.push_back({nesterov ? "adam (nesterov)" : "adam", 2,
                     {0.729, 0.997002999, 0.01, 0.9, 0.999, 1e-7}, 0.0, 0.5,
                     [nesterov](tensor& var, std::vector<tensor>& s, const std::vector<tensor>& h,
                                const tensor& g, compute_pool* pool) {
                       return kernels::apply_adam(var, s[0], s[1], h[0], h[1], h[2], h[3], h[4], h[5],
                                                  g, nesterov, pool);
                     },
                     [nesterov](double& var, std::vector<double*> s, const std::vector<double>& h,
                                double g) {
                       double& m = *s[0];
                       double& v = *s[1];
                       const double b1p = h[0], b2p = h[1], lr = h[2], b1 = h[3], b2 = h[4], eps = h[5];
                       const double lr_t = lr * std::sqrt(1 - b2p) / (1 - b1p);
                       m = b1 * m + (1 - b1) * g;
                       v = b2 * v + (1 - b2) * g * g;
                       const double step = nesterov ? b1 * m + (1 - b1) * g : m;
                       var -= lr_t * step / (std::sqrt(v) + eps);
                     }});
  }
  // lr, rho, momentum, epsilon
  cases.push_back({"rms_prop", 2, {0.01, 0.9, 0.5, 1e-10}, 0.0, 0.5,
                   [](tensor& var, std::vector<tensor>& s, const std::vector<tensor>& h, const tensor& g,
                      compute_pool* pool) {
                     return kernels::apply_rms_prop(var, s[0], s[1], h[0], h[1], h[2], h[3], g, pool);
                   },
                   [](double& var, std::vector<double*> s, const std::vector<double>& h, double g) {
                     double& ms = *s[0];
                     double& mom = *s[1];
                     const double lr = h[0], rho = h[1], mu = h[2], eps = h[3];
                     ms = rho * ms + (1 - rho) * g * g;
                     mom = mu * mom + lr * g / std::sqrt(ms + eps);
                     var -= mom;
                   }});
  return cases;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tolerance,
                 const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= tolerance * std::max(1.0, std::abs(want[i])))) {
      FAIL(what << "[" << i << "]: got " << got[i] << ", want " << want[i]);
    }
  }
}

}  // namespace

TEST_CASE("training updates match a scalar reference", "[training_ops]") {
  const unsigned seed = 11;
  compute_pool pool(4);
  const std::vector<tensor_shape> shapes = {{}, {1}, {7}, {3, 4}, {2, 3, 5}, {257, 129}};
  for (const update_case& c : update_cases()) {
    for (const tensor_shape& shape : shapes) {
      for (dtype type : {dtype::float64, dtype::float32}) {
        for (compute_pool* p : {static_cast<compute_pool*>(nullptr), &pool}) {
          INFO(c.name << ", shape " << shape.to_string() << ", " << dtype_name(type)
                      << (p ? ", pool" : ", no pool") << ", seed std::mt19937(" << seed << ")");
          std::mt19937 rng(seed);
          const std::int64_t n = shape.num_elements();
          std::vector<double> var = random_values(n, rng, -1, 1);
          std::vector<double> grad = random_values(n, rng, -1, 1);
          std::vector<std::vector<double>> slots;
          for (int k = 0; k < c.num_slots; ++k) slots.push_back(random_values(n, rng, c.slot_lo, c.slot_hi));
          // Values as the tensors hold them, so float32 rounding of the inputs is shared.
          tensor var_t = make(type, shape, var);
          tensor grad_t = make(type, shape, grad);
          std::vector<tensor> slot_t;
          for (auto& s : slots) slot_t.push_back(make(type, shape, s));
          std::vector<tensor> hyper_t;
          std::vector<double> hyper;
          for (double h : c.hyper) {
            hyper_t.push_back(scalar(type, h));
            hyper.push_back(values_of(hyper_t.back())[0]);
          }
          var = values_of(var_t);
          grad = values_of(grad_t);
          for (std::size_t k = 0; k < slots.size(); ++k) slots[k] = values_of(slot_t[k]);

          // Two steps, so slots written by the first are read by the second.
          for (int step = 0; step < 2; ++step) {
            status s = c.apply(var_t, slot_t, hyper_t, grad_t, p);
            REQUIRE(s.ok());
            for (std::int64_t i = 0; i < n; ++i) {
              std::vector<double*> slot_ptrs;
              for (auto& sl : slots) slot_ptrs.push_back(&sl[static_cast<std::size_t>(i)]);
              c.reference(var[static_cast<std::size_t>(i)], slot_ptrs, hyper, grad[static_cast<std::size_t>(i)]);
            }
          }
          const double tolerance = type == dtype::float64 ? 1e-12 : 2e-5;
          check_close(values_of(var_t), var, tolerance, "var");
          for (std::size_t k = 0; k < slots.size(); ++k) {
            check_close(values_of(slot_t[k]), slots[k], tolerance, "slot " + std::to_string(k));
          }
        }
      }
    }
  }
}

TEST_CASE("training updates report bad arguments and change nothing", "[training_ops]") {
  const dtype f = dtype::float32;
  tensor var = make(f, {2, 3}, {1, 2, 3, 4, 5, 6});
  const tensor before = var.deep_copy();
  tensor accum = make(f, {2, 3}, {1, 1, 1, 1, 1, 1});
  tensor grad = make(f, {2, 3}, {1, 1, 1, 1, 1, 1});
  tensor lr = scalar(f, 0.1);

  auto expect_error = [&](const status& s, std::vector<std::string> parts) {
    REQUIRE_FALSE(s.ok());
    CHECK(s.error_code() == code::invalid_argument);
    for (const auto& p : parts) {
      INFO("message: " << s.message());
      CHECK(s.message().find(p) != std::string::npos);
    }
    CHECK(var.equals(before));
  };

  SECTION("grad shape") {
    tensor bad = make(f, {3, 2}, {1, 1, 1, 1, 1, 1});
    expect_error(kernels::apply_gradient_descent(var, lr, bad),
                 {"apply_gradient_descent", "delta", "[3,2]", "var", "[2,3]"});
  }
  SECTION("slot shape") {
    tensor bad = make(f, {6}, {1, 1, 1, 1, 1, 1});
    expect_error(kernels::apply_momentum(var, bad, lr, grad, scalar(f, 0.9), false),
                 {"apply_momentum", "accum", "[6]", "[2,3]"});
  }
  SECTION("slot dtype") {
    tensor bad = make(dtype::float64, {2, 3}, {1, 1, 1, 1, 1, 1});
    expect_error(kernels::apply_adagrad(var, bad, lr, grad, true),
                 {"apply_adagrad", "accum", "double", "float"});
  }
  SECTION("grad dtype") {
    tensor bad = make(dtype::float64, {2, 3}, {1, 1, 1, 1, 1, 1});
    tensor m = accum.deep_copy(), v = accum.deep_copy();
    expect_error(kernels::apply_adam(var, m, v, scalar(f, 0.9), scalar(f, 0.999), lr, scalar(f, 0.9),
                                     scalar(f, 0.999), scalar(f, 1e-7), bad, false),
                 {"apply_adam", "grad", "double", "var", "float"});
  }
  SECTION("hyper-parameter not a scalar") {
    tensor ms = accum.deep_copy(), mom = accum.deep_copy();
    tensor rho = make(f, {2}, {0.9, 0.9});
    expect_error(kernels::apply_rms_prop(var, ms, mom, lr, rho, scalar(f, 0), scalar(f, 1e-7), grad),
                 {"apply_rms_prop", "rho", "scalar", "[2]"});
  }
  SECTION("hyper-parameter dtype") {
    expect_error(kernels::apply_gradient_descent(var, scalar(dtype::float64, 0.1), grad),
                 {"alpha", "double", "float"});
  }
  SECTION("integer variables") {
    tensor ivar = tensor::from_vector<std::int32_t>({1, 2});
    tensor igrad = tensor::from_vector<std::int32_t>({1, 2});
    status s = kernels::apply_gradient_descent(ivar, tensor::scalar<std::int32_t>(1), igrad);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find("int32") != std::string::npos);
    CHECK(s.message().find("only float and double") != std::string::npos);
  }
  SECTION("uninitialized") {
    tensor none;
    expect_error(kernels::apply_gradient_descent(var, lr, none), {"delta", "uninitialized"});
  }
  SECTION("a shape [1] learning rate is a scalar, as in TensorFlow") {
    tensor lr1 = make(f, {1}, {0.5});
    REQUIRE(kernels::apply_gradient_descent(var, lr1, grad).ok());
    CHECK(values_of(var)[0] == Approx(0.5));
  }
}

TEST_CASE("assign_add and assign_sub", "[training_ops]") {
  tensor var = tensor::from_vector<double>({1, 2, 3});
  REQUIRE(kernels::assign_add(var, tensor::from_vector<double>({1, 1, 1})).ok());
  REQUIRE(kernels::assign_sub(var, tensor::from_vector<double>({0.5, 0.5, 4})).ok());
  CHECK(values_of(var) == std::vector<double>{1.5, 2.5, 0});

  tensor step = tensor::scalar<std::int64_t>(41);
  REQUIRE(kernels::assign_add(step, tensor::scalar<std::int64_t>(1)).ok());
  CHECK(step.scalar_value<std::int64_t>() == 42);
  tensor big = tensor::scalar<std::int64_t>(std::numeric_limits<std::int64_t>::max());
  REQUIRE(kernels::assign_add(big, tensor::scalar<std::int64_t>(1)).ok());
  CHECK(big.scalar_value<std::int64_t>() == std::numeric_limits<std::int64_t>::min());

  status s = kernels::assign_add(var, tensor::from_vector<double>({1, 1}));
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("[2]") != std::string::npos);
  CHECK(s.message().find("[3]") != std::string::npos);
  s = kernels::assign_sub(var, tensor::from_vector<float>({1, 1, 1}));
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("float") != std::string::npos);
}

TEST_CASE("scatter_add adds rows, repeated indices add up", "[training_ops]") {
  compute_pool pool(3);
  for (compute_pool* p : {static_cast<compute_pool*>(nullptr), &pool}) {
    tensor var = tensor::from_vector<float>({0, 0, 1, 1, 2, 2, 3, 3}, {4, 2});
    tensor indices = tensor::from_vector<std::int64_t>({3, 0, 3}, {3});
    tensor updates = tensor::from_vector<float>({1, 2, 10, 20, 100, 200}, {3, 2});
    REQUIRE(kernels::scatter_add(var, indices, updates, p).ok());
    CHECK(var.equals(tensor::from_vector<float>({10, 20, 1, 1, 2, 2, 104, 205}, {4, 2})));

    // Indices of rank 2, updates of rank 3; a scalar update.
    tensor var3 = tensor::zeros(dtype::float64, {3, 2});
    tensor idx2 = tensor::from_vector<std::int32_t>({0, 2, 2, 1}, {2, 2});
    tensor upd3 = tensor::from_vector<double>({1, 1, 2, 2, 3, 3, 4, 4}, {2, 2, 2});
    REQUIRE(kernels::scatter_add(var3, idx2, upd3, p).ok());
    CHECK(var3.equals(tensor::from_vector<double>({1, 1, 4, 4, 5, 5}, {3, 2})));
    REQUIRE(kernels::scatter_add(var3, tensor::from_vector<std::int32_t>({1}), tensor::scalar<double>(0.5), p).ok());
    CHECK(var3.equals(tensor::from_vector<double>({1, 1, 4.5, 4.5, 5, 5}, {3, 2})));
  }

  tensor var = tensor::from_vector<float>({1, 2, 3}, {3});
  const tensor before = var.deep_copy();
  status s = kernels::scatter_add(var, tensor::from_vector<std::int32_t>({0, 3}),
                                  tensor::from_vector<float>({1, 1}));
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("indices[1] = 3 is not in [0, 3)") != std::string::npos);
  CHECK(var.equals(before));
  s = kernels::scatter_add(var, tensor::from_vector<std::int32_t>({0, 1}),
                           tensor::from_vector<float>({1, 1, 1}));
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("updates have shape [3]") != std::string::npos);
  CHECK(s.message().find("need [2]") != std::string::npos);
  s = kernels::scatter_add(var, tensor::from_vector<float>({0}), tensor::from_vector<float>({1}));
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("int32 or int64") != std::string::npos);
  CHECK(var.equals(before));
}

TEST_CASE("gather with and without batch dimensions", "[training_ops]") {
  tensor params = tensor::from_vector<float>({0, 1, 10, 11, 20, 21}, {3, 2});
  auto out = kernels::gather(params, tensor::from_vector<std::int32_t>({2, 0, 2, 1}, {2, 2}));
  REQUIRE(out.ok());
  CHECK(out->equals(tensor::from_vector<float>({20, 21, 0, 1, 20, 21, 10, 11}, {2, 2, 2})));

  // batch_dims = 1: params [2, 3], indices [2, 2] -> [2, 2].
  tensor batched = tensor::from_vector<std::int64_t>({0, 1, 2, 10, 11, 12}, {2, 3});
  out = kernels::gather(batched, tensor::from_vector<std::int64_t>({2, 2, 0, 1}, {2, 2}), 1);
  REQUIRE(out.ok());
  CHECK(out->equals(tensor::from_vector<std::int64_t>({2, 2, 10, 11}, {2, 2})));

  auto bad = kernels::gather(params, tensor::from_vector<std::int32_t>({3}));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message().find("indices[0] = 3 is not in [0, 3)") != std::string::npos);
  bad = kernels::gather(batched, tensor::from_vector<std::int32_t>({0, 0, 0}, {3, 1}), 1);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message().find("batch dimension 0") != std::string::npos);
  bad = kernels::gather(tensor::scalar<float>(1), tensor::from_vector<std::int32_t>({0}));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message().find("rank >= batch_dims + 1") != std::string::npos);
}

TEST_CASE("apply_gradient_descent_matmul subtracts lr times the product, every transpose", "[training_ops]") {
  std::mt19937 rng(42);
  compute_pool two(2);
  const std::int64_t m = 37, n = 45, k = 23;  // odd sizes: the column blocks' edges
  for (dtype type : {dtype::float64, dtype::float32}) {
    for (int transposes = 0; transposes < 4; ++transposes) {
      const bool ta = transposes & 1, tb = transposes & 2;
      INFO(dtype_name(type) << " transpose_a " << ta << " transpose_b " << tb);
      const std::vector<double> av = random_values(m * k, rng, -1, 1), bv = random_values(k * n, rng, -1, 1);
      const std::vector<double> start = random_values(m * n, rng, -1, 1);
      tensor a = make(type, ta ? tensor_shape{k, m} : tensor_shape{m, k}, av);
      tensor b = make(type, tb ? tensor_shape{n, k} : tensor_shape{k, n}, bv);
      for (compute_pool* pool : {static_cast<compute_pool*>(nullptr), &two}) {
        tensor var = make(type, {m, n}, start);
        REQUIRE(kernels::apply_gradient_descent_matmul(var, scalar(type, 0.5), a, b, ta, tb, pool).ok());
        const std::vector<double> got = values_of(var);
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t j = 0; j < n; ++j) {
            double product = 0;
            for (std::int64_t q = 0; q < k; ++q) {
              product += av[static_cast<std::size_t>(ta ? q * m + i : i * k + q)] *
                         bv[static_cast<std::size_t>(tb ? j * k + q : q * n + j)];
            }
            const double want = start[static_cast<std::size_t>(i * n + j)] - 0.5 * product;
            REQUIRE(got[static_cast<std::size_t>(i * n + j)] == Approx(want).margin(type == dtype::float32 ? 1e-5 : 1e-12));
          }
        }
      }
    }
  }
}

TEST_CASE("apply_gradient_descent_matmul reports factors that do not make var and changes nothing", "[training_ops]") {
  const dtype f = dtype::float32;
  tensor var = make(f, {2, 3}, {1, 2, 3, 4, 5, 6});
  const tensor before = var.deep_copy();
  tensor a = make(f, {2, 4}, std::vector<double>(8, 1.0));
  tensor b = make(f, {4, 3}, std::vector<double>(12, 1.0));
  auto expect_error = [&](const status& s, const std::string& fragment) {
    REQUIRE_FALSE(s.ok());
    INFO(s.message());
    CHECK(s.message().find(fragment) != std::string::npos);
    CHECK(var.equals(before));
  };
  expect_error(kernels::apply_gradient_descent_matmul(var, scalar(f, 0.1), a, b, true, false),
               "a [2,4] times b [4,3] (transpose_a 1, transpose_b 0) must give var's shape [2,3]");
  expect_error(kernels::apply_gradient_descent_matmul(var, scalar(f, 0.1), make(dtype::float64, {2, 4}, std::vector<double>(8, 1.0)), b, false, false),
               "a is a double tensor of shape [2,4]; it must be a float matrix");
  expect_error(kernels::apply_gradient_descent_matmul(var, make(f, {2}, {1, 1}), a, b, false, false),
               "alpha must be a scalar");
  REQUIRE(kernels::apply_gradient_descent_matmul(var, scalar(f, 0.5), a, b, false, false).ok());
  CHECK(values_of(var) == std::vector<double>{-1, 0, 1, 2, 3, 4});
}
