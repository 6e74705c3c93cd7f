// CPU kernels: array ops (Const, Placeholder, Identity, Reshape, Shape, Fill, Transpose,
// ConcatV2, Pack, ExpandDims, Squeeze, ...).
//
// Ops that only change how bytes are seen (Identity, Reshape, ExpandDims, Squeeze, an
// identity Transpose) share their input's buffer and never copy. Ops that move bytes
// (Transpose, ConcatV2, Pack) depend only on the element size, so they are written once
// per size (1, 2, 4, 8 bytes) rather than once per dtype.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "graph/ops/index_ops.h"
#include "kernels/kernel_registry.h"

namespace troupe::kernels {

namespace {

// ---------------------------------------------------------------------------------------
// Helpers

// Calls f.template operator()<E>() with an unsigned integer type E of `size` bytes: the
// element type for ops that move elements without looking at them.
template <class F>
void visit_element_size(std::size_t size, F&& f) {
  switch (size) {
    case 1:
      f.template operator()<std::uint8_t>();
      break;
    case 2:
      f.template operator()<std::uint16_t>();
      break;
    case 4:
      f.template operator()<std::uint32_t>();
      break;
    case 8:
      f.template operator()<std::uint64_t>();
      break;
    default:
      assert(false && "numeric dtypes have 1, 2, 4 or 8 bytes");
  }
}

std::int64_t product(const std::vector<std::int64_t>& dims, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end; ++i) p *= dims[i];
  return p;
}

// Registers one factory under `op` for every T of DataTypes, constrained on `type_attr`.
template <class DataTypes>
void add_for_types(kernel_registry& registry, const std::string& op, const std::string& type_attr,
                   const kernel_factory& factory, const std::string& device = "CPU") {
  for_each_type<DataTypes>([&]<class T>() {
    registry.add(op, device, {{type_attr, dtype_of<T>}}, factory);
  });
}

// Registers Factory<Index> under `op` for every (T, Index) of DataTypes x index_types,
// constrained on `type_attr` and `index_attr`.
template <class DataTypes, class Factory>
void add_for_types_and_index(kernel_registry& registry, const std::string& op,
                             const std::string& type_attr, const std::string& index_attr,
                             Factory&& factory_for_index, const std::string& device = "CPU") {
  for_each_type<DataTypes>([&]<class T>() {
    for_each_type<index_types>([&]<class Index>() {
      registry.add(op, device, {{type_attr, dtype_of<T>}, {index_attr, dtype_of<Index>}},
                   factory_for_index.template operator()<T, Index>());
    });
  });
}

// ---------------------------------------------------------------------------------------
// Const, Placeholder, Identity and friends: no computation at all.

class const_kernel final : public op_kernel {
 public:
  explicit const_kernel(kernel_construction& c) : op_kernel(c) {
    dtype type = dtype::invalid;
    if (!c.get_attr("value", &value_) || !c.get_attr("dtype", &type)) return;
    if (value_.type() != type) {
      c.fail(invalid_argument_error("attribute 'value' holds a ", dtype_name(value_.type()),
                                    " tensor but 'dtype' is ", dtype_name(type)));
    }
  }
  void compute(kernel_context& ctx) override { ctx.set_output(0, value_); }
  double estimated_ns(std::span<const tensor>) const override { return 0; }

 private:
  tensor value_;  // built once; every run hands out the same buffer
};

// The executor replaces fed placeholders; running this kernel means nobody fed one.
class placeholder_kernel final : public op_kernel {
 public:
  explicit placeholder_kernel(kernel_construction& c) : op_kernel(c) {
    dtype type = dtype::invalid;
    partial_shape shape;
    if (!c.get_attr("dtype", &type) || !c.get_attr("shape", &shape)) return;
    message_ = str_cat("placeholder '", name(), "' must be fed: give it a ", dtype_name(type),
                       " value of shape ", shape.to_string(), " in the step's feeds");
  }
  void compute(kernel_context& ctx) override { ctx.fail(invalid_argument_error(message_)); }
  double estimated_ns(std::span<const tensor>) const override { return 0; }

 private:
  std::string message_;
};

class placeholder_with_default_kernel final : public op_kernel {
 public:
  explicit placeholder_with_default_kernel(kernel_construction& c) : op_kernel(c) {
    c.get_attr("shape", &shape_);
  }
  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    if (!shape_.is_compatible_with(input.shape())) {
      ctx.fail_invalid_argument("default value of shape ", input.shape().to_string(),
                                " is not compatible with the 'shape' attribute ",
                                shape_.to_string());
      return;
    }
    ctx.set_output(0, input);
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }

