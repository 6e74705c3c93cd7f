// GPU kernels: Sum, Mean, Max, Min, Prod, ArgMax, ArgMin (float32, float64, int32, int64),
// Softmax, LogSoftmax, SoftmaxCrossEntropyWithLogits, SparseSoftmaxCrossEntropyWithLogits,
// L2Loss (float32, float64), GatherV2 and OneHot (every numeric dtype), UnsortedSegmentSum
// (float32, float64, int32, int64).
//
// They agree with the CPU kernels (kernels/cpu/reduction_kernels.cc, nn_kernels.cc,
// nn2_kernels.cc, index_kernels.cc) on shapes, attributes, edge cases and error messages,
// with accumulation in the same types, except where checking a value would mean waiting for
// the GPU; there they do what TensorFlow's GPU kernels do:
//   - SparseSoftmaxCrossEntropyWithLogits: a label outside [0, classes) gives a NaN loss
//     and a NaN backprop row (the CPU fails the step);
//   - GatherV2: an index outside [0, params.dim(axis)) gives zeros (the CPU fails);
//   - UnsortedSegmentSum: a segment id >= num_segments is skipped (the CPU fails; both
//     drop negative ids).
// Float sums differ from the CPU's in summation order only (UnsortedSegmentSum's atomic adds
// also from run to run); float Prod accumulates in double, where a GPU tree of float
// products would drift (gpu_reduction_launch.cu, prod_acc_t).
//
// Reductions: the axes are validated and the input's dimensions collapsed as on the CPU
// (size-1 dimensions dropped, neighbours both reduced or both kept merged). One reduced run
// is reduced in place as [outer, reduce, inner]; several are first transposed behind the
// kept ones, so that one pass reduces [kept, reduced] rows.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cuda/gpu_kernel.h"
#include "kernels/cuda/gpu_reduction_launch.h"
#include "kernels/kernel_registry.h"
#include "kernels/shape_checks.h"

namespace troupe::kernels {

namespace {

using gpu::gpu_kernel;
using gpu::index_kind;
using gpu::reduce_kind;

using gpu_reduction_types = type_list<float, double, std::int32_t, std::int64_t>;

std::int64_t product(const std::vector<std::int64_t>& dims, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end; ++i) p *= dims[i];
  return p;
}

index_kind index_kind_of(dtype type) {
  switch (type) {
    case dtype::uint8: return index_kind::uint8;
    case dtype::int8: return index_kind::int8;
    case dtype::int32: return index_kind::int32;
    default: return index_kind::int64;
  }
}

// ---- Sum, Mean, Max, Min, Prod ----

template <class T, reduce_kind Kind>
class reduction_kernel final : public gpu_kernel {
 public:
  explicit reduction_kernel(kernel_construction& c) : gpu_kernel(c) {
    declare_host_memory_input(1);
    c.get_attr("keep_dims", &keep_dims_);
  }

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    auto geometry = reduction_geometry_of(input.shape(), ctx.input(1), keep_dims_);
    if (!geometry.ok()) return ctx.fail(geometry.error());
    const std::vector<dim_group>& groups = geometry->groups;
    const std::int64_t reduced_groups = geometry->reduced_groups;
    if (reduced_groups == 0) {  // nothing to combine: every output is one input
      ctx.set_output(0, input.reshaped(geometry->output));
      return;
    }
    if (!begin(ctx)) return;
    tensor& output = allocate_output(ctx, 0, geometry->output);
    const std::int64_t out_size = output.num_elements();
    if (out_size == 0) return;

    const T* in = input.data<T>();
    std::int64_t outer = out_size, reduce = 0, inner = 1;  // an empty input: every output is empty
    tensor permuted;
    if (input.num_elements() > 0 && reduced_groups == 1) {
      const auto g = static_cast<std::size_t>(
          std::find_if(groups.begin(), groups.end(), [](const dim_group& d) { return d.reduced; }) - groups.begin());
      outer = inner = 1;
      for (std::size_t i = 0; i < groups.size(); ++i) {
        if (i < g) outer *= groups[i].size;
        if (i > g) inner *= groups[i].size;
      }
      reduce = groups[g].size;
    } else if (input.num_elements() > 0) {
      // Reduced runs apart: the kept groups first, then the reduced ones, in a copy.
      if (groups.size() > static_cast<std::size_t>(gpu::k_max_permute_rank)) {
        ctx.fail(unimplemented_error(op(), " over ", input.shape(), " on the GPU: the axes leave ", groups.size(),
                                     " alternating runs of reduced and kept dimensions, more than the ",
                                     gpu::k_max_permute_rank, " a transpose handles"));
        return;
      }
      std::vector<std::int64_t> dims;
      std::vector<int> perm;
      outer = reduce = 1;
      for (bool pick_reduced : {false, true}) {
        for (std::size_t i = 0; i < groups.size(); ++i) {
          if (groups[i].reduced != pick_reduced) continue;
          perm.push_back(static_cast<int>(i));
          (pick_reduced ? reduce : outer) *= groups[i].size;
        }
      }
      for (const dim_group& g : groups) dims.push_back(g.size);
      permuted = allocate_temp(dtype_of<T>, tensor_shape{input.num_elements()});
      gpu::launch_permute(in, permuted.raw_data(), sizeof(T), static_cast<int>(dims.size()), dims.data(),
                          perm.data(), stream());
      in = permuted.data<T>();
    }
    const gpu::reduce_plan plan =
        gpu::plan_reduction<T>(Kind, outer, reduce, inner, gpu().properties().multiProcessorCount);
    tensor scratch;
    if (plan.scratch_bytes > 0) {
      scratch = allocate_temp(dtype::uint8, tensor_shape{static_cast<std::int64_t>(plan.scratch_bytes)});
    }
    gpu::launch_reduction<T>(plan, in, output.raw_data(), scratch.raw_data(), false, stream());
    check_launch(ctx, op());
  }

