// CPU kernels: the helper ops of gradients (schemas in graph/ops/grad_ops.cc):
// BroadcastGradientArgs, BroadcastArgs, ReluGrad, TanhGrad, SigmoidGrad, SqrtGrad, RsqrtGrad, Sign, Slice,
// Unpack, InvertPermutation, ConcatOffset.
//
// Slice and Unpack move elements without looking at them, so they copy bytes and serve
// every dtype with one kernel. The element-wise gradient kernels take two tensors of the
// same shape (no broadcasting: gradient functions always pass matching shapes).
#include <cstring>
#include <vector>

#include "kernels/kernel_registry.h"

namespace troupe::kernels {

namespace {

template <class T>
tensor vector_of(dtype type, const std::vector<std::int64_t>& values) {
  tensor t(type, tensor_shape{static_cast<std::int64_t>(values.size())});
  for (std::size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = static_cast<T>(values[i]);
  return t;
}

// BroadcastGradientArgs: r0 holds the axes (of the broadcast shape) where s0, padded on
// the left with ones, has size 1; r1 the same for s1. Summing a gradient over them and
// reshaping gives the gradient of each operand. (Axes where both have size 1 appear in
// both, as in TensorFlow.) BroadcastArgs (ShapeOnly): the broadcast shape itself.
template <class T, bool ShapeOnly>
class broadcast_args_kernel final : public op_kernel {
 public:
  explicit broadcast_args_kernel(kernel_construction& c) : op_kernel(c) {}
  double estimated_ns(std::span<const tensor>) const override { return 0; }

  void compute(kernel_context& ctx) override {
    const tensor& s0 = ctx.input(0);
    const tensor& s1 = ctx.input(1);
    const char* op = ShapeOnly ? "BroadcastArgs" : "BroadcastGradientArgs";
    if (s0.rank() != 1 || s1.rank() != 1) {
      ctx.fail_invalid_argument(op, " inputs must be shape vectors, but are ", s0.shape(), " and ", s1.shape());
      return;
    }
    std::vector<std::int64_t> a = index_values(s0), b = index_values(s1);
    std::size_t rank = std::max(a.size(), b.size());
    a.insert(a.begin(), rank - a.size(), 1);
    b.insert(b.begin(), rank - b.size(), 1);
    std::vector<std::int64_t> r0, r1, shape;
    for (std::size_t i = 0; i < rank; ++i) {
      if (a[i] != b[i] && a[i] != 1 && b[i] != 1) {
        ctx.fail_invalid_argument(op, ": shapes ", s0.debug_string(), " and ", s1.debug_string(),
                                  " do not broadcast (dimension ", i, ")");
        return;
      }
      if (a[i] == 1) r0.push_back(static_cast<std::int64_t>(i));
      if (b[i] == 1) r1.push_back(static_cast<std::int64_t>(i));
      shape.push_back(a[i] == 1 ? b[i] : a[i]);
    }
    if constexpr (ShapeOnly) {
      ctx.set_output(0, vector_of<T>(s0.type(), shape));
    } else {
      ctx.set_output(0, vector_of<T>(s0.type(), r0));
      ctx.set_output(1, vector_of<T>(s0.type(), r1));
    }
  }
};
template <class T>
using broadcast_gradient_args_kernel = broadcast_args_kernel<T, false>;
template <class T>
using broadcast_shape_kernel = broadcast_args_kernel<T, true>;

// z[i] = f(a[i], b[i]) for two inputs of one shape.
template <class T, class F>
void binary_same_shape(kernel_context& ctx, const char* op, F f) {
  const tensor& a = ctx.input(0);
  const tensor& b = ctx.input(1);
  if (a.shape() != b.shape()) {
    ctx.fail_invalid_argument(op, " inputs must have the same shape, but have ", a.shape(), " and ",
                              b.shape());
    return;
  }
  tensor& out = ctx.allocate_output(0, a.shape());
  const T* x = a.data<T>();
  const T* y = b.data<T>();
  T* z = out.data<T>();
  std::int64_t n = a.num_elements();
  ctx.pool().parallel_for(n, 1.0, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) z[i] = f(x[i], y[i]);
  });
}

template <class T>
class relu_grad_kernel final : public op_kernel {
 public:
  explicit relu_grad_kernel(kernel_construction& c) : op_kernel(c) {}
  void compute(kernel_context& ctx) override {
    binary_same_shape<T>(ctx, "ReluGrad", [](T g, T f) { return f > T(0) ? g : T(0); });
  }
};

// (y, dy) -> z with y the forward op's output.
template <class T>
class tanh_grad_kernel final : public op_kernel {
 public:
  explicit tanh_grad_kernel(kernel_construction& c) : op_kernel(c) {}
  void compute(kernel_context& ctx) override {
    binary_same_shape<T>(ctx, "TanhGrad", [](T y, T dy) { return dy * (T(1) - y * y); });
  }
};

template <class T>
class sigmoid_grad_kernel final : public op_kernel {
 public:
  explicit sigmoid_grad_kernel(kernel_construction& c) : op_kernel(c) {}
  void compute(kernel_context& ctx) override {
    binary_same_shape<T>(ctx, "SigmoidGrad", [](T y, T dy) { return dy * y * (T(1) - y); });
  }
};

template <class T>
class sqrt_grad_kernel final : public op_kernel {
 public:
  explicit sqrt_grad_kernel(kernel_construction& c) : op_kernel(c) {}
  void compute(kernel_context& ctx) override {
    binary_same_shape<T>(ctx, "SqrtGrad", [](T y, T dy) { return dy * T(0.5) / y; });
  }
};

template <class T>
class rsqrt_grad_kernel final : public op_kernel {
 public:
  explicit rsqrt_grad_kernel(kernel_construction& c) : op_kernel(c) {}
  void compute(kernel_context& ctx) override {
    binary_same_shape<T>(ctx, "RsqrtGrad", [](T y, T dy) { return dy * T(-0.5) * y * y * y; });
  }
};

template <class T>
class sign_kernel final : public op_kernel {
 public:
  explicit sign_kernel(kernel_construction& c) : op_kernel(c) {}
  void compute(kernel_context& ctx) override {
    const tensor& x = ctx.input(0);
    tensor& y = ctx.allocate_output(0, x.shape());
    const T* in = x.data<T>();
    T* out = y.data<T>();
    for (std::int64_t i = 0; i < x.num_elements(); ++i) {
      out[i] = static_cast<T>((in[i] > T(0)) - (in[i] < T(0)));
    }
  }
};

// Copies the block [begin, begin + size) of `input` row by row (rows of the last
// dimension), whatever the dtype.
class slice_kernel final : public op_kernel {
 public:
  explicit slice_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    const tensor& begin_value = ctx.input(1);
    const tensor& size_value = ctx.input(2);
    int rank = input.rank();
    if (begin_value.rank() != 1 || size_value.rank() != 1 || begin_value.dim(0) != rank ||
        size_value.dim(0) != rank) {
      ctx.fail_invalid_argument("Slice: begin ", begin_value.shape(), " and size ", size_value.shape(),
                                " must be vectors of the input's rank ", rank, " (input ",
                                input.shape(), ")");
      return;
    }
    std::vector<std::int64_t> begin = index_values(begin_value), size = index_values(size_value);
    tensor_shape out_shape;
    for (int i = 0; i < rank; ++i) {
      auto d = static_cast<std::size_t>(i);
      if (size[d] == -1) size[d] = input.dim(i) - begin[d];
      if (begin[d] < 0 || size[d] < 0 || begin[d] + size[d] > input.dim(i)) {
        ctx.fail_invalid_argument("Slice: begin ", begin_value.debug_string(), " and size ",
                                  size_value.debug_string(), " do not lie within the input ",
                                  input.shape(), " (dimension ", i, ")");
        return;
      }
      out_shape.add_dim(size[d]);
    }
    tensor& out = ctx.allocate_output(0, out_shape);
    if (out.num_elements() == 0) return;
    if (rank == 0) {
      std::memcpy(out.raw_data(), input.raw_data(), out.byte_size());
      return;
    }
    // Rows of the last dimension: walk the output's outer indices like an odometer.
    std::size_t element = dtype_size(input.type());
    auto n = static_cast<std::size_t>(rank);
    std::vector<std::int64_t> strides(n, 1);
    for (std::size_t i = n - 1; i-- > 0;) strides[i] = strides[i + 1] * input.dim(static_cast<int>(i) + 1);
    std::size_t row_bytes = static_cast<std::size_t>(size.back()) * element;
    std::int64_t rows = out.num_elements() / size.back();
    const char* in = static_cast<const char*>(input.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    std::vector<std::int64_t> index(n, 0);
    for (std::int64_t r = 0; r < rows; ++r) {
      std::int64_t offset = 0;
      for (std::size_t i = 0; i < n; ++i) offset += (begin[i] + index[i]) * strides[i];
      std::memcpy(dst + static_cast<std::size_t>(r) * row_bytes,
                  in + static_cast<std::size_t>(offset) * element, row_bytes);
      for (std::size_t i = n - 1; i-- > 0;) {
        if (++index[i] < size[i]) break;
        index[i] = 0;
      }
    }
  }
};

class unpack_kernel final : public op_kernel {
 public:
  explicit unpack_kernel(kernel_construction& c) : op_kernel(c) {
    c.get_attr("num", &num_) && c.get_attr("axis", &axis_);
  }