 private:
  partial_shape shape_;
};

// Identity, StopGradient and IdentityN: output i is input i (same buffer).
class identity_kernel final : public op_kernel {
 public:
  explicit identity_kernel(kernel_construction& c) : op_kernel(c) {}
  void compute(kernel_context& ctx) override {
    for (int i = 0; i < ctx.num_inputs(); ++i) ctx.set_output(i, ctx.input(i));
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }
  memory input_memory(int) const override { return memory::any; }  // passes tensors through
};

class no_op_kernel final : public op_kernel {
 public:
  explicit no_op_kernel(kernel_construction& c) : op_kernel(c) {}
  void compute(kernel_context&) override {}
  double estimated_ns(std::span<const tensor>) const override { return 0; }
};

// ---------------------------------------------------------------------------------------
// Reshape, ExpandDims, Squeeze: a new shape over the same buffer.

class reshape_kernel final : public op_kernel {
 public:
  explicit reshape_kernel(kernel_construction& c) : op_kernel(c) {}
  // The data is not read (any device's memory); the shape is.
  memory input_memory(int i) const override { return i == 0 ? memory::any : memory::host; }

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    const tensor& sizes = ctx.input(1);
    if (sizes.rank() > 1) {
      ctx.fail_invalid_argument("shape must be a vector, but has shape ",
                                sizes.shape().to_string());
      return;
    }
    std::vector<std::int64_t> dims = index_values(sizes);
    // As TensorFlow: one -1 is inferred; when the requested shape has a 0 dimension, the
    // input's 0 dimensions are left out of the count so the others can still be inferred.
    int unknown_index = -1;
    std::int64_t product = 1;
    bool sizes_have_zero = false;
    for (std::size_t i = 0; i < dims.size(); ++i) {
      if (dims[i] == -1) {
        if (unknown_index >= 0) {
          ctx.fail_invalid_argument("only one dimension of the requested shape ",
                                    sizes.debug_string(), " may be -1");
          return;
        }
        unknown_index = static_cast<int>(i);
      } else if (dims[i] < 0) {
        ctx.fail_invalid_argument("requested shape ", sizes.debug_string(),
                                  " has a negative dimension ", dims[i], " at index ", i);
        return;
      } else if (dims[i] == 0) {
        sizes_have_zero = true;
      } else {
        product *= dims[i];
      }
    }
    if (unknown_index >= 0) {
      std::int64_t input_count = 1;
      bool input_has_zero = false;
      for (std::int64_t d : input.shape().dims()) {
        if (d > 0 || !sizes_have_zero) {
          input_count *= d;
        } else {
          input_has_zero = true;
        }
      }
      std::int64_t missing = input_count / product;
      if (!input_has_zero && missing * product != input_count) {
        ctx.fail_invalid_argument("cannot reshape a tensor of shape ", input.shape().to_string(),
                                  " (", input.num_elements(), " values) into shape ",
                                  sizes.debug_string(), ": the known dimensions multiply to ",
                                  product, ", which does not divide ", input.num_elements());
        return;
      }
      dims[static_cast<std::size_t>(unknown_index)] = missing;
    }
    tensor_shape shape(std::move(dims));
    if (shape.num_elements() != input.num_elements()) {
      ctx.fail_invalid_argument("cannot reshape a tensor of shape ", input.shape().to_string(),
                                " (", input.num_elements(), " values) into shape ",
                                shape.to_string(), " (", shape.num_elements(), " values)");
      return;
    }
    ctx.set_output(0, input.reshaped(std::move(shape)));
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }
};

class expand_dims_kernel final : public op_kernel {
 public:
  explicit expand_dims_kernel(kernel_construction& c) : op_kernel(c) {}
  memory input_memory(int i) const override { return i == 0 ? memory::any : memory::host; }

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    const tensor& dim_tensor = ctx.input(1);
    if (dim_tensor.num_elements() != 1) {
      ctx.fail_invalid_argument("'dim' must hold a single value, but has shape ",
                                dim_tensor.shape().to_string());
      return;
    }
    std::int64_t dim = index_values(dim_tensor)[0];
    int rank = input.rank();
    std::int64_t d = dim < 0 ? dim + rank + 1 : dim;
    if (d < 0 || d > rank) {
      ctx.fail_invalid_argument("dim ", dim, " is out of range for an input of shape ",
                                input.shape().to_string(), " (valid: [", -rank - 1, ", ", rank,
                                "])");
      return;
    }
    tensor_shape shape = input.shape();
    shape.insert_dim(static_cast<int>(d), 1);
    ctx.set_output(0, input.reshaped(std::move(shape)));
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }
};