 private:
  bool keep_dims_ = false;
};

// ---- ArgMax, ArgMin ----

template <class T, reduce_kind Kind>
class arg_reduction_kernel final : public gpu_kernel {
 public:
  explicit arg_reduction_kernel(kernel_construction& c) : gpu_kernel(c) { declare_host_memory_input(1); }

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    auto g = arg_reduction_geometry_of(op(), input.shape(), ctx.input(1));
    if (!g.ok()) return ctx.fail(g.error());
    if (!begin(ctx)) return;
    tensor& output = allocate_output(ctx, 0, g->output);
    if (output.num_elements() == 0) return;
    const bool index64 = ctx.output_type(0) == dtype::int64;
    if (!index64 && g->reduce > std::numeric_limits<std::int32_t>::max()) {
      ctx.fail(invalid_argument_error("dimension ", g->axis, " of input ", input.shape(),
                                      " is too long for an int32 output_type"));
      return;
    }
    const gpu::reduce_plan plan =
        gpu::plan_reduction<T>(Kind, g->outer, g->reduce, g->inner, gpu().properties().multiProcessorCount);
    tensor scratch;
    if (plan.scratch_bytes > 0) {
      scratch = allocate_temp(dtype::uint8, tensor_shape{static_cast<std::int64_t>(plan.scratch_bytes)});
    }
    gpu::launch_reduction<T>(plan, input.data<T>(), output.raw_data(), scratch.raw_data(), index64, stream());
    check_launch(ctx, op());
  }
};

template <class T>
using sum_kernel = reduction_kernel<T, reduce_kind::sum>;
template <class T>
using mean_kernel = reduction_kernel<T, reduce_kind::mean>;
template <class T>
using max_kernel = reduction_kernel<T, reduce_kind::max>;
template <class T>
using min_kernel = reduction_kernel<T, reduce_kind::min>;
template <class T>
using prod_kernel = reduction_kernel<T, reduce_kind::prod>;
template <class T>
using arg_max_kernel = arg_reduction_kernel<T, reduce_kind::arg_max>;
template <class T>
using arg_min_kernel = arg_reduction_kernel<T, reduce_kind::arg_min>;

// ---- L2Loss ----

template <class T>
class l2_loss_kernel final : public gpu_kernel {
 public:
  explicit l2_loss_kernel(kernel_construction& c) : gpu_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& t = ctx.input(0);
    if (!begin(ctx)) return;
    tensor& output = allocate_output(ctx, 0, tensor_shape{});
    const gpu::reduce_plan plan = gpu::plan_reduction<T>(reduce_kind::l2_loss, 1, t.num_elements(), 1,
                                                         gpu().properties().multiProcessorCount);
    tensor scratch;
    if (plan.scratch_bytes > 0) {
      scratch = allocate_temp(dtype::uint8, tensor_shape{static_cast<std::int64_t>(plan.scratch_bytes)});
    }
    gpu::launch_reduction<T>(plan, t.data<T>(), output.raw_data(), scratch.raw_data(), false, stream());
    check_launch(ctx, "L2Loss");
  }
};

// ---- Softmax, LogSoftmax ----

template <class T, bool Log>
class softmax_kernel final : public gpu_kernel {
 public:
  explicit softmax_kernel(kernel_construction& c) : gpu_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& logits = ctx.input(0);
    if (logits.rank() < 1) {
      ctx.fail(invalid_argument_error(op(), " logits must have rank >= 1, but is a scalar"));
      return;
    }
    if (!begin(ctx)) return;
    tensor& output = allocate_output(ctx, 0, logits.shape());
    if (output.num_elements() == 0) return;
    const std::int64_t classes = logits.dim(logits.rank() - 1);
    gpu::launch_softmax<T>(logits.data<T>(), output.data<T>(), logits.num_elements() / classes, classes, Log,
                           stream());
    check_launch(ctx, op());
  }
};

