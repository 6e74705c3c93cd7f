#include "tests/gpu/consistency.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <memory>

#include "graph/attr.h"
#include "kernels/cuda/gpu_device.h"
#include "kernels/cuda/gpu_runner.h"
#include "kernels/kernel_runner.h"
#include "kernels/training_ops.h"

namespace troupe::testing {

namespace {

kernels::gpu::gpu_device& gpu0() {
  static std::unique_ptr<kernels::gpu::gpu_device> device = [] {
    auto d = kernels::gpu::gpu_device::create("/job:localhost/replica:0/task:0/device:GPU:0", 0);
    if (!d.ok()) FAIL("cannot make the GPU device: " << d.error().to_string());
    return std::move(*d);
  }();
  return *device;
}

// Every element as a double (booleans and integers exactly).
std::vector<double> values_of(const tensor& t) {
  std::vector<double> v;
  v.reserve(static_cast<std::size_t>(t.num_elements()));
  visit_dtype(t.type(), [&]<class T>() {
    for (T x : t.flat<T>()) v.push_back(static_cast<double>(x));
  });
  return v;
}

// Records (FAIL_CHECK) where `got` differs from `want` beyond `tol`.
void compare(const tensor& want, const tensor& got, tolerance tol) {
  INFO("CPU " << want.debug_string(8) << ", GPU " << got.debug_string(8));
  if (got.type() != want.type() || got.shape() != want.shape()) {
    FAIL_CHECK("dtype or shape differ");
    return;
  }
  if (want.type() == dtype::resource || want.type() == dtype::string) return;
  std::vector<double> w = values_of(want), g = values_of(got);
  std::size_t worst = 0;
  double worst_excess = 0;
  std::size_t failures = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    bool ok;
    double excess = 0;
    if (std::isnan(w[i]) || std::isnan(g[i])) {
      ok = std::isnan(w[i]) && std::isnan(g[i]);
      excess = ok ? 0 : INFINITY;
    } else if (std::isinf(w[i]) || std::isinf(g[i])) {
      ok = w[i] == g[i];
      excess = ok ? 0 : INFINITY;
    } else {
      const double allowed = tol.atol + tol.rtol * std::fabs(w[i]);
      const double error = std::fabs(g[i] - w[i]);
      ok = error <= allowed;
      excess = error - allowed;
    }
    if (!ok) {
      ++failures;
      if (excess > worst_excess || failures == 1) {
        worst = i;
        worst_excess = excess;
      }
    }
  }
  if (failures > 0) {
    FAIL_CHECK(failures << " of " << w.size() << " elements differ beyond rtol " << tol.rtol << ", atol " << tol.atol
                        << "; worst at flat index " << worst << ": CPU " << w[worst] << ", GPU " << g[worst]);
  }
}

}  // namespace

tf::NodeDef node(const std::string& op, std::initializer_list<std::pair<std::string, tf::AttrValue>> attrs) {
  tf::NodeDef n;
  n.set_name(op);
  n.set_op(op);
  for (const auto& [name, value] : attrs) (*n.mutable_attr())[name] = value;
  return n;
}

tensor consistency_rng::uniform(dtype type, tensor_shape shape, double lo, double hi) {
  tensor t(type, std::move(shape));
  visit_dtype(type, [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      std::bernoulli_distribution d(0.5);
      for (T& x : t.flat<T>()) x = d(engine_);
    } else if constexpr (std::is_floating_point_v<T>) {
      std::uniform_real_distribution<double> d(lo, hi);
      for (T& x : t.flat<T>()) x = static_cast<T>(d(engine_));
    } else if constexpr (std::is_integral_v<T>) {
      std::uniform_int_distribution<std::int64_t> d(static_cast<std::int64_t>(lo), static_cast<std::int64_t>(hi));
      for (T& x : t.flat<T>()) x = static_cast<T>(d(engine_));
    } else {
      std::uniform_real_distribution<float> d(static_cast<float>(lo), static_cast<float>(hi));
      for (T& x : t.flat<T>()) x = static_cast<T>(d(engine_));
    }
  });
  return t;
}