class squeeze_kernel final : public op_kernel {
 public:
  explicit squeeze_kernel(kernel_construction& c) : op_kernel(c) {
    c.get_attr("squeeze_dims", &squeeze_dims_);
  }
  memory input_memory(int) const override { return memory::any; }

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    int rank = input.rank();
    std::vector<bool> squeeze(static_cast<std::size_t>(rank), squeeze_dims_.empty());
    for (std::int64_t dim : squeeze_dims_) {
      std::int64_t d = dim < 0 ? dim + rank : dim;
      if (d < 0 || d >= rank) {
        ctx.fail_invalid_argument("squeeze dim ", dim, " is out of range for an input of shape ",
                                  input.shape().to_string(), " (valid: [", -rank, ", ", rank, "))");
        return;
      }
      if (input.dim(static_cast<int>(d)) != 1) {
        ctx.fail_invalid_argument("cannot squeeze dim ", dim, " of shape ",
                                  input.shape().to_string(), ": its size is ",
                                  input.dim(static_cast<int>(d)), ", not 1");
        return;
      }
      squeeze[static_cast<std::size_t>(d)] = true;
    }
    tensor_shape shape;
    for (int i = 0; i < rank; ++i) {
      if (!(squeeze[static_cast<std::size_t>(i)] && input.dim(i) == 1)) shape.add_dim(input.dim(i));
    }
    ctx.set_output(0, input.reshaped(std::move(shape)));
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }

 private:
  std::vector<std::int64_t> squeeze_dims_;
};

// ---------------------------------------------------------------------------------------
// Shape, Size, Rank.

// Stores `value` as Out, failing when it does not fit (int32 outputs of huge tensors).
template <class Out>
bool store_index(kernel_context& ctx, std::int64_t value, Out* out, const tensor& input) {
  if (value > static_cast<std::int64_t>(std::numeric_limits<Out>::max())) {
    ctx.fail_invalid_argument("the input's shape ", input.shape().to_string(),
                              " has a value that does not fit in ", dtype_name(dtype_of<Out>),
                              "; use out_type int64");
    return false;
  }
  *out = static_cast<Out>(value);
  return true;
}

// Shape and ShapeN: output k is input k's shape as a vector.
template <class Out>
class shape_kernel final : public op_kernel {
 public:
  explicit shape_kernel(kernel_construction& c) : op_kernel(c) {}
  memory input_memory(int) const override { return memory::any; }  // reads only shapes
  void compute(kernel_context& ctx) override {
    for (int k = 0; k < ctx.num_inputs(); ++k) {
      const tensor& input = ctx.input(k);
      tensor& out = ctx.allocate_output(k, tensor_shape{input.rank()});
      for (int i = 0; i < input.rank(); ++i) {
        if (!store_index(ctx, input.dim(i), &out.data<Out>()[i], input)) return;
      }
    }
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }
};

template <class Out>
class size_kernel final : public op_kernel {
 public:
  explicit size_kernel(kernel_construction& c) : op_kernel(c) {}
  memory input_memory(int) const override { return memory::any; }  // reads only the shape
  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    tensor& out = ctx.allocate_output(0, tensor_shape{});
    store_index(ctx, input.num_elements(), out.data<Out>(), input);
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }
};

class rank_kernel final : public op_kernel {
 public:
  explicit rank_kernel(kernel_construction& c) : op_kernel(c) {}
  memory input_memory(int) const override { return memory::any; }  // reads only the shape
  void compute(kernel_context& ctx) override {
    ctx.set_output(0, tensor::scalar<std::int32_t>(ctx.input(0).rank()));
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }
};

// ---------------------------------------------------------------------------------------
// CheckNumerics: passes the tensor on, or fails naming the first NaN or infinity.

template <class T>
class check_numerics_kernel final : public op_kernel {
 public:
  explicit check_numerics_kernel(kernel_construction& c) : op_kernel(c) { c.get_attr("message", &message_); }

  void compute(kernel_context& ctx) override {
    const tensor& x = ctx.input(0);
    bool nan = false, inf = false;
    for (T v : x.flat<T>()) {
      nan = nan || std::isnan(v);
      inf = inf || std::isinf(v);
    }
    if (nan || inf) {
      ctx.fail_invalid_argument(message_, " : Tensor had ", nan && inf ? "Inf and NaN" : nan ? "NaN" : "Inf",
                                " values");
      return;
    }
    ctx.set_output(0, x);
  }