template <class T>
using softmax = softmax_kernel<T, false>;
template <class T>
using log_softmax = softmax_kernel<T, true>;

// ---- SoftmaxCrossEntropyWithLogits, SparseSoftmaxCrossEntropyWithLogits ----

// A tensor of rank <= 2 read as a [rows, columns] matrix it broadcasts to (a dimension of
// size 1 gets stride 0), as the CPU kernel's broadcast_to_matrix copies it.
template <class T>
gpu::strided_matrix<T> broadcast_view(const tensor& t) {
  const std::int64_t r = t.rank() == 2 ? t.dim(0) : 1;
  const std::int64_t c = t.rank() >= 1 ? t.dim(t.rank() - 1) : 1;
  return {t.data<T>(), r == 1 ? 0 : c, c == 1 ? 0 : 1};
}

template <class T>
class softmax_xent_kernel final : public gpu_kernel {
 public:
  explicit softmax_xent_kernel(kernel_construction& c) : gpu_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& features = ctx.input(0);
    const tensor& labels = ctx.input(1);
    auto g = softmax_xent_geometry(features.shape(), labels.shape());
    if (!g.ok()) return ctx.fail(g.error());
    const std::int64_t batch = g->batch, classes = g->classes;
    if (!begin(ctx)) return;
    tensor& loss = allocate_output(ctx, 0, tensor_shape{batch});
    tensor& backprop = allocate_output(ctx, 1, tensor_shape{batch, classes});
    if (batch == 0) return;
    if (classes == 0) {
      check(ctx, cudaMemsetAsync(loss.raw_data(), 0, loss.byte_size(), stream()), str_cat(op(), ": zeroing the loss"));
      return;
    }
    gpu::launch_softmax_xent<T>(broadcast_view<T>(features), broadcast_view<T>(labels), loss.data<T>(),
                                backprop.data<T>(), batch, classes, stream());
    check_launch(ctx, op());
  }
};

template <class T, class Label>
class sparse_softmax_xent_kernel final : public gpu_kernel {
 public:
  explicit sparse_softmax_xent_kernel(kernel_construction& c) : gpu_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& features = ctx.input(0);
    const tensor& labels = ctx.input(1);
    auto g = sparse_softmax_xent_geometry(features.shape(), labels.shape());
    if (!g.ok()) return ctx.fail(g.error());
    const std::int64_t batch = g->batch, classes = g->classes;
    if (!begin(ctx)) return;
    tensor& loss = allocate_output(ctx, 0, tensor_shape{batch});
    tensor& backprop = allocate_output(ctx, 1, tensor_shape{batch, classes});
    if (batch == 0) return;
    // Labels stay on the GPU: out-of-range ones give NaN rows instead of an error.
    gpu::launch_sparse_softmax_xent<T>(features.data<T>(), labels.raw_data(), std::is_same_v<Label, std::int64_t>,
                                       loss.data<T>(), backprop.data<T>(), batch, classes, stream());
    check_launch(ctx, op());
  }
};

// ---- GatherV2, UnsortedSegmentSum, OneHot ----

class gather_kernel final : public gpu_kernel {
 public:
  explicit gather_kernel(kernel_construction& c) : gpu_kernel(c) {
    declare_host_memory_input(2);
    if (status s = check_gather_attrs(c.node()); !s.ok()) c.fail(std::move(s));
  }

  void compute(kernel_context& ctx) override {
    const tensor& params = ctx.input(0);
    const tensor& indices = ctx.input(1);
    auto g = gather_geometry_of(params.shape(), indices.shape(), ctx.input(2));
    if (!g.ok()) return ctx.fail(g.error());
    if (!begin(ctx)) return;
    tensor& out = allocate_output(ctx, 0, g->output);
    if (out.num_elements() == 0) return;
    gpu::launch_gather(params.raw_data(), indices.raw_data(), index_kind_of(indices.type()), out.raw_data(),
                       static_cast<std::size_t>(g->inner) * dtype_size(params.type()), g->outer, g->rows,
                       indices.num_elements(), stream());
    check_launch(ctx, "GatherV2");
  }
};

template <class T>
class unsorted_segment_sum_kernel final : public gpu_kernel {
 public:
  explicit unsorted_segment_sum_kernel(kernel_construction& c) : gpu_kernel(c) { declare_host_memory_input(2); }