  void compute(kernel_context& ctx) override {
    const tensor& value = ctx.input(0);
    int rank = value.rank();
    std::int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank || value.dim(static_cast<int>(axis)) != num_) {
      ctx.fail_invalid_argument("Unpack: cannot split a value of shape ", value.shape(), " into ",
                                num_, " parts along axis ", axis_);
      return;
    }
    tensor_shape part = value.shape();
    part.remove_dim(static_cast<int>(axis));
    std::int64_t outer = 1, inner = 1;
    for (int i = 0; i < rank; ++i) {
      if (i < axis) outer *= value.dim(i);
      if (i > axis) inner *= value.dim(i);
    }
    std::size_t chunk = static_cast<std::size_t>(inner) * dtype_size(value.type());
    const char* in = static_cast<const char*>(value.raw_data());
    for (std::int64_t k = 0; k < num_; ++k) {
      tensor& out = ctx.allocate_output(static_cast<int>(k), part);
      char* dst = static_cast<char*>(out.raw_data());
      for (std::int64_t o = 0; o < outer && chunk > 0; ++o) {
        std::memcpy(dst + static_cast<std::size_t>(o) * chunk,
                    in + static_cast<std::size_t>(o * num_ + k) * chunk, chunk);
      }
    }
  }

 private:
  std::int64_t num_ = 0;
  std::int64_t axis_ = 0;
};