 private:
  std::string message_;
};

// ---------------------------------------------------------------------------------------
// Range and LinSpace.

// True when every input is a scalar; else fails naming the first that is not.
bool inputs_are_scalars(kernel_context& ctx, std::initializer_list<const char*> names) {
  int i = 0;
  for (const char* name : names) {
    if (ctx.input(i).rank() != 0) {
      ctx.fail_invalid_argument(name, " must be a scalar, but has shape ", ctx.input(i).shape().to_string());
      return false;
    }
    ++i;
  }
  return true;
}

// Range: start, start + delta, ... up to (not including) limit; the length is
// graph::range_size's, as the shape function's.

template <class T>
class range_kernel final : public op_kernel {
 public:
  explicit range_kernel(kernel_construction& c) : op_kernel(c) {}
  memory input_memory(int) const override { return memory::host; }

  void compute(kernel_context& ctx) override {
    if (!inputs_are_scalars(ctx, {"start", "limit", "delta"})) return;
    T start = ctx.input(0).scalar_value<T>();
    T limit = ctx.input(1).scalar_value<T>();
    T delta = ctx.input(2).scalar_value<T>();
    using wide = std::conditional_t<std::is_floating_point_v<T>, double, std::int64_t>;
    auto size = graph::range_size(wide(start), wide(limit), wide(delta));
    if (!size.ok()) {
      ctx.fail(size.error());
      return;
    }
    tensor& out = ctx.allocate_output(0, tensor_shape{*size});
    T* values = out.data<T>();
    for (std::int64_t i = 0; i < *size; ++i) values[i] = static_cast<T>(start + static_cast<T>(i) * delta);
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }
};

// ---------------------------------------------------------------------------------------
// LinSpace: num values from start to stop, evenly spaced, both ends included.

template <class T>
class lin_space_kernel final : public op_kernel {
 public:
  explicit lin_space_kernel(kernel_construction& c) : op_kernel(c) {}
  memory input_memory(int) const override { return memory::host; }

  void compute(kernel_context& ctx) override {
    if (!inputs_are_scalars(ctx, {"start", "stop", "num"})) return;
    const T start = ctx.input(0).scalar_value<T>();
    const T stop = ctx.input(1).scalar_value<T>();
    const std::int64_t num = index_values(ctx.input(2))[0];
    if (num <= 0) {
      ctx.fail_invalid_argument("num must be positive, but is ", num);
      return;
    }
    tensor& out = ctx.allocate_output(0, tensor_shape{num});
    T* values = out.data<T>();
    const T step = num > 1 ? (stop - start) / static_cast<T>(num - 1) : T(0);
    for (std::int64_t i = 0; i < num; ++i) values[i] = start + step * static_cast<T>(i);
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }
};

// ---------------------------------------------------------------------------------------
// Fill.

template <class T>
class fill_kernel final : public op_kernel {
 public:
  explicit fill_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& dims_tensor = ctx.input(0);
    const tensor& value = ctx.input(1);
    if (dims_tensor.rank() != 1) {
      ctx.fail_invalid_argument("dims must be a vector, but has shape ",
                                dims_tensor.shape().to_string());
      return;
    }
    if (value.rank() != 0) {
      ctx.fail_invalid_argument("value must be a scalar, but has shape ",
                                value.shape().to_string());
      return;
    }
    auto shape = tensor_shape::make(index_values(dims_tensor));
    if (!shape.ok()) {
      ctx.fail_invalid_argument("dims ", dims_tensor.debug_string(),
                                " is not a valid shape: ", shape.error().message());
      return;
    }
    tensor& out = ctx.allocate_output(0, std::move(*shape));
    T v = value.scalar_value<T>();
    T* data = out.data<T>();
    ctx.pool().parallel_for(out.num_elements(), 0.25, [&](std::int64_t begin, std::int64_t end) {
      std::fill(data + begin, data + end, v);
    });
  }
};

// ---------------------------------------------------------------------------------------
// Transpose.

