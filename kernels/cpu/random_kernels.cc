// CPU kernels: RandomUniform, RandomUniformInt, RandomStandardNormal, TruncatedNormal, and
// the save and restore of their generators (RandomGeneratorSaveState, RandomGeneratorRestoreState).
//
// Each op's Philox generator (kernels/cpu/random_generator.h: a device resource) is seeded
// from (seed, seed2), or from a fresh random seed when both are 0 (as TensorFlow). A
// compute() call reserves a range of the generator's counter, then fills the output in
// parallel: output group g is drawn from a copy of the reserved generator skipped to block
// g * blocks_per_group. The values therefore depend only on the seeds and on how many calls
// came before, never on the number of threads; a fresh generator with the same seeds
// replays the same sequence of tensors, and a restored one continues where it was saved.
//
// The layout of the stream is TensorFlow's (PhiloxRandomOp with FillPhiloxRandom): each
// call reserves 256 blocks per output, fixed-cost distributions use the blocks in order,
// and the rejection sampler gives each group of outputs a budget of 256 samples per output.
#include <algorithm>
#include <cmath>
#include <mutex>

#include "core/random.h"
#include "kernels/cpu/random_generator.h"
#include "kernels/kernel_registry.h"
#include "kernels/node_resource.h"

namespace troupe::kernels {

namespace {

// Counter blocks reserved per output by each call (TensorFlow's multiplier).
constexpr std::uint64_t k_reserved_blocks_per_output = 256;

// Values one 128-bit block yields: four from 32 bits each (float), two from 64 (double).
template <class T>
constexpr int k_values_per_block = sizeof(T) == 4 ? 4 : 2;

template <class T>
void uniforms_from_block(const philox::block& b, T* out) {
  if constexpr (sizeof(T) == 4) {
    for (std::size_t i = 0; i < 4; ++i) out[i] = uint32_to_float(b[i]);
  } else {
    out[0] = uint64_to_double(b[0], b[1]);
    out[1] = uint64_to_double(b[2], b[3]);
  }
}

template <class T>
void normals_from_block(const philox::block& b, T* out) {
  if constexpr (sizeof(T) == 4) {
    for (std::size_t pair = 0; pair < 2; ++pair) {
      auto z = box_muller(uint32_to_float(b[2 * pair]), uint32_to_float(b[2 * pair + 1]));
      out[2 * pair] = static_cast<float>(z[0]);
      out[2 * pair + 1] = static_cast<float>(z[1]);
    }
  } else {
    auto z = box_muller(uint64_to_double(b[0], b[1]), uint64_to_double(b[2], b[3]));
    out[0] = z[0];
    out[1] = z[1];
  }
}

// A distribution turns Philox blocks into `group_size` values of T. `blocks_per_group` is
// how far apart groups start in the stream: the blocks a group uses or, for a rejection
// sampler, a budget it is never expected to exceed.

template <class T>
struct uniform_distribution {
  static constexpr int group_size = 4;
  static constexpr std::uint64_t blocks_per_group = 4 / k_values_per_block<T>;
  void operator()(philox& gen, T* out) const {
    for (int i = 0; i < group_size; i += k_values_per_block<T>)
      uniforms_from_block(gen.next(), out + i);
  }
};

template <class T>
struct normal_distribution {
  static constexpr int group_size = 4;
  static constexpr std::uint64_t blocks_per_group = 4 / k_values_per_block<T>;
  void operator()(philox& gen, T* out) const {
    for (int i = 0; i < group_size; i += k_values_per_block<T>)
      normals_from_block(gen.next(), out + i);
  }
};

// Standard normals with |x| >= 2 rejected and drawn again (the test is on the value as T,
// so rounding cannot land outside). About 95% of candidates are kept, so a group needs one
// or two blocks; its budget of 256 blocks per output is exceeded with probability far
// below 1e-300 (it would then read into the next group's blocks: still deterministic).
template <class T>
struct truncated_normal_distribution {
  static constexpr int group_size = k_values_per_block<T>;
  static constexpr std::uint64_t blocks_per_group = group_size * k_reserved_blocks_per_output / 4;
  void operator()(philox& gen, T* out) const {
    constexpr T k_bound = 2;
    int filled = 0;
    while (filled < group_size) {
      T candidates[k_values_per_block<T>];
      normals_from_block(gen.next(), candidates);
      for (T z : candidates) {
        if (filled < group_size && std::abs(z) < k_bound) out[filled++] = z;
      }
    }
  }
};

// The shape operand of a random op: a vector of non-negative dimensions.
result<tensor_shape> shape_from_tensor(const tensor& t) {
  if (t.rank() != 1) {
    return invalid_argument_error("shape must be a vector, but has shape ", t.shape().to_string());
  }
  std::vector<std::int64_t> dims;
  visit_dtype<index_types>(t.type(), [&]<class I>() {
    for (I d : t.flat<I>()) dims.push_back(static_cast<std::int64_t>(d));
  });
  auto shape = tensor_shape::make(std::move(dims));
  if (!shape.ok()) {
    return invalid_argument_error("shape ", t.debug_string(),
                                  " is not a valid shape: ", shape.error().message());
  }
  return shape;
}

template <class T, template <class> class Distribution>
class random_kernel final : public op_kernel {
 public:
  explicit random_kernel(kernel_construction& c) : op_kernel(c) {
    generator_ = generator_of(c, /*require_shared_name=*/false);
  }

