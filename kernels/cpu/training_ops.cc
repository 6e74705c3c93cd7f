// Training updates (contract and formulas in kernels/training_ops.h): validation first,
// then one Eigen array expression per formula over contiguous blocks of the flat
// tensors, the blocks spread over the compute pool.

// GCC 12 reports Eigen's AVX-512 math (built on _mm512_undefined_*) as "maybe
// uninitialized"; a known false positive (see cwise_kernels.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels/training_ops.h"

#include <Eigen/Core>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/tensor_eigen.h"
#include "kernels/cpu/gemm_backend.h"

namespace troupe::kernels {

namespace {

// Estimated nanoseconds per element of each update, for parallel_for.
constexpr double k_cheap_cost = 1.0;
constexpr double k_sqrt_cost = 4.0;

// One named argument of an update, for validation and error messages.
struct arg {
  const char* name;
  const tensor& value;
};

status check_initialized(const char* fn, const arg& a) {
  if (!a.value.initialized()) return invalid_argument_error(fn, ": ", a.name, " is uninitialized");
  return status();
}

// var is a float or double tensor; each of `same` has var's dtype and shape; each of
// `scalars` has var's dtype and one element (shape [] or [1]).
status check_update(const char* fn, const arg& var, std::initializer_list<arg> same,
                    std::initializer_list<arg> scalars) {
  TROUPE_RETURN_IF_ERROR(check_initialized(fn, var));
  const dtype type = var.value.type();
  if (type != dtype::float32 && type != dtype::float64) {
    return invalid_argument_error(fn, ": ", var.name, " has dtype ", dtype_name(type),
                                  "; only float and double are supported");
  }
  for (const arg& a : same) {
    TROUPE_RETURN_IF_ERROR(check_initialized(fn, a));
    if (a.value.type() != type) {
      return invalid_argument_error(fn, ": ", a.name, " has dtype ", dtype_name(a.value.type()),
                                    " but ", var.name, " has dtype ", dtype_name(type));
    }
    if (a.value.shape() != var.value.shape()) {
      return invalid_argument_error(fn, ": ", a.name, " has shape ", a.value.shape().to_string(),
                                    " but ", var.name, " has shape ",
                                    var.value.shape().to_string(), "; they must be equal");
    }
  }
  for (const arg& a : scalars) {
    TROUPE_RETURN_IF_ERROR(check_initialized(fn, a));
    if (a.value.type() != type) {
      return invalid_argument_error(fn, ": ", a.name, " has dtype ", dtype_name(a.value.type()),
                                    " but ", var.name, " has dtype ", dtype_name(type));
    }
    const tensor_shape& s = a.value.shape();
    if (!(s.rank() == 0 || (s.rank() == 1 && s.dim(0) == 1))) {
      return invalid_argument_error(fn, ": ", a.name, " must be a scalar but has shape ",
                                    s.to_string());
    }
  }
  return status();
}

// Calls fn(begin, end) over [0, n), split over the pool when there is one.
template <class F>
void for_blocks(compute_pool* pool, std::int64_t n, double cost, const F& fn) {
  if (n == 0) return;
  if (pool == nullptr) {
    fn(std::int64_t{0}, n);
    return;
  }
  pool->parallel_for(n, cost, [&](std::int64_t begin, std::int64_t end) { fn(begin, end); });
}

// Elements [begin, end) of a flat tensor as an Eigen array.
template <class T>
Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> block(const tensor& t, std::int64_t begin,
                                                     std::int64_t end) {
  return {t.data<T>() + begin, end - begin};
}

// Calls f.template operator()<T>() with T = float or double, var's dtype.
template <class F>
void visit_float(const tensor& var, F&& f) {
  visit_dtype<float_types>(var.type(), std::forward<F>(f));
}

template <class T>
T scalar_of(const tensor& t) {
  return t.data<T>()[0];
}

}  // namespace

status apply_gradient_descent(tensor& var, const tensor& alpha, const tensor& delta,
                              compute_pool* pool) {
  TROUPE_RETURN_IF_ERROR(check_update("apply_gradient_descent", {"var", var}, {{"delta", delta}},
                                      {{"alpha", alpha}}));
  visit_float(var, [&]<class T>() {
    const T a = scalar_of<T>(alpha);
    for_blocks(pool, var.num_elements(), k_cheap_cost, [&](std::int64_t b, std::int64_t e) {
      block<T>(var, b, e) -= block<T>(delta, b, e) * a;
    });
  });
  return status();
}

status check_gradient_descent_matmul(const tensor& var, const tensor& alpha, const tensor& a, const tensor& b,
                                     bool transpose_a, bool transpose_b) {
  constexpr const char* fn = "apply_gradient_descent_matmul";
  TROUPE_RETURN_IF_ERROR(check_update(fn, {"var", var}, {}, {{"alpha", alpha}}));
  for (const arg& x : {arg{"a", a}, arg{"b", b}}) {
    TROUPE_RETURN_IF_ERROR(check_initialized(fn, x));
    if (x.value.type() != var.type() || x.value.shape().rank() != 2) {
      return invalid_argument_error(fn, ": ", x.name, " is a ", dtype_name(x.value.type()), " tensor of shape ",
                                    x.value.shape().to_string(), "; it must be a ", dtype_name(var.type()),
                                    " matrix");
    }
  }
  const std::int64_t m = a.dim(transpose_a ? 1 : 0), k = a.dim(transpose_a ? 0 : 1);
  const std::int64_t n = b.dim(transpose_b ? 0 : 1);
  if (b.dim(transpose_b ? 1 : 0) != k || var.shape() != tensor_shape{m, n}) {
    return invalid_argument_error(fn, ": a ", a.shape().to_string(), " times b ", b.shape().to_string(),
                                  " (transpose_a ", transpose_a, ", transpose_b ", transpose_b,
                                  ") must give var's shape ", var.shape().to_string());
  }
  constexpr std::int64_t k_int_max = std::numeric_limits<int>::max();
  if (m > k_int_max || n > k_int_max || k > k_int_max) {
    return unimplemented_error(fn, ": a ", a.shape().to_string(), " and b ", b.shape().to_string(),
                               " exceed the BLAS index range");
  }
  return status();
}

status apply_gradient_descent_matmul(tensor& var, const tensor& alpha, const tensor& a, const tensor& b,
                                     bool transpose_a, bool transpose_b, compute_pool* pool) {
  TROUPE_RETURN_IF_ERROR(check_gradient_descent_matmul(var, alpha, a, b, transpose_a, transpose_b));
  const std::int64_t m = a.dim(transpose_a ? 1 : 0), k = a.dim(transpose_a ? 0 : 1);
  const std::int64_t n = b.dim(transpose_b ? 0 : 1);
  if (m == 0 || n == 0 || k == 0) return status();
  compute_pool inline_pool(0);
  visit_float(var, [&]<class T>() {
    parallel_gemm<T>(pool != nullptr ? *pool : inline_pool, transpose_a, transpose_b, m, n, k, -scalar_of<T>(alpha),
                     a.data<T>(), a.dim(1), b.data<T>(), b.dim(1), T(1), var.data<T>(), n);
  });
  return status();
}

status apply_momentum(tensor& var, tensor& accum, const tensor& lr, const tensor& grad,
                      const tensor& momentum, bool use_nesterov, compute_pool* pool) {
  TROUPE_RETURN_IF_ERROR(check_update("apply_momentum", {"var", var},
                                      {{"accum", accum}, {"grad", grad}},
                                      {{"lr", lr}, {"momentum", momentum}}));
  visit_float(var, [&]<class T>() {
    const T rate = scalar_of<T>(lr);
    const T mu = scalar_of<T>(momentum);
    for_blocks(pool, var.num_elements(), k_cheap_cost, [&](std::int64_t b, std::int64_t e) {
      auto v = block<T>(var, b, e);
      auto a = block<T>(accum, b, e);
      auto g = block<T>(grad, b, e);
      a = a * mu + g;
      if (use_nesterov) {
        v -= g * rate + a * mu * rate;
      } else {
        v -= a * rate;
      }
    });
  });
  return status();
}

status apply_adagrad(tensor& var, tensor& accum, const tensor& lr, const tensor& grad,
                     bool update_slots, compute_pool* pool) {
  TROUPE_RETURN_IF_ERROR(check_update("apply_adagrad", {"var", var},
                                      {{"accum", accum}, {"grad", grad}}, {{"lr", lr}}));
  visit_float(var, [&]<class T>() {
    const T rate = scalar_of<T>(lr);
    for_blocks(pool, var.num_elements(), k_sqrt_cost, [&](std::int64_t b, std::int64_t e) {
      auto v = block<T>(var, b, e);
      auto a = block<T>(accum, b, e);
      auto g = block<T>(grad, b, e);
      if (update_slots) a += g.square();
      v -= g * rate * a.rsqrt();
    });
  });
  return status();
}

status apply_adam(tensor& var, tensor& m, tensor& v, const tensor& beta1_power,
                  const tensor& beta2_power, const tensor& lr, const tensor& beta1,
                  const tensor& beta2, const tensor& epsilon, const tensor& grad,
                  bool use_nesterov, compute_pool* pool) {
  TROUPE_RETURN_IF_ERROR(check_update("apply_adam", {"var", var}, {{"m", m}, {"v", v}, {"grad", grad}},
                                      {{"beta1_power", beta1_power},
                                       {"beta2_power", beta2_power},
                                       {"lr", lr},
                                       {"beta1", beta1},
                                       {"beta2", beta2},
                                       {"epsilon", epsilon}}));
  visit_float(var, [&]<class T>() {
    const T b1 = scalar_of<T>(beta1);
    const T b2 = scalar_of<T>(beta2);
    const T eps = scalar_of<T>(epsilon);
    const T alpha = scalar_of<T>(lr) * std::sqrt(T(1) - scalar_of<T>(beta2_power)) /
                    (T(1) - scalar_of<T>(beta1_power));
    for_blocks(pool, var.num_elements(), k_sqrt_cost, [&](std::int64_t b, std::int64_t e) {
      auto w = block<T>(var, b, e);
      auto mb = block<T>(m, b, e);
      auto vb = block<T>(v, b, e);
      auto g = block<T>(grad, b, e);
      mb += (g - mb) * (T(1) - b1);
      vb += (g.square() - vb) * (T(1) - b2);
      if (use_nesterov) {
        w -= ((g * (T(1) - b1) + b1 * mb) * alpha) / (vb.sqrt() + eps);
      } else {
        w -= (mb * alpha) / (vb.sqrt() + eps);
      }
    });
  });
  return status();
}

status apply_rms_prop(tensor& var, tensor& ms, tensor& mom, const tensor& lr, const tensor& rho,
                      const tensor& momentum, const tensor& epsilon, const tensor& grad,
                      compute_pool* pool) {
  TROUPE_RETURN_IF_ERROR(check_update("apply_rms_prop", {"var", var},
                                      {{"ms", ms}, {"mom", mom}, {"grad", grad}},
                                      {{"lr", lr}, {"rho", rho}, {"momentum", momentum},
                                       {"epsilon", epsilon}}));
  visit_float(var, [&]<class T>() {
    const T rate = scalar_of<T>(lr);
    const T decay = scalar_of<T>(rho);
    const T mu = scalar_of<T>(momentum);
    const T eps = scalar_of<T>(epsilon);
    for_blocks(pool, var.num_elements(), k_sqrt_cost, [&](std::int64_t b, std::int64_t e) {
      auto w = block<T>(var, b, e);
      auto msb = block<T>(ms, b, e);
      auto momb = block<T>(mom, b, e);
      auto g = block<T>(grad, b, e);
      msb += (g.square() - msb) * (T(1) - decay);
      momb = momb * mu + (g * rate) / (msb + eps).sqrt();
      w -= momb;
    });
  });
  return status();
}

namespace {

using accumulate_types = type_list<float, double, std::int32_t, std::int64_t>;

// a + b, wrapping around for integers instead of overflowing.
template <class T>
T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using u = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<u>(a) + static_cast<u>(b));
  } else {
    return a + b;
  }
}
template <class T>
T wrap_neg(T a) {
  if constexpr (std::is_integral_v<T>) {
    using u = std::make_unsigned_t<T>;
    return static_cast<T>(u(0) - static_cast<u>(a));
  } else {
    return -a;
  }
}