// Batched 2-D transpose in square tiles, so both sides are walked a cache line at a
// time: out[b][c][r] = in[b][r][c].
template <class E>
void transpose_batched_2d(const E* in, E* out, std::int64_t batch, std::int64_t rows,
                          std::int64_t cols, compute_pool& pool) {
  constexpr std::int64_t tile = 32;
  std::int64_t row_tiles = (rows + tile - 1) / tile;
  pool.parallel_for(batch * row_tiles, static_cast<double>(tile * cols),
                    [&](std::int64_t begin, std::int64_t end) {
                      for (std::int64_t unit = begin; unit < end; ++unit) {
                        std::int64_t b = unit / row_tiles;
                        std::int64_t r0 = (unit % row_tiles) * tile;
                        std::int64_t r1 = std::min(rows, r0 + tile);
                        const E* src = in + b * rows * cols;
                        E* dst = out + b * rows * cols;
                        for (std::int64_t c0 = 0; c0 < cols; c0 += tile) {
                          std::int64_t c1 = std::min(cols, c0 + tile);
                          for (std::int64_t r = r0; r < r1; ++r) {
                            for (std::int64_t c = c0; c < c1; ++c)
                              dst[c * rows + r] = src[r * cols + c];
                          }
                        }
                      }
                    });
}

// Any permutation: walks the output in order, one row of its last dimension at a time,
// reading the input with the stride that dimension has there. `strides[i]` is the input
// stride of output dimension i. REQUIRES: out_dims.size() >= 2.
template <class E>
void transpose_general(const E* in, E* out, const std::vector<std::int64_t>& out_dims,
                       const std::vector<std::int64_t>& strides, compute_pool& pool) {
  int outer_rank = static_cast<int>(out_dims.size()) - 1;
  std::int64_t inner = out_dims.back();
  std::int64_t inner_stride = strides.back();
  std::int64_t rows = product(out_dims, 0, out_dims.size() - 1);
  pool.parallel_for(rows, static_cast<double>(inner), [&](std::int64_t begin, std::int64_t end) {
    std::vector<std::int64_t> index(static_cast<std::size_t>(outer_rank));
    std::int64_t offset = 0;
    std::int64_t rest = begin;
    for (int i = outer_rank - 1; i >= 0; --i) {
      auto u = static_cast<std::size_t>(i);
      index[u] = rest % out_dims[u];
      rest /= out_dims[u];
      offset += index[u] * strides[u];
    }
    for (std::int64_t row = begin; row < end; ++row) {
      E* dst = out + row * inner;
      if (inner_stride == 1) {
        std::memcpy(dst, in + offset, static_cast<std::size_t>(inner) * sizeof(E));
      } else {
        for (std::int64_t j = 0; j < inner; ++j) dst[j] = in[offset + j * inner_stride];
      }
      for (int i = outer_rank - 1; i >= 0; --i) {
        auto u = static_cast<std::size_t>(i);
        offset += strides[u];
        if (++index[u] < out_dims[u]) break;
        offset -= strides[u] * out_dims[u];
        index[u] = 0;
      }
    }
  });
}

class transpose_kernel final : public op_kernel {
 public:
  explicit transpose_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& input = ctx.input(0);
    const tensor& perm_tensor = ctx.input(1);
    int rank = input.rank();
    if (perm_tensor.rank() != 1) {
      ctx.fail_invalid_argument("perm must be a vector, but has shape ",
                                perm_tensor.shape().to_string());
      return;
    }
    std::vector<std::int64_t> perm = index_values(perm_tensor);
    if (static_cast<int>(perm.size()) != rank) {
      ctx.fail_invalid_argument("perm ", perm_tensor.debug_string(), " has ", perm.size(),
                                " entries but the input has rank ", rank, " (shape ",
                                input.shape().to_string(), ")");
      return;
    }
    std::vector<bool> seen(perm.size(), false);
    tensor_shape out_shape;
    for (std::int64_t p : perm) {
      if (p < 0 || p >= rank || seen[static_cast<std::size_t>(p)]) {
        ctx.fail_invalid_argument("perm ", perm_tensor.debug_string(),
                                  " is not a permutation of [0, ", rank, ")");
        return;
      }
      seen[static_cast<std::size_t>(p)] = true;
      out_shape.add_dim(input.dim(static_cast<int>(p)));
    }

