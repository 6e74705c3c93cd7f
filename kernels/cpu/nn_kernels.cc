// CPU kernels: BiasAdd, BiasAddGrad, Softmax, LogSoftmax, SoftmaxCrossEntropyWithLogits,
// SparseSoftmaxCrossEntropyWithLogits.
//
// The softmax family works on rows of the last dimension and is numerically stable: each
// row is shifted by its maximum before exp, and log-sums are taken of the shifted values.
// Rows are split over the compute pool; within a row Eigen's vectorized exp does the work.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

// GCC 12 reports Eigen's AVX-512 exp (built on _mm512_undefined_*) as "maybe uninitialized";
// a known false positive that would otherwise bury real warnings from this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "core/tensor_eigen.h"
#include "kernels/kernel_registry.h"
#include "kernels/shape_checks.h"

namespace troupe::kernels {

namespace {

template <class T>
using row_array = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using const_row_array = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// ~ nanoseconds per element of exp-heavy row work, for parallel_for.
constexpr double k_softmax_ns_per_element = 2.0;

// Channels-last rows in periods: `rows` rows of `channels` values cover `values` values.
// With few channels a period is lcm(channels, 16) values, whole vectors of 16 floats (or 8
// doubles), so that loops over a period vectorize without remainders (LeNet's 6 channels
// otherwise leave 6-element loops); where that would exceed 512 values it is one row.
struct channel_period {
  std::int64_t rows = 1;
  std::int64_t values = 0;
};
inline channel_period period_of(std::int64_t channels) {
  const std::int64_t values = std::lcm(channels, std::int64_t{16});
  if (channels <= 0 || values > 512) return channel_period{1, channels};
  return channel_period{values / channels, values};
}

class bias_kernel_base : public op_kernel {
 public:
  explicit bias_kernel_base(kernel_construction& c) : op_kernel(c) {
    if (status s = read_bias_format(c.node(), &nchw_); !s.ok()) c.fail(std::move(s));
  }

 protected:
  bool nchw_ = false;
};

template <class T>
class bias_add_kernel final : public bias_kernel_base {
 public:
  using bias_kernel_base::bias_kernel_base;

  void compute(kernel_context& ctx) override {
    const tensor& value = ctx.input(0);
    const tensor& bias = ctx.input(1);
    auto layout = bias_add_layout(value.shape(), bias.shape(), nchw_);
    if (!layout.ok()) return ctx.fail(layout.error());
    const bias_layout l = *layout;
    tensor& output = ctx.forward_input_or_allocate_output(0, 0, value.shape());
    const T* in = value.data<T>();
    const T* b = bias.data<T>();
    T* out = output.data<T>();
    std::int64_t rows = l.batch * l.channels;  // rows of `spatial` elements
    if (rows == 0 || l.spatial == 0) return;
    if (!nchw_ || l.spatial == 1) {
      // Channels last: whole periods against the bias tiled over one period, then the
      // rows left over.
      const channel_period period = period_of(l.channels);
      const std::int64_t periods = l.batch / period.rows, p = period.values;
      std::vector<T> tiled(static_cast<std::size_t>(p));
      for (std::int64_t j = 0; j < p; ++j) tiled[j] = b[j % l.channels];
      ctx.pool().parallel_for(periods, static_cast<double>(p) * 0.1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t k = begin; k < end; ++k) {
          const T* from = in + k * p;
          T* to = out + k * p;
          for (std::int64_t j = 0; j < p; ++j) to[j] = from[j] + tiled[j];
        }
      });
      for (std::int64_t j = periods * p; j < l.batch * l.channels; ++j) out[j] = in[j] + b[j % l.channels];
      return;
    }
    std::int64_t s = l.spatial;
    ctx.pool().parallel_for(rows, static_cast<double>(s) * 0.3,
                            [&](std::int64_t begin, std::int64_t end) {
                              for (std::int64_t r = begin; r < end; ++r) {
                                T add = b[r % l.channels];
                                for (std::int64_t j = 0; j < s; ++j) out[r * s + j] = in[r * s + j] + add;
                              }
                            });
  }
};

// The bias gradient: out_backprop summed over every dimension but the channel one.
template <class T>
class bias_add_grad_kernel final : public bias_kernel_base {
 public:
  using bias_kernel_base::bias_kernel_base;

