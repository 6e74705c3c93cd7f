// gpu_device's training updates, gathers and device copies: what a variable on a GPU needs
// (actors/variable_kernels.cc leases or reads it, this computes on the compute stream).
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/gpu_device.h"
#include "kernels/cuda/gpu_gemm.h"
#include "kernels/cuda/gpu_reduction_launch.h"
#include "kernels/shape_checks.h"
#include "kernels/cuda/gpu_training_launch.h"
#include "kernels/training_ops.h"

namespace troupe::kernels::gpu {
namespace {

template <class T>
T* device_data(tensor& t) {
  return static_cast<T*>(t.raw_data());
}
template <class T>
const T* device_data(const tensor& t) {
  return static_cast<const T*>(t.raw_data());
}

// The update in T (float or double), after check_training_update: every operand in the
// GPU's memory.
template <class T>
void launch_update(const training_update& u, std::vector<tensor>& vars, std::span<const tensor> in,
                   cudaStream_t stream) {
  const std::string& op = u.op;
  const std::int64_t n = vars[0].num_elements();
  T* var = device_data<T>(vars[0]);
  auto at = [&](std::size_t i) { return device_data<T>(in[i]); };
  if (op == "ResourceApplyGradientDescent") {
    launch_apply_gradient_descent<T>(var, at(1), at(2), n, stream);
  } else if (op == "ResourceApplyMomentum") {
    launch_apply_momentum<T>(var, device_data<T>(vars[1]), at(2), at(3), at(4), u.use_nesterov, n, stream);
  } else if (op == "ResourceApplyAdagrad") {
    launch_apply_adagrad<T>(var, device_data<T>(vars[1]), at(2), at(3), u.update_slots, n, stream);
  } else if (op == "ResourceApplyAdam") {
    launch_apply_adam<T>(var, device_data<T>(vars[1]), device_data<T>(vars[2]), at(3), at(4), at(5), at(6), at(7),
                         at(8), at(9), u.use_nesterov, n, stream);
  } else if (op == "ResourceApplyRMSProp") {
    launch_apply_rms_prop<T>(var, device_data<T>(vars[1]), device_data<T>(vars[2]), at(3), at(4), at(5), at(6), at(7),
                             n, stream);
  }
}

// var -= alpha * op(a) op(b): the product into a temporary by cuBLAS, then gradient descent
// with it (rounds as gradient descent of the product: the sum is rounded on its own first).
template <class T>
status product_update(gpu_device& gpu, const training_update& u, tensor& var, std::span<const tensor> in) {
  const tensor& a = in[2];
  const tensor& b = in[3];
  const std::int64_t m = a.dim(u.transpose_a ? 1 : 0), k = a.dim(u.transpose_a ? 0 : 1);
  const std::int64_t n = b.dim(u.transpose_b ? 0 : 1);
  if (m == 0 || n == 0 || k == 0) return status();
  tensor product = gpu.allocate(var.type(), var.shape());  // reused only by later compute-stream work
  TROUPE_RETURN_IF_ERROR(cublas_status(gemm<T>(gpu, u.transpose_a, u.transpose_b, m, n, k, device_data<T>(a), 0,
                                               device_data<T>(b), 0, device_data<T>(product), 1),
                                       "TroupeApplyGradientDescentMatMul: cublasGemmEx"));
  launch_apply_gradient_descent<T>(device_data<T>(var), device_data<T>(in[1]), device_data<T>(product), m * n,
                                   gpu.compute_stream());
  return status();
}

template <class T>
void launch_scatter(std::vector<tensor>& vars, std::span<const tensor> in, cudaStream_t stream) {
  tensor& var = vars[0];
  const tensor& indices = in[1];
  const tensor& updates = in[2];
  const std::int64_t rows = var.dim(0), inner = rows == 0 ? 0 : var.num_elements() / rows;
  launch_scatter_add<T>(device_data<T>(var), rows, inner, indices.raw_data(), indices.type() == dtype::int64,
                        indices.num_elements(), device_data<T>(updates), updates.rank() == 0, stream);
}

template <class T>
void launch_assign(const training_update& u, std::vector<tensor>& vars, std::span<const tensor> in,
                   cudaStream_t stream) {
  launch_assign_update<T>(device_data<T>(vars[0]), device_data<T>(in[1]), u.op == "AssignSubVariableOp",
                          vars[0].num_elements(), stream);
}

}  // namespace

result<tensor> gpu_device::gather(const tensor& params, const tensor& indices) {
  if (params.on_host() || indices.on_host()) {
    return invalid_argument_error("ResourceGather on ", name(), ": params and indices must be in the GPU's memory");
  }
  if (indices.type() != dtype::int32 && indices.type() != dtype::int64) {
    return invalid_argument_error("ResourceGather: indices have dtype ", dtype_name(indices.type()),
                                  "; they must be int32 or int64");
  }
  auto g = gather_geometry_of(params.shape(), indices.shape(), tensor::scalar<std::int32_t>(0));
  if (!g.ok()) return g.error();
  TROUPE_RETURN_IF_ERROR(activate());
  tensor out = allocate(params.type(), g->output);
  if (out.num_elements() == 0) return out;
  launch_gather(params.raw_data(), indices.raw_data(),
                indices.type() == dtype::int64 ? index_kind::int64 : index_kind::int32, out.raw_data(),
                static_cast<std::size_t>(g->inner) * dtype_size(params.type()), g->outer, g->rows,
                indices.num_elements(), compute_);
  TROUPE_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "launching ResourceGather"));
  return out;
}