    // Size-1 dimensions do not affect the layout, and input dimensions that stay adjacent
    // and in order move as one: reduce the problem to the fewest dimensions.
    std::vector<int> kept(static_cast<std::size_t>(rank), -1);
    std::vector<std::int64_t> kept_dims;
    for (int i = 0; i < rank; ++i) {
      if (input.dim(i) != 1) {
        kept[static_cast<std::size_t>(i)] = static_cast<int>(kept_dims.size());
        kept_dims.push_back(input.dim(i));
      }
    }
    std::vector<int> reduced_perm;  // over kept dims
    for (std::int64_t p : perm) {
      int k = kept[static_cast<std::size_t>(p)];
      if (k >= 0) reduced_perm.push_back(k);
    }
    // Merge runs p, p+1, ... of the permutation into groups of input dimensions.
    std::vector<int> group_of(kept_dims.size());
    std::vector<std::int64_t> group_dims;  // input dims of each group, in input order
    std::vector<int> group_perm;           // output order of groups, as group ids
    {
      std::vector<int> starts;  // first kept dim of each group, in output order
      for (std::size_t i = 0; i < reduced_perm.size(); ++i) {
        if (i == 0 || reduced_perm[i] != reduced_perm[i - 1] + 1) starts.push_back(reduced_perm[i]);
      }
      std::vector<int> sorted = starts;
      std::sort(sorted.begin(), sorted.end());
      for (int s : starts) {
        group_perm.push_back(
            static_cast<int>(std::lower_bound(sorted.begin(), sorted.end(), s) - sorted.begin()));
      }
      group_dims.assign(sorted.size(), 1);
      std::size_t g = 0;
      for (std::size_t k = 0; k < kept_dims.size(); ++k) {
        if (g + 1 < sorted.size() && static_cast<int>(k) == sorted[g + 1]) ++g;
        group_dims[g] *= kept_dims[k];
      }
    }
    bool identity = true;
    for (std::size_t i = 0; i < group_perm.size(); ++i)
      identity &= group_perm[i] == static_cast<int>(i);
    if (identity || input.num_elements() == 0) {
      if (identity) {
        ctx.set_output(0, input.reshaped(std::move(out_shape)));
      } else {
        ctx.allocate_output(0, std::move(out_shape));
      }
      return;
    }

    tensor& out = ctx.allocate_output(0, std::move(out_shape));
    visit_element_size(dtype_size(input.type()), [&]<class E>() {
      const E* src = static_cast<const E*>(input.raw_data());
      E* dst = static_cast<E*>(out.raw_data());
      if (group_perm == std::vector<int>{1, 0}) {
        transpose_batched_2d(src, dst, 1, group_dims[0], group_dims[1], ctx.pool());
      } else if (group_perm == std::vector<int>{0, 2, 1}) {
        transpose_batched_2d(src, dst, group_dims[0], group_dims[1], group_dims[2], ctx.pool());
      } else {
        std::vector<std::int64_t> in_strides(group_dims.size());
        std::int64_t stride = 1;
        for (std::size_t i = group_dims.size(); i-- > 0;) {
          in_strides[i] = stride;
          stride *= group_dims[i];
        }
        std::vector<std::int64_t> out_dims, strides;
        for (int g : group_perm) {
          out_dims.push_back(group_dims[static_cast<std::size_t>(g)]);
          strides.push_back(in_strides[static_cast<std::size_t>(g)]);
        }
        transpose_general(src, dst, out_dims, strides, ctx.pool());
      }
    });
  }
};

// ---------------------------------------------------------------------------------------
// ConcatV2 and Pack: the output is `outer` rows, each the concatenation of one row of
// every input.

struct concat_piece {
  const char* data;
  std::int64_t row_bytes;
};

// Copies the pieces into `out`. The output bytes are split evenly among threads, so one
// huge input or many tiny rows parallelize alike.
void concat_rows(const std::vector<concat_piece>& pieces, std::int64_t outer, char* out,
                 compute_pool& pool) {
  std::vector<std::int64_t> starts;  // byte offset of each piece within an output row
  std::int64_t row_bytes = 0;
  for (const auto& p : pieces) {
    starts.push_back(row_bytes);
    row_bytes += p.row_bytes;
  }
  if (row_bytes == 0 || outer == 0) return;
  pool.parallel_for(outer * row_bytes, 0.1, [&](std::int64_t begin, std::int64_t end) {
    std::int64_t row = begin / row_bytes;
    std::int64_t pos = begin % row_bytes;
    auto piece = static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), pos) -
                                          starts.begin() - 1);
    std::int64_t at = begin;
    while (at < end) {
      // Skip empty pieces (and step to the next row after the last one).
      while (pos - starts[piece] >= pieces[piece].row_bytes) {
        if (++piece == pieces.size()) {
          piece = 0;
          pos = 0;
          ++row;
        }
      }
      std::int64_t offset = pos - starts[piece];
      std::int64_t n = std::min(pieces[piece].row_bytes - offset, end - at);
      std::memcpy(out + at, pieces[piece].data + row * pieces[piece].row_bytes + offset,
                  static_cast<std::size_t>(n));
      at += n;
      pos += n;
    }
  });
}