  void compute(kernel_context& ctx) override {
    const tensor& data = ctx.input(0);
    const tensor& ids = ctx.input(1);
    auto g = unsorted_segment_sum_geometry(data.shape(), ids.shape(), ctx.input(2));
    if (!g.ok()) return ctx.fail(g.error());
    const std::vector<std::int64_t>& out_dims = g->output.dims();
    const std::int64_t num = g->num_segments;
    if (!begin(ctx)) return;
    tensor& out = allocate_output(ctx, 0, g->output);
    if (out.num_elements() > 0 &&
        !check(ctx, cudaMemsetAsync(out.raw_data(), 0, out.byte_size(), stream()), "UnsortedSegmentSum: zeroing")) {
      return;
    }
    if (data.num_elements() == 0 || out.num_elements() == 0) return;
    // Ids are read on the GPU: those >= num_segments are skipped (the CPU fails), as in
    // TensorFlow's GPU kernel.
    gpu::launch_unsorted_segment_sum<T>(data.data<T>(), ids.raw_data(), index_kind_of(ids.type()), out.data<T>(),
                                        ids.num_elements(), product(out_dims, 1, out_dims.size()), num, stream());
    check_launch(ctx, "UnsortedSegmentSum");
  }
};

class one_hot_kernel final : public gpu_kernel {
 public:
  explicit one_hot_kernel(kernel_construction& c) : gpu_kernel(c) {
    declare_host_memory_input(1);
    declare_host_memory_input(2);
    declare_host_memory_input(3);
    c.get_attr("axis", &axis_);
  }

  void compute(kernel_context& ctx) override {
    const tensor& indices = ctx.input(0);
    const tensor& depth_value = ctx.input(1);
    const tensor& on = ctx.input(2);
    const tensor& off = ctx.input(3);
    auto g = one_hot_geometry_of(indices.shape(), depth_value, on, off, axis_);
    if (!g.ok()) return ctx.fail(g.error());
    if (!begin(ctx)) return;
    tensor& out = allocate_output(ctx, 0, g->output);
    if (out.num_elements() == 0) return;
    const std::size_t element = dtype_size(out.type());
    std::uint64_t on_bits = 0, off_bits = 0;  // the values' bytes, low bytes first (little-endian)
    std::memcpy(&on_bits, on.raw_data(), element);
    std::memcpy(&off_bits, off.raw_data(), element);
    gpu::launch_one_hot(indices.raw_data(), index_kind_of(indices.type()), out.raw_data(), element, g->prefix,
                        g->depth, g->suffix, on_bits, off_bits, stream());
    check_launch(ctx, "OneHot");
  }

 private:
  std::int64_t axis_ = -1;
};

}  // namespace

void register_gpu_reduction_kernels(kernel_registry& registry) {
  add_reduction_kernels<sum_kernel, gpu_reduction_types>(registry, "Sum", "GPU");
  add_reduction_kernels<mean_kernel, gpu_reduction_types>(registry, "Mean", "GPU");
  add_reduction_kernels<max_kernel, gpu_reduction_types>(registry, "Max", "GPU");
  add_reduction_kernels<min_kernel, gpu_reduction_types>(registry, "Min", "GPU");
  add_reduction_kernels<prod_kernel, gpu_reduction_types>(registry, "Prod", "GPU");
  add_reduction_kernels<arg_max_kernel, gpu_reduction_types>(registry, "ArgMax", "GPU");
  add_reduction_kernels<arg_min_kernel, gpu_reduction_types>(registry, "ArgMin", "GPU");
  add_typed_kernels<softmax, float_types>(registry, "Softmax", "T", "GPU");
  add_typed_kernels<log_softmax, float_types>(registry, "LogSoftmax", "T", "GPU");
  add_typed_kernels<softmax_xent_kernel, float_types>(registry, "SoftmaxCrossEntropyWithLogits", "T", "GPU");
  for_each_type<float_types>([&]<class T>() {
    for_each_type<index_types>([&]<class Label>() {
      registry.add("SparseSoftmaxCrossEntropyWithLogits", "GPU", {{"T", dtype_of<T>}, {"Tlabels", dtype_of<Label>}},
                   make_kernel<sparse_softmax_xent_kernel<T, Label>>);
    });
  });
  add_typed_kernels<l2_loss_kernel, float_types>(registry, "L2Loss", "T", "GPU");
  // Byte moves: one kernel for every numeric dtype.
  for_each_type<all_numeric_types>([&]<class T>() {
    registry.add("GatherV2", "GPU", {{"Tparams", dtype_of<T>}}, make_kernel<gather_kernel>);
    registry.add("OneHot", "GPU", {{"T", dtype_of<T>}}, make_kernel<one_hot_kernel>);
  });
  add_typed_kernels<unsorted_segment_sum_kernel, gpu_reduction_types>(registry, "UnsortedSegmentSum", "T", "GPU");
}

}  // namespace troupe::kernels