  void compute(kernel_context& ctx) override {
    auto shape = shape_from_tensor(ctx.input(0));
    if (!shape.ok()) {
      ctx.fail(shape.error());
      return;
    }
    tensor& out = ctx.allocate_output(0, std::move(*shape));
    using distribution = Distribution<T>;
    constexpr std::int64_t group_size = distribution::group_size;
    std::int64_t n = out.num_elements();
    std::int64_t groups = (n + group_size - 1) / group_size;
    const philox base = generator_->reserve(static_cast<std::uint64_t>(n) * k_reserved_blocks_per_output);
    T* data = out.data<T>();
    // Roughly 10 ns per output for Philox and the conversion.
    constexpr double cost = 10.0 * group_size;
    ctx.pool().parallel_for(groups, cost, [&](std::int64_t begin, std::int64_t end) {
      distribution draw;
      T values[group_size];
      for (std::int64_t g = begin; g < end; ++g) {
        philox gen = base;
        gen.skip(static_cast<std::uint64_t>(g) * distribution::blocks_per_group);
        draw(gen, values);
        std::int64_t first = g * group_size;
        std::int64_t count = std::min(group_size, n - first);
        for (std::int64_t i = 0; i < count; ++i) data[first + i] = values[i];
      }
    });
  }

 private:
  std::shared_ptr<random_generator> generator_;
};

// RandomUniformInt: minval + (random bits mod (maxval - minval)), 32 bits of the stream
// per int32 and 64 per int64 (as TensorFlow draws them; its numbers differ all the same).
template <class T>
class random_int_kernel final : public op_kernel {
 public:
  explicit random_int_kernel(kernel_construction& c) : op_kernel(c) {
    generator_ = generator_of(c, /*require_shared_name=*/false);
  }

  void compute(kernel_context& ctx) override {
    auto shape = shape_from_tensor(ctx.input(0));
    if (!shape.ok()) return ctx.fail(shape.error());
    const tensor& lo = ctx.input(1);
    const tensor& hi = ctx.input(2);
    if (lo.rank() != 0 || hi.rank() != 0) {
      ctx.fail_invalid_argument("minval and maxval must be scalars, but have shapes ", lo.shape().to_string(),
                                " and ", hi.shape().to_string());
      return;
    }
    const T minval = lo.scalar_value<T>(), maxval = hi.scalar_value<T>();
    tensor& out = ctx.allocate_output(0, std::move(*shape));
    const std::int64_t n = out.num_elements();
    if (n == 0) return;
    if (!(minval < maxval)) {
      ctx.fail_invalid_argument("need minval < maxval, but have minval ", minval, " and maxval ", maxval);
      return;
    }
    using bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
    const auto range = static_cast<bits>(static_cast<bits>(maxval) - static_cast<bits>(minval));
    constexpr std::int64_t per_block = sizeof(T) == 4 ? 4 : 2;
    const std::int64_t blocks = (n + per_block - 1) / per_block;
    const philox base = generator_->reserve(static_cast<std::uint64_t>(n) * k_reserved_blocks_per_output);
    T* data = out.data<T>();
    ctx.pool().parallel_for(blocks, 10.0 * per_block, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t b = begin; b < end; ++b) {
        philox gen = base;
        gen.skip(static_cast<std::uint64_t>(b));
        const philox::block words = gen.next();
        for (std::int64_t i = 0; i < per_block && b * per_block + i < n; ++i) {
          bits r = sizeof(T) == 4 ? static_cast<bits>(words[static_cast<std::size_t>(i)])
                                  : static_cast<bits>((static_cast<std::uint64_t>(words[static_cast<std::size_t>(2 * i)]) << 32) |
                                                      words[static_cast<std::size_t>(2 * i + 1)]);
          data[b * per_block + i] = static_cast<T>(static_cast<bits>(minval) + r % range);
        }
      }
    });
  }