class concat_kernel final : public op_kernel {
 public:
  explicit concat_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    int n = ctx.num_inputs() - 1;
    const tensor& axis_tensor = ctx.input(n);
    if (axis_tensor.rank() != 0) {
      ctx.fail_invalid_argument("axis must be a scalar, but has shape ",
                                axis_tensor.shape().to_string());
      return;
    }
    const tensor& first = ctx.input(0);
    int rank = first.rank();
    std::int64_t axis_value = index_values(axis_tensor)[0];
    std::int64_t axis = axis_value < 0 ? axis_value + rank : axis_value;
    if (axis < 0 || axis >= rank) {
      ctx.fail_invalid_argument("axis ", axis_value, " is out of range for inputs of shape ",
                                first.shape().to_string(), " (valid: [", -rank, ", ", rank, "))");
      return;
    }
    auto a = static_cast<int>(axis);
    tensor_shape out_shape = first.shape();
    std::int64_t axis_size = 0;
    for (int i = 0; i < n; ++i) {
      const tensor& t = ctx.input(i);
      bool match = t.rank() == rank;
      for (int d = 0; match && d < rank; ++d) match = d == a || t.dim(d) == first.dim(d);
      if (!match) {
        ctx.fail_invalid_argument("values[", i, "] has shape ", t.shape().to_string(),
                                  " but values[0] has shape ", first.shape().to_string(),
                                  ": all must match except along axis ", axis_value);
        return;
      }
      axis_size += t.dim(a);
    }
    out_shape.set_dim(a, axis_size);
    tensor& out = ctx.allocate_output(0, std::move(out_shape));
    std::int64_t outer = product(first.shape().dims(), 0, static_cast<std::size_t>(a));
    std::size_t element = dtype_size(first.type());
    std::vector<concat_piece> pieces;
    for (int i = 0; i < n; ++i) {
      const tensor& t = ctx.input(i);
      std::int64_t row =
          product(t.shape().dims(), static_cast<std::size_t>(a), static_cast<std::size_t>(rank));
      pieces.push_back(
          {static_cast<const char*>(t.raw_data()), row * static_cast<std::int64_t>(element)});
    }
    concat_rows(pieces, outer, static_cast<char*>(out.raw_data()), ctx.pool());
  }
};

class pack_kernel final : public op_kernel {
 public:
  explicit pack_kernel(kernel_construction& c) : op_kernel(c) { c.get_attr("axis", &axis_); }

  void compute(kernel_context& ctx) override {
    int n = ctx.num_inputs();
    const tensor& first = ctx.input(0);
    int rank = first.rank() + 1;
    std::int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank) {
      ctx.fail_invalid_argument("axis ", axis_, " is out of range for stacking inputs of shape ",
                                first.shape().to_string(), " (valid: [", -rank, ", ", rank, "))");
      return;
    }
    for (int i = 1; i < n; ++i) {
      if (ctx.input(i).shape() != first.shape()) {
        ctx.fail_invalid_argument("all inputs must have the same shape, but values[0] has shape ",
                                  first.shape().to_string(), " and values[", i, "] has shape ",
                                  ctx.input(i).shape().to_string());
        return;
      }
    }
    auto a = static_cast<std::size_t>(axis);
    tensor_shape out_shape = first.shape();
    out_shape.insert_dim(static_cast<int>(axis), n);
    tensor& out = ctx.allocate_output(0, std::move(out_shape));
    std::int64_t outer = product(first.shape().dims(), 0, a);
    std::int64_t row = product(first.shape().dims(), a, first.shape().dims().size()) *
                       static_cast<std::int64_t>(dtype_size(first.type()));
    std::vector<concat_piece> pieces;
    for (int i = 0; i < n; ++i) {
      pieces.push_back({static_cast<const char*>(ctx.input(i).raw_data()), row});
    }
    concat_rows(pieces, outer, static_cast<char*>(out.raw_data()), ctx.pool());
  }

 private:
  std::int64_t axis_ = 0;
};

}  // namespace