void check_consistency(const consistency_case& c) {
  INFO("case: " << c.name);
  // Both sides get their own copies: a kernel may reuse an input's buffer.
  std::vector<tensor> cpu_inputs, gpu_inputs;
  for (const tensor& t : c.inputs) {
    cpu_inputs.push_back(t.deep_copy());
    gpu_inputs.push_back(t.deep_copy());
  }
  // Failures are recorded and the case left (FAIL_CHECK), so one run shows every case that
  // disagrees.
  auto cpu = kernels::run_kernel(c.node, cpu_inputs);
  if (!cpu.ok()) {
    FAIL_CHECK("the CPU kernel failed: " << cpu.error().to_string());
    return;
  }
  auto gpu = kernels::gpu::run_gpu_kernel(gpu0(), c.node, gpu_inputs);
  if (!gpu.ok()) {
    FAIL_CHECK("the GPU kernel failed: " << gpu.error().to_string());
    return;
  }
  REQUIRE(gpu->size() == cpu->size());
  for (std::size_t o = 0; o < cpu->size(); ++o) {
    INFO("output " << o);
    compare((*cpu)[o], (*gpu)[o], c.tol);
  }
}

void check_update_consistency(const std::string& name, const kernels::training_update& update,
                              const std::vector<tensor>& vars, const std::vector<tensor>& inputs, tolerance tol) {
  INFO("case: " << name);
  std::vector<tensor> cpu_vars, gpu_vars, gpu_inputs;
  for (const tensor& v : vars) {
    cpu_vars.push_back(v.deep_copy());
    auto d = gpu0().to_device(v);
    REQUIRE(d.ok());
    gpu_vars.push_back(std::move(*d));
  }
  for (const tensor& t : inputs) {
    if (!t.initialized()) {
      gpu_inputs.emplace_back();  // a variable's place
      continue;
    }
    auto d = gpu0().to_device(t);
    REQUIRE(d.ok());
    gpu_inputs.push_back(std::move(*d));
  }
  status cpu = kernels::apply_training_update(update, cpu_vars, inputs);
  if (!cpu.ok()) {
    FAIL_CHECK("the CPU update failed: " << cpu.to_string());
    return;
  }
  status gpu = gpu0().apply_update(update, gpu_vars, gpu_inputs);
  if (!gpu.ok()) {
    FAIL_CHECK("the GPU update failed: " << gpu.to_string());
    return;
  }
  for (std::size_t i = 0; i < vars.size(); ++i) {
    INFO("variable " << i);
    auto back = gpu0().to_host_blocking(gpu_vars[i]);
    REQUIRE(back.ok());
    compare(cpu_vars[i], *back, tol);
  }
}

void check_gather_consistency(const std::string& name, const tensor& params, const tensor& indices) {
  INFO("case: " << name);
  auto want = kernels::gather(params, indices);
  REQUIRE(want.ok());
  auto p = gpu0().to_device(params);
  auto i = gpu0().to_device(indices);
  REQUIRE(p.ok());
  REQUIRE(i.ok());
  auto got = gpu0().gather(*p, *i);
  if (!got.ok()) {
    FAIL_CHECK("the GPU gather failed: " << got.error().to_string());
    return;
  }
  auto back = gpu0().to_host_blocking(*got);
  REQUIRE(back.ok());
  compare(*want, *back, k_exact);
}

void check_gpu_error(const consistency_case& c, const std::string& message) {
  INFO("case: " << c.name);
  auto gpu = kernels::gpu::run_gpu_kernel(gpu0(), c.node, c.inputs);
  if (gpu.ok()) {
    FAIL_CHECK("the GPU kernel did not fail");
    return;
  }
  INFO("error: " << gpu.error().to_string());
  CHECK(gpu.error().to_string().find(message) != std::string::npos);
}

}  // namespace troupe::testing