 private:
  std::shared_ptr<random_generator> generator_;
};

// RandomGeneratorSaveState: int64 [6], the generator's key (2 words) and counter (4).
class generator_save_kernel final : public op_kernel {
 public:
  explicit generator_save_kernel(kernel_construction& c) : op_kernel(c) {
    generator_ = generator_of(c, /*require_shared_name=*/true);
  }
  void compute(kernel_context& ctx) override {
    const philox::words w = generator_->state();
    ctx.set_output(0, tensor::from_vector<std::int64_t>(std::vector<std::int64_t>(w.begin(), w.end())));
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }

 private:
  std::shared_ptr<random_generator> generator_;
};

// RandomGeneratorRestoreState: sets the generator to a state RandomGeneratorSaveState gave.
class generator_restore_kernel final : public op_kernel {
 public:
  explicit generator_restore_kernel(kernel_construction& c) : op_kernel(c) {
    generator_ = generator_of(c, /*require_shared_name=*/true);
  }
  void compute(kernel_context& ctx) override {
    const tensor& state = ctx.input(0);
    philox::words w{};
    bool valid = state.type() == dtype::int64 && state.rank() == 1 && state.num_elements() == static_cast<std::int64_t>(w.size());
    for (std::size_t i = 0; valid && i < w.size(); ++i) {
      const std::int64_t v = state.flat<std::int64_t>()[i];
      valid = v >= 0 && v <= 0xffffffffLL;
      w[i] = static_cast<std::uint32_t>(v);
    }
    if (!valid) {
      ctx.fail_invalid_argument("RandomGeneratorRestoreState '", name(),
                                "': the state must be int64 [6] of 32-bit words but is ", state.debug_string(8));
      return;
    }
    generator_->set_state(w);
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }

 private:
  std::shared_ptr<random_generator> generator_;
};

template <template <class> class Distribution>
void add_random_kernels(kernel_registry& registry, const std::string& op) {
  for_each_type<float_types>([&]<class T>() {
    for_each_type<index_types>([&]<class I>() {
      registry.add(op, "CPU", {{"dtype", dtype_of<T>}, {"T", dtype_of<I>}},
                   make_kernel<random_kernel<T, Distribution>>);
    });
  });
}

}  // namespace

std::shared_ptr<random_generator> generator_of(kernel_construction& c, bool require_shared_name) {
  std::int64_t seed = 0, seed2 = 0;
  if (!c.get_attrs("seed", &seed, "seed2", &seed2)) return nullptr;
  return node_resource<random_generator>(c, require_shared_name, "random generator", [&] {
    return std::make_shared<random_generator>(seed == 0 && seed2 == 0
                                                  ? philox(random_seed(), random_seed())
                                                  : philox(static_cast<std::uint64_t>(seed), static_cast<std::uint64_t>(seed2)));
  });
}

void register_random_kernels(kernel_registry& registry) {
  registry.add("RandomGeneratorSaveState", "CPU", {}, make_kernel<generator_save_kernel>);
  registry.add("RandomGeneratorRestoreState", "CPU", {}, make_kernel<generator_restore_kernel>);
  add_random_kernels<uniform_distribution>(registry, "RandomUniform");
  add_random_kernels<normal_distribution>(registry, "RandomStandardNormal");
  for_each_type<index_types>([&]<class T>() {
    for_each_type<index_types>([&]<class I>() {
      registry.add("RandomUniformInt", "CPU", {{"Tout", dtype_of<T>}, {"T", dtype_of<I>}}, make_kernel<random_int_kernel<T>>);
    });
  });
  add_random_kernels<truncated_normal_distribution>(registry, "TruncatedNormal");
}

}  // namespace troupe::kernels