void register_array_kernels(kernel_registry& registry) {
  add_for_types<all_numeric_types>(registry, "Const", "dtype", make_kernel<const_kernel>);
  add_for_types<all_numeric_types>(registry, "Placeholder", "dtype",
                                   make_kernel<placeholder_kernel>);
  add_for_types<all_numeric_types>(registry, "PlaceholderWithDefault", "dtype",
                                   make_kernel<placeholder_with_default_kernel>);
  add_for_types<all_numeric_types>(registry, "Identity", "T", make_kernel<identity_kernel>);
  add_for_types<all_numeric_types>(registry, "StopGradient", "T", make_kernel<identity_kernel>);
  registry.add("IdentityN", "CPU", {}, make_kernel<identity_kernel>);
  registry.add("NoOp", "CPU", {}, make_kernel<no_op_kernel>);

  auto untyped = [](kernel_factory f) { return [f]<class T, class Index>() { return f; }; };
  add_for_types_and_index<all_numeric_types>(registry, "Reshape", "T", "Tshape",
                                             untyped(make_kernel<reshape_kernel>));
  add_for_types_and_index<all_numeric_types>(registry, "ExpandDims", "T", "Tdim",
                                             untyped(make_kernel<expand_dims_kernel>));
  add_for_types<all_numeric_types>(registry, "Squeeze", "T", make_kernel<squeeze_kernel>);
  // The same kernels on GPU devices: they move no data, only shapes and references.
  add_for_types<all_numeric_types>(registry, "Identity", "T", make_kernel<identity_kernel>, "GPU");
  add_for_types<all_numeric_types>(registry, "StopGradient", "T", make_kernel<identity_kernel>, "GPU");
  registry.add("IdentityN", "GPU", {}, make_kernel<identity_kernel>);
  registry.add("NoOp", "GPU", {}, make_kernel<no_op_kernel>);
  add_for_types_and_index<all_numeric_types>(registry, "Reshape", "T", "Tshape",
                                             untyped(make_kernel<reshape_kernel>), "GPU");
  add_for_types_and_index<all_numeric_types>(registry, "ExpandDims", "T", "Tdim",
                                             untyped(make_kernel<expand_dims_kernel>), "GPU");
  add_for_types<all_numeric_types>(registry, "Squeeze", "T", make_kernel<squeeze_kernel>, "GPU");

  add_for_types_and_index<all_numeric_types>(
      registry, "Shape", "T", "out_type",
      []<class T, class Out>() -> kernel_factory { return make_kernel<shape_kernel<Out>>; });
  add_for_types_and_index<all_numeric_types>(
      registry, "Size", "T", "out_type",
      []<class T, class Out>() -> kernel_factory { return make_kernel<size_kernel<Out>>; });
  add_for_types<all_numeric_types>(registry, "Rank", "T", make_kernel<rank_kernel>);
  add_for_types_and_index<all_numeric_types>(
      registry, "ShapeN", "T", "out_type",
      []<class T, class Out>() -> kernel_factory { return make_kernel<shape_kernel<Out>>; });
  add_typed_kernels<lin_space_kernel, type_list<float, double>>(registry, "LinSpace");
  add_typed_kernels<check_numerics_kernel, type_list<float, double>>(registry, "CheckNumerics");
  add_typed_kernels<range_kernel, type_list<float, double, std::int32_t, std::int64_t>>(registry, "Range", "Tidx");
  // On GPUs, a Const answers in host memory: a kernel that reads it on the device gets a
  // copy at each step (the executor's), one that reads shapes gets it as it is; and the
  // partitioner's control-edge constants run on any device.
  add_for_types<all_numeric_types>(registry, "Const", "dtype", make_kernel<const_kernel>, "GPU");
  // On GPUs too, answering in host memory (what reads shapes wants them there).
  add_for_types_and_index<all_numeric_types>(
      registry, "Shape", "T", "out_type",
      []<class T, class Out>() -> kernel_factory { return make_kernel<shape_kernel<Out>>; }, "GPU");
  add_for_types_and_index<all_numeric_types>(
      registry, "Size", "T", "out_type",
      []<class T, class Out>() -> kernel_factory { return make_kernel<size_kernel<Out>>; }, "GPU");
  add_for_types<all_numeric_types>(registry, "Rank", "T", make_kernel<rank_kernel>, "GPU");
  add_for_types_and_index<all_numeric_types>(
      registry, "ShapeN", "T", "out_type",
      []<class T, class Out>() -> kernel_factory { return make_kernel<shape_kernel<Out>>; }, "GPU");

  add_for_types_and_index<all_numeric_types>(
      registry, "Fill", "T", "index_type",
      []<class T, class Index>() -> kernel_factory { return make_kernel<fill_kernel<T>>; });
  add_for_types_and_index<all_numeric_types>(registry, "Transpose", "T", "Tperm",
                                             untyped(make_kernel<transpose_kernel>));
  add_for_types_and_index<all_numeric_types>(registry, "ConcatV2", "T", "Tidx",
                                             untyped(make_kernel<concat_kernel>));
  add_for_types<all_numeric_types>(registry, "Pack", "T", make_kernel<pack_kernel>);
}

}  // namespace troupe::kernels