  void compute(kernel_context& ctx) override {
    const tensor& grad = ctx.input(0);
    auto layout = bias_add_grad_layout(grad.shape(), nchw_);
    if (!layout.ok()) return ctx.fail(layout.error());
    const bias_layout l = *layout;
    tensor& output = ctx.allocate_output(0, tensor_shape{l.channels});
    T* out = output.data<T>();
    std::fill_n(out, l.channels, T(0));
    const T* in = grad.data<T>();
    if (l.batch == 0 || l.channels == 0) return;
    // The rows in fixed chunks (set by the shape alone, whatever the thread count), each
    // summed into its own partial; the partials are added in chunk order, so the result
    // has the same bits on every run and pool size. Chunks hold at least 16 K values and
    // number at most 64 (wide rows: a [640, 10000] gradient was 640 partials of 10000,
    // folded one value at a time). Channels last sums whole periods of rows (period_of)
    // into a period-long partial, folded to the channels at the end; NCHW sums one image's
    // channels at a time.
    const channel_period period = l.spatial == 1 ? period_of(l.channels) : channel_period{1, l.channels};
    const std::int64_t width = period.values;     // a partial's length, a multiple of channels
    const std::int64_t unit_rows = period.rows;   // rows per unit of work
    const std::int64_t units = l.batch / unit_rows;
    const std::int64_t unit_size = unit_rows * l.channels * l.spatial;
    constexpr std::int64_t k_max_chunks = 64;
    const std::int64_t per_chunk =
        std::max<std::int64_t>({1, (std::int64_t{1} << 14) / std::max<std::int64_t>(1, unit_size),
                                (units + k_max_chunks - 1) / k_max_chunks});
    const std::int64_t chunks = (units + per_chunk - 1) / per_chunk;
    std::vector<T> partials(static_cast<std::size_t>(chunks * width), T(0));
    ctx.pool().parallel_for(chunks, static_cast<double>(per_chunk * unit_size) * 0.15,
                            [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t chunk = b; chunk < e; ++chunk) {
        T* sums = partials.data() + chunk * width;
        for (std::int64_t u = chunk * per_chunk, last = std::min(units, u + per_chunk); u < last; ++u) {
          const T* rows = in + u * unit_size;
          if (l.spatial == 1) {
            for (std::int64_t j = 0; j < width; ++j) sums[j] += rows[j];
          } else {
            for (std::int64_t c = 0; c < l.channels; ++c) {
              const T* row = rows + c * l.spatial;
              T sum = 0;
              for (std::int64_t j = 0; j < l.spatial; ++j) sum += row[j];
              sums[c] += sum;
            }
          }
        }
      }
    });
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
      for (std::int64_t r = 0; r < width; r += l.channels) {
        const T* partial = partials.data() + chunk * width + r;
        for (std::int64_t c = 0; c < l.channels; ++c) out[c] += partial[c];
      }
    }
    // Rows left over after whole periods.
    for (std::int64_t j = units * unit_size; j < l.batch * l.channels * l.spatial; ++j) out[j % l.channels] += in[j];
  }
};

// ---- Softmax, LogSoftmax. ----

template <class T, bool Log>
class softmax_kernel final : public op_kernel {
 public:
  explicit softmax_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& logits = ctx.input(0);
    if (logits.rank() < 1) {
      ctx.fail(invalid_argument_error(op(), " logits must have rank >= 1, but is a scalar"));
      return;
    }
    tensor& output = ctx.allocate_output(0, logits.shape());
    std::int64_t classes = logits.dim(logits.rank() - 1);
    if (output.num_elements() == 0) return;
    std::int64_t rows = logits.num_elements() / classes;
    const T* in = logits.data<T>();
    T* out = output.data<T>();
    ctx.pool().parallel_for(
        rows, static_cast<double>(classes) * k_softmax_ns_per_element,
        [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t r = begin; r < end; ++r) {
            const_row_array<T> x(in + r * classes, classes);
            row_array<T> y(out + r * classes, classes);
            T max = x.maxCoeff();
            y = (x - max).exp();
            T sum = y.sum();
            if constexpr (Log) y = (x - max) - std::log(sum);
            else y *= T(1) / sum;
          }
        });
  }
};

template <class T>
using softmax = softmax_kernel<T, false>;
template <class T>
using log_softmax = softmax_kernel<T, true>;

// One row of softmax cross-entropy: backprop = softmax(x) - labels, returns the loss
// sum(labels * (log(sum(exp(x - max))) - (x - max))).
template <class T>
T xent_row(const T* features, const T* labels, T* backprop, std::int64_t classes) {
  const_row_array<T> x(features, classes);
  const_row_array<T> p(labels, classes);
  row_array<T> g(backprop, classes);
  T max = x.maxCoeff();
  g = (x - max).exp();
  T sum = g.sum();
  T log_sum = std::log(sum);
  T loss = (p * (log_sum - (x - max))).sum();
  g = g * (T(1) / sum) - p;
  return loss;
}

// Copies a tensor of rank <= 2 broadcast to [rows, cols].
template <class T>
std::vector<T> broadcast_to_matrix(const tensor& t, std::int64_t rows, std::int64_t cols) {
  std::int64_t r = t.rank() == 2 ? t.dim(0) : 1;
  std::int64_t c = t.rank() >= 1 ? t.dim(t.rank() - 1) : 1;
  std::int64_t row_stride = r == 1 ? 0 : c;
  std::int64_t col_stride = c == 1 ? 0 : 1;
  std::vector<T> out(static_cast<std::size_t>(rows * cols));
  const T* in = t.data<T>();
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) out[i * cols + j] = in[i * row_stride + j * col_stride];
  }
  return out;
}