template <class T>
class invert_permutation_kernel final : public op_kernel {
 public:
  explicit invert_permutation_kernel(kernel_construction& c) : op_kernel(c) {}
  double estimated_ns(std::span<const tensor>) const override { return 0; }

  void compute(kernel_context& ctx) override {
    const tensor& x = ctx.input(0);
    if (x.rank() != 1) {
      ctx.fail_invalid_argument("InvertPermutation expects a vector, not ", x.shape());
      return;
    }
    std::int64_t n = x.dim(0);
    tensor& y = ctx.allocate_output(0, x.shape());
    const T* p = x.data<T>();
    T* inv = y.data<T>();
    std::vector<bool> seen(static_cast<std::size_t>(n), false);
    for (std::int64_t i = 0; i < n; ++i) {
      auto v = static_cast<std::int64_t>(p[i]);
      if (v < 0 || v >= n || seen[static_cast<std::size_t>(v)]) {
        ctx.fail_invalid_argument("InvertPermutation: ", x.debug_string(),
                                  " is not a permutation of [0, ", n, ")");
        return;
      }
      seen[static_cast<std::size_t>(v)] = true;
      inv[v] = static_cast<T>(i);
    }
  }
};

// offset[i] is zero except along concat_dim, where it is the sum of the earlier shapes'
// sizes. concat_dim may be negative (counted from the end).
class concat_offset_kernel final : public op_kernel {
 public:
  explicit concat_offset_kernel(kernel_construction& c) : op_kernel(c) {}
  double estimated_ns(std::span<const tensor>) const override { return 0; }