status check_assign_update(const char* fn, const tensor& var, const tensor& value) {
  TROUPE_RETURN_IF_ERROR(check_initialized(fn, {"var", var}));
  TROUPE_RETURN_IF_ERROR(check_initialized(fn, {"value", value}));
  if (value.type() != var.type()) {
    return invalid_argument_error(fn, ": value has dtype ", dtype_name(value.type()),
                                  " but var has dtype ", dtype_name(var.type()));
  }
  if (value.shape() != var.shape()) {
    return invalid_argument_error(fn, ": value has shape ", value.shape().to_string(),
                                  " but var has shape ", var.shape().to_string(),
                                  "; they must be equal");
  }
  const dtype t = var.type();
  if (t != dtype::float32 && t != dtype::float64 && t != dtype::int32 && t != dtype::int64) {
    return invalid_argument_error(fn, ": var has dtype ", dtype_name(t), "; supported: float, double, int32, int64");
  }
  return status();
}

status assign_update(const char* fn, tensor& var, const tensor& value, bool subtract,
                     compute_pool* pool) {
  TROUPE_RETURN_IF_ERROR(check_assign_update(fn, var, value));
  visit_dtype<accumulate_types>(var.type(), [&]<class T>() {
    T* out = var.data<T>();
    const T* in = value.data<T>();
    for_blocks(pool, var.num_elements(), k_cheap_cost, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) out[i] = wrap_add(out[i], subtract ? wrap_neg(in[i]) : in[i]);
    });
  });
  return status();
}