result<tensor> gpu_device::copy(const tensor& t) {
  if (t.on_host()) return invalid_argument_error("copy: the tensor is in host memory, not the GPU's");
  TROUPE_RETURN_IF_ERROR(activate());
  tensor out = allocate(t.type(), t.shape());
  if (t.byte_size() == 0) return out;
  TROUPE_RETURN_IF_ERROR(cuda_status(
      cudaMemcpyAsync(out.raw_data(), t.raw_data(), t.byte_size(), cudaMemcpyDeviceToDevice, compute_),
      "cudaMemcpyAsync within the GPU"));
  return out;
}

status gpu_device::apply_update(const training_update& update, std::vector<tensor>& vars,
                                std::span<const tensor> inputs) {
  TROUPE_RETURN_IF_ERROR(check_training_update(update, vars, inputs));
  // Variables, slots, hyper-parameters and the gradient: all the GPU's.
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].initialized() && inputs[i].type() != dtype::resource && inputs[i].on_host()) {
      return invalid_argument_error(update.op, ": input ", i, " is in host memory, not the GPU's");
    }
  }
  for (const tensor& v : vars) {
    if (v.on_host()) return invalid_argument_error(update.op, ": a variable's value is in host memory, not the GPU's");
  }
  TROUPE_RETURN_IF_ERROR(activate());
  if (update.op == "TroupeApplyGradientDescentMatMul") {
    TROUPE_RETURN_IF_ERROR(vars[0].type() == dtype::float32 ? product_update<float>(*this, update, vars[0], inputs)
                                                            : product_update<double>(*this, update, vars[0], inputs));
    return cuda_status(cudaGetLastError(), str_cat("launching ", update.op));
  }
  const bool assign = update.op == "AssignAddVariableOp" || update.op == "AssignSubVariableOp";
  const bool scatter = update.op == "ResourceScatterAdd";
  // The assign updates and the scatter take integers too; the optimizers float and double.
  bool known = visit_dtype<type_list<float, double, std::int32_t, std::int64_t>>(vars[0].type(), [&]<class T>() {
    if (scatter) {
      launch_scatter<T>(vars, inputs, compute_);
    } else if (assign) {
      launch_assign<T>(update, vars, inputs, compute_);
    } else if constexpr (std::is_floating_point_v<T>) {
      launch_update<T>(update, vars, inputs, compute_);
    }
  });
  if (!known) return internal_error(update.op, ": dtype ", dtype_name(vars[0].type()), " passed the checks");
  return cuda_status(cudaGetLastError(), str_cat("launching ", update.op));
}

}  // namespace troupe::kernels::gpu