  void compute(kernel_context& ctx) override {
    const tensor& dim_t = ctx.input(0);
    if (dim_t.rank() != 0) {
      ctx.fail_invalid_argument("ConcatOffset: concat_dim must be a scalar, not ", dim_t.shape());
      return;
    }
    const tensor& first = ctx.input(1);
    std::int64_t rank = first.num_elements();
    std::int64_t axis = dim_t.data<std::int32_t>()[0];
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) {
      ctx.fail_invalid_argument("ConcatOffset: concat_dim ", dim_t.data<std::int32_t>()[0],
                                " is out of range for shapes of rank ", rank);
      return;
    }
    const std::int32_t* base = first.data<std::int32_t>();
    std::int32_t offset = 0;
    for (int i = 1; i < ctx.num_inputs(); ++i) {
      const tensor& s = ctx.input(i);
      if (s.rank() != 1 || s.num_elements() != rank) {
        ctx.fail_invalid_argument("ConcatOffset: shape ", i - 1, " ", s.debug_string(),
                                  " does not have the rank of shape 0 ", first.debug_string());
        return;
      }
      const std::int32_t* dims = s.data<std::int32_t>();
      for (std::int64_t d = 0; d < rank; ++d) {
        if (d != axis && dims[d] != base[d]) {
          ctx.fail_invalid_argument("ConcatOffset: shape ", i - 1, " ", s.debug_string(),
                                    " differs from shape 0 ", first.debug_string(),
                                    " outside concat_dim ", axis);
          return;
        }
      }
      tensor& out = ctx.allocate_output(i - 1, tensor_shape{rank});
      std::int32_t* o = out.data<std::int32_t>();
      for (std::int64_t d = 0; d < rank; ++d) o[d] = d == axis ? offset : 0;
      offset += dims[axis];
    }
  }
};

using signed_types = type_list<float, double, std::int8_t, std::int16_t, std::int32_t, std::int64_t>;

}  // namespace

void register_grad_kernels(kernel_registry& registry) {
  add_typed_kernels<broadcast_gradient_args_kernel, index_types>(registry, "BroadcastGradientArgs");
  add_typed_kernels<broadcast_shape_kernel, index_types>(registry, "BroadcastArgs");
  add_typed_kernels<relu_grad_kernel, real_number_types>(registry, "ReluGrad");
  add_typed_kernels<tanh_grad_kernel, float_types>(registry, "TanhGrad");
  add_typed_kernels<sigmoid_grad_kernel, float_types>(registry, "SigmoidGrad");
  add_typed_kernels<sqrt_grad_kernel, float_types>(registry, "SqrtGrad");
  add_typed_kernels<rsqrt_grad_kernel, float_types>(registry, "RsqrtGrad");
  add_typed_kernels<sign_kernel, signed_types>(registry, "Sign");
  // Byte copies: one kernel for every dtype and index type.
  registry.add("Slice", "CPU", {}, make_kernel<slice_kernel>);
  registry.add("Unpack", "CPU", {}, make_kernel<unpack_kernel>);
  add_typed_kernels<invert_permutation_kernel, index_types>(registry, "InvertPermutation");
  registry.add("ConcatOffset", "CPU", {}, make_kernel<concat_offset_kernel>);
}

}  // namespace troupe::kernels