template <class T>
class softmax_xent_kernel final : public op_kernel {
 public:
  explicit softmax_xent_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& features = ctx.input(0);
    const tensor& labels = ctx.input(1);
    auto geometry = softmax_xent_geometry(features.shape(), labels.shape());
    if (!geometry.ok()) return ctx.fail(geometry.error());
    const std::int64_t batch = geometry->batch, classes = geometry->classes;
    tensor& loss = ctx.allocate_output(0, tensor_shape{batch});
    tensor& backprop = ctx.allocate_output(1, tensor_shape{batch, classes});
    if (batch == 0) return;
    if (classes == 0) {
      std::fill_n(loss.data<T>(), batch, T(0));
      return;
    }
    std::vector<T> features_copy, labels_copy;
    const T* x = features.data<T>();
    const T* p = labels.data<T>();
    if (features.shape() != backprop.shape()) {
      features_copy = broadcast_to_matrix<T>(features, batch, classes);
      x = features_copy.data();
    }
    if (labels.shape() != backprop.shape()) {
      labels_copy = broadcast_to_matrix<T>(labels, batch, classes);
      p = labels_copy.data();
    }
    T* l = loss.data<T>();
    T* g = backprop.data<T>();
    ctx.pool().parallel_for(batch, static_cast<double>(classes) * k_softmax_ns_per_element,
                            [&](std::int64_t begin, std::int64_t end) {
                              for (std::int64_t r = begin; r < end; ++r) {
                                l[r] = xent_row(x + r * classes, p + r * classes,
                                                g + r * classes, classes);
                              }
                            });
  }
};

template <class T, class Label>
class sparse_softmax_xent_kernel final : public op_kernel {
 public:
  explicit sparse_softmax_xent_kernel(kernel_construction& c) : op_kernel(c) {}

  void compute(kernel_context& ctx) override {
    const tensor& features = ctx.input(0);
    const tensor& labels = ctx.input(1);
    auto geometry = sparse_softmax_xent_geometry(features.shape(), labels.shape());
    if (!geometry.ok()) return ctx.fail(geometry.error());
    const std::int64_t batch = geometry->batch, classes = geometry->classes;
    const Label* y = labels.data<Label>();
    for (std::int64_t i = 0; i < batch; ++i) {
      if (y[i] < 0 || static_cast<std::int64_t>(y[i]) >= classes) {
        ctx.fail(invalid_argument_error("label ", static_cast<std::int64_t>(y[i]), " at index ", i,
                                        " is outside the valid range of classes [0, ", classes,
                                        ") (features ", features.shape(), ")"));
        return;
      }
    }
    tensor& loss = ctx.allocate_output(0, tensor_shape{batch});
    tensor& backprop = ctx.allocate_output(1, tensor_shape{batch, classes});
    if (batch == 0) return;
    const T* x_all = features.data<T>();
    T* l = loss.data<T>();
    T* g_all = backprop.data<T>();
    ctx.pool().parallel_for(
        batch, static_cast<double>(classes) * k_softmax_ns_per_element,
        [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t r = begin; r < end; ++r) {
            const_row_array<T> x(x_all + r * classes, classes);
            row_array<T> g(g_all + r * classes, classes);
            auto label = static_cast<std::int64_t>(y[r]);
            T max = x.maxCoeff();
            g = (x - max).exp();
            T sum = g.sum();
            l[r] = std::log(sum) - (x[label] - max);
            g *= T(1) / sum;
            g[label] -= T(1);
          }
        });
  }
};

using bias_types = type_list<float, double, std::int8_t, std::int16_t, std::int32_t,
                             std::int64_t, std::uint8_t, std::uint16_t>;

}  // namespace

void register_nn_kernels(kernel_registry& registry) {
  add_typed_kernels<bias_add_kernel, bias_types>(registry, "BiasAdd");
  add_typed_kernels<bias_add_grad_kernel, bias_types>(registry, "BiasAddGrad");
  add_typed_kernels<softmax, float_types>(registry, "Softmax");
  add_typed_kernels<log_softmax, float_types>(registry, "LogSoftmax");
  add_typed_kernels<softmax_xent_kernel, float_types>(registry, "SoftmaxCrossEntropyWithLogits");
  for_each_type<float_types>([&]<class T>() {
    for_each_type<index_types>([&]<class Label>() {
      registry.add("SparseSoftmaxCrossEntropyWithLogits", "CPU",
                   {{"T", dtype_of<T>}, {"Tlabels", dtype_of<Label>}},
                   make_kernel<sparse_softmax_xent_kernel<T, Label>>);
    });
  });
}

}  // namespace troupe::kernels