// Checks every index is in [0, limit); `what` names the tensor in the error.
status check_indices(const char* fn, const std::vector<std::int64_t>& indices, std::int64_t limit,
                     const char* what) {
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= limit) {
      return invalid_argument_error(fn, ": indices[", i, "] = ", indices[i], " is not in [0, ",
                                    limit, ") (", what, ")");
    }
  }
  return status();
}

status check_index_dtype(const char* fn, const tensor& indices) {
  TROUPE_RETURN_IF_ERROR(check_initialized(fn, {"indices", indices}));
  if (indices.type() != dtype::int32 && indices.type() != dtype::int64) {
    return invalid_argument_error(fn, ": indices have dtype ", dtype_name(indices.type()),
                                  "; they must be int32 or int64");
  }
  return status();
}

}  // namespace

status assign_add(tensor& var, const tensor& value, compute_pool* pool) {
  return assign_update("assign_add", var, value, false, pool);
}

status assign_sub(tensor& var, const tensor& value, compute_pool* pool) {
  return assign_update("assign_sub", var, value, true, pool);
}

status check_scatter_add(const tensor& var, const tensor& indices, const tensor& updates) {
  const char* fn = "scatter_add";
  TROUPE_RETURN_IF_ERROR(check_initialized(fn, {"var", var}));
  TROUPE_RETURN_IF_ERROR(check_initialized(fn, {"updates", updates}));
  TROUPE_RETURN_IF_ERROR(check_index_dtype(fn, indices));
  if (var.rank() < 1) {
    return invalid_argument_error(fn, ": var is a scalar; it must have rank >= 1");
  }
  if (updates.type() != var.type()) {
    return invalid_argument_error(fn, ": updates have dtype ", dtype_name(updates.type()),
                                  " but var has dtype ", dtype_name(var.type()));
  }
  const bool broadcast = updates.rank() == 0;
  if (!broadcast) {
    tensor_shape want = indices.shape();
    for (int i = 1; i < var.rank(); ++i) want.add_dim(var.dim(i));
    if (updates.shape() != want) {
      return invalid_argument_error(fn, ": updates have shape ", updates.shape().to_string(),
                                    " but indices ", indices.shape().to_string(),
                                    " into var of shape ", var.shape().to_string(), " need ",
                                    want.to_string(), " (or a scalar)");
    }
  }
  const dtype t = var.type();
  if (t != dtype::float32 && t != dtype::float64 && t != dtype::int32 && t != dtype::int64) {
    return invalid_argument_error(fn, ": var has dtype ", dtype_name(t), "; supported: float, double, int32, int64");
  }
  return status();
}

status scatter_add(tensor& var, const tensor& indices, const tensor& updates, compute_pool* pool) {
  const char* fn = "scatter_add";
  TROUPE_RETURN_IF_ERROR(check_scatter_add(var, indices, updates));
  const bool broadcast = updates.rank() == 0;
  const std::vector<std::int64_t> rows = index_values(indices);
  TROUPE_RETURN_IF_ERROR(check_indices(fn, rows, var.dim(0), "the first dimension of var"));
  const std::int64_t inner = var.dim(0) == 0 ? 0 : var.num_elements() / var.dim(0);
  visit_dtype<accumulate_types>(var.type(), [&]<class T>() {
    T* out = var.data<T>();
    const T* in = updates.data<T>();
    // Blocks of columns: every block visits every index, so repeated indices never race.
    for_blocks(pool, inner, static_cast<double>(rows.size()), [&](std::int64_t b, std::int64_t e) {
      for (std::size_t i = 0; i < rows.size(); ++i) {
        T* row = out + rows[i] * inner;
        for (std::int64_t k = b; k < e; ++k) {
          row[k] = wrap_add(row[k], broadcast ? in[0] : in[static_cast<std::int64_t>(i) * inner + k]);
        }
      }
    });
  });
  return status();
}

result<tensor> gather(const tensor& params, const tensor& indices, int batch_dims) {
  const char* fn = "gather";
  TROUPE_RETURN_IF_ERROR(check_initialized(fn, {"params", params}));
  TROUPE_RETURN_IF_ERROR(check_index_dtype(fn, indices));
  if (dtype_size(params.type()) == 0) {
    return invalid_argument_error(fn, ": params have dtype ", dtype_name(params.type()),
                                  ", which has no fixed element size");
  }
  if (batch_dims < 0) return invalid_argument_error(fn, ": batch_dims is ", batch_dims, " but must be >= 0");
  if (params.rank() < batch_dims + 1) {
    return invalid_argument_error(fn, ": params of shape ", params.shape().to_string(),
                                  " must have rank >= batch_dims + 1 = ", batch_dims + 1);
  }
  if (indices.rank() < batch_dims) {
    return invalid_argument_error(fn, ": indices of shape ", indices.shape().to_string(),
                                  " must have rank >= batch_dims = ", batch_dims);
  }
  tensor_shape out_shape;
  std::int64_t batches = 1;
  for (int i = 0; i < batch_dims; ++i) {
    if (params.dim(i) != indices.dim(i)) {
      return invalid_argument_error(fn, ": batch dimension ", i, " differs: params ",
                                    params.shape().to_string(), ", indices ",
                                    indices.shape().to_string());
    }
    out_shape.add_dim(params.dim(i));
    batches *= params.dim(i);
  }
  for (int i = batch_dims; i < indices.rank(); ++i) out_shape.add_dim(indices.dim(i));
  std::int64_t inner = 1;
  for (int i = batch_dims + 1; i < params.rank(); ++i) {
    out_shape.add_dim(params.dim(i));
    inner *= params.dim(i);
  }
  const std::int64_t rows = params.dim(batch_dims);
  const std::vector<std::int64_t> index = index_values(indices);
  TROUPE_RETURN_IF_ERROR(check_indices(fn, index, rows, "dimension batch_dims of params"));
  tensor out(params.type(), out_shape);
  const std::int64_t per_batch = batches == 0 ? 0 : static_cast<std::int64_t>(index.size()) / batches;
  const std::size_t row_bytes = static_cast<std::size_t>(inner) * dtype_size(params.type());
  const auto* src = static_cast<const unsigned char*>(params.raw_data());
  auto* dst = static_cast<unsigned char*>(out.raw_data());
  if (row_bytes == 0) return out;
  for (std::int64_t b = 0; b < batches; ++b) {
    for (std::int64_t j = 0; j < per_batch; ++j) {
      std::int64_t row = index[static_cast<std::size_t>(b * per_batch + j)];
      std::memcpy(dst + static_cast<std::size_t>(b * per_batch + j) * row_bytes,
                  src + static_cast<std::size_t>(b * rows + row) * row_bytes, row_bytes);
    }
  }
  return out;
}


namespace {

// The op's variables and inputs by name, checked to be there.
struct update_view {
  const training_update& u;
  std::vector<tensor>& vars;
  std::span<const tensor> in;
  status arity(std::size_t num_vars, std::size_t num_inputs) const {
    if (vars.size() != num_vars || in.size() != num_inputs) {
      return invalid_argument_error(u.op, " takes ", num_vars, " variables and ", num_inputs, " inputs, not ",
                                    vars.size(), " and ", in.size());
    }
    return status();
  }
};

}  // namespace

status check_training_update(const training_update& u, std::vector<tensor>& vars, std::span<const tensor> in) {
  const update_view x{u, vars, in};
  const std::string& op = u.op;
  if (op == "ResourceApplyGradientDescent") {
    TROUPE_RETURN_IF_ERROR(x.arity(1, 3));
    return check_update("apply_gradient_descent", {"var", vars[0]}, {{"delta", in[2]}}, {{"alpha", in[1]}});
  }
  if (op == "TroupeApplyGradientDescentMatMul") {
    TROUPE_RETURN_IF_ERROR(x.arity(1, 4));
    return check_gradient_descent_matmul(vars[0], in[1], in[2], in[3], u.transpose_a, u.transpose_b);
  }
  if (op == "ResourceApplyMomentum") {
    TROUPE_RETURN_IF_ERROR(x.arity(2, 5));
    return check_update("apply_momentum", {"var", vars[0]}, {{"accum", vars[1]}, {"grad", in[3]}},
                        {{"lr", in[2]}, {"momentum", in[4]}});
  }
  if (op == "ResourceApplyAdagrad") {
    TROUPE_RETURN_IF_ERROR(x.arity(2, 4));
    return check_update("apply_adagrad", {"var", vars[0]}, {{"accum", vars[1]}, {"grad", in[3]}}, {{"lr", in[2]}});
  }
  if (op == "ResourceApplyAdam") {
    TROUPE_RETURN_IF_ERROR(x.arity(3, 10));
    return check_update("apply_adam", {"var", vars[0]}, {{"m", vars[1]}, {"v", vars[2]}, {"grad", in[9]}},
                        {{"beta1_power", in[3]},
                         {"beta2_power", in[4]},
                         {"lr", in[5]},
                         {"beta1", in[6]},
                         {"beta2", in[7]},
                         {"epsilon", in[8]}});
  }
  if (op == "ResourceApplyRMSProp") {
    TROUPE_RETURN_IF_ERROR(x.arity(3, 8));
    return check_update("apply_rms_prop", {"var", vars[0]}, {{"ms", vars[1]}, {"mom", vars[2]}, {"grad", in[7]}},
                        {{"lr", in[3]}, {"rho", in[4]}, {"momentum", in[5]}, {"epsilon", in[6]}});
  }
  if (op == "ResourceScatterAdd") {
    TROUPE_RETURN_IF_ERROR(x.arity(1, 3));
    return check_scatter_add(vars[0], in[1], in[2]);
  }
  if (op == "AssignAddVariableOp" || op == "AssignSubVariableOp") {
    TROUPE_RETURN_IF_ERROR(x.arity(1, 2));
    return check_assign_update(op == "AssignAddVariableOp" ? "assign_add" : "assign_sub", vars[0], in[1]);
  }
  return unimplemented_error("no training update named ", op);
}

status apply_training_update(const training_update& u, std::vector<tensor>& vars, std::span<const tensor> in,
                             compute_pool* pool) {
  TROUPE_RETURN_IF_ERROR(check_training_update(u, vars, in));
  const std::string& op = u.op;
  if (op == "ResourceApplyGradientDescent") return apply_gradient_descent(vars[0], in[1], in[2], pool);
  if (op == "TroupeApplyGradientDescentMatMul") {
    return apply_gradient_descent_matmul(vars[0], in[1], in[2], in[3], u.transpose_a, u.transpose_b, pool);
  }
  if (op == "ResourceApplyMomentum") return apply_momentum(vars[0], vars[1], in[2], in[3], in[4], u.use_nesterov, pool);
  if (op == "ResourceApplyAdagrad") return apply_adagrad(vars[0], vars[1], in[2], in[3], u.update_slots, pool);
  if (op == "ResourceApplyAdam") {
    return apply_adam(vars[0], vars[1], vars[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9], u.use_nesterov, pool);
  }
  if (op == "ResourceApplyRMSProp") return apply_rms_prop(vars[0], vars[1], vars[2], in[3], in[4], in[5], in[6], in[7], pool);
  if (op == "ResourceScatterAdd") return scatter_add(vars[0], in[1], in[2], pool);
  return op == "AssignAddVariableOp" ? assign_add(vars[0], in[1], pool) : assign_sub(vars[0], in[1], pool);
}

}  // namespace troupe::kernels
