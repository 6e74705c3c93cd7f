// CPU kernels: LogUniformCandidateSampler and ComputeAccidentalHits (schemas in
// graph/ops/candidate_ops.cc), with TensorFlow's semantics (range_sampler.cc,
// candidate_sampler_ops.cc).
//
// The sampler's Philox generator (kernels/cpu/random_generator.h: a device resource that
// checkpoints save) is seeded from (seed, seed2), or from a fresh random seed when both are
// 0. Each run reserves 2048 * num_sampled 32-bit values of the stream
// (TensorFlow's budget) under a mutex and draws from a copy, so the candidates depend
// only on the seeds and on how many runs came before; a fresh kernel with the same seeds
// replays the same sequence. A draw takes two 32-bit values u -> a double in [0, 1) and
// returns floor(exp(u * log(range_max + 1))) - 1, which is k with probability
// P(k) = log((k + 2) / (k + 1)) / log(range_max + 1). With unique, draws already taken
// are rejected until num_sampled distinct candidates are found (a run whose rejections
// overrun the budget reads into the next run's values: still deterministic).
//
// Expected counts (for the sampled and for the true classes), with n = num_sampled and
// t = the number of draws made: p * n when t == n (always without unique), otherwise
// 1 - (1 - p)^t, computed as -expm1(t * log1p(-p)).
//
// Unlike TensorFlow, true classes outside [0, range_max) are an error (TensorFlow computes
// a meaningless probability for them).
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/random.h"
#include "kernels/cpu/random_generator.h"
#include "kernels/kernel_registry.h"

namespace troupe::kernels {

namespace {

// 32-bit values from a Philox stream, one block at a time, in order (TensorFlow's
// SingleSampleAdapter).
class sample_stream {
 public:
  explicit sample_stream(const philox& generator) : generator_(generator) {}

  std::uint32_t next() {
    if (used_ == block_.size()) {
      block_ = generator_.next();
      used_ = 0;
    }
    return block_[used_++];
  }
  // Uniform in [0, 1) from the next two values (TensorFlow's SimplePhilox::RandDouble).
  double uniform_double() {
    std::uint32_t hi = next();
    std::uint32_t lo = next();
    return uint64_to_double(hi, lo);
  }

 private:
  philox generator_;
  philox::block block_{};
  std::size_t used_ = 4;  // block_ is spent: draw a new one first
};

// Checks that `classes` is an int64 [batch, num_true] matrix; names the kernel's node.
bool check_true_classes(kernel_context& ctx, const op_kernel& kernel, const tensor& classes,
                        std::int64_t num_true) {
  if (classes.rank() != 2 || classes.dim(1) != num_true) {
    ctx.fail_invalid_argument(kernel.op(), " '", kernel.name(), "': true_classes must be a [batch, ",
                              num_true, "] matrix (num_true = ", num_true, ") but has shape ",
                              classes.shape().to_string());
    return false;
  }
  return true;
}

class log_uniform_sampler_kernel final : public op_kernel {
 public:
  explicit log_uniform_sampler_kernel(kernel_construction& c) : op_kernel(c) {
    if (!c.get_attr("num_true", &num_true_) || !c.get_attr("num_sampled", &num_sampled_) ||
        !c.get_attr("unique", &unique_) || !c.get_attr("range_max", &range_max_)) {
      return;
    }
    if (num_true_ < 1 || num_sampled_ < 1 || range_max_ < 1) {
      c.fail(invalid_argument_error("LogUniformCandidateSampler '", name(), "': num_true (", num_true_,
                                    "), num_sampled (", num_sampled_, ") and range_max (", range_max_,
                                    ") must be >= 1"));
      return;
    }
    if (unique_ && num_sampled_ > range_max_) {
      c.fail(invalid_argument_error("LogUniformCandidateSampler '", name(), "': cannot draw num_sampled = ",
                                    num_sampled_, " unique candidates from range_max = ", range_max_,
                                    " classes (unique needs num_sampled <= range_max)"));
      return;
    }
    log_range_ = std::log1p(static_cast<double>(range_max_));
    generator_ = generator_of(c, /*require_shared_name=*/false);
  }

  void compute(kernel_context& ctx) override {
    const tensor& classes = ctx.input(0);
    if (!check_true_classes(ctx, *this, classes, num_true_)) return;
    auto true_classes = classes.flat<std::int64_t>();
    for (std::size_t i = 0; i < true_classes.size(); ++i) {
      if (true_classes[i] < 0 || true_classes[i] >= range_max_) {
        ctx.fail_invalid_argument("LogUniformCandidateSampler '", name(), "': true class ",
                                  true_classes[i], " at flat index ", i, " is outside [0, range_max = ",
                                  range_max_, ")");
        return;
      }
    }

    sample_stream stream(generator_->reserve(static_cast<std::uint64_t>(num_sampled_) * k_reserved_values_per_sample / 4));
    auto sampled = ctx.allocate_output(0, {num_sampled_}).flat<std::int64_t>();
    std::int64_t num_tries = 0;
    if (unique_) {
      std::unordered_set<std::int64_t> taken;
      taken.reserve(static_cast<std::size_t>(num_sampled_));
      std::int64_t picked = 0;
      while (picked < num_sampled_) {
        if (++num_tries > k_max_tries) {
          ctx.fail_invalid_argument("LogUniformCandidateSampler '", name(), "': found only ", picked,
                                    " distinct candidates in ", k_max_tries, " draws; num_sampled (",
                                    num_sampled_, ") is too close to range_max (", range_max_, ")");
          return;
        }
        std::int64_t value = draw(stream);
        if (taken.insert(value).second) sampled[static_cast<std::size_t>(picked++)] = value;
      }
    } else {
      for (auto& value : sampled) value = draw(stream);
      num_tries = num_sampled_;
    }

    auto true_count = ctx.allocate_output(1, classes.shape()).flat<float>();
    for (std::size_t i = 0; i < true_classes.size(); ++i) {
      true_count[i] = expected_count(true_classes[i], num_tries);
    }
    auto sampled_count = ctx.allocate_output(2, {num_sampled_}).flat<float>();
    for (std::size_t i = 0; i < sampled.size(); ++i) sampled_count[i] = expected_count(sampled[i], num_tries);
  }

  // Below 1024 samples, cheaper than a hand-off.
  double estimated_ns(std::span<const tensor>) const override {
    return num_sampled_ >= 1024 ? k_expensive_ns : 0;
  }

 private:
  // 32-bit values reserved per sampled candidate and run (TensorFlow's 2048).
  static constexpr std::int64_t k_reserved_values_per_sample = 2048;
  // TensorFlow stops (CHECK) at kint32max draws; this one fails the step there.
  static constexpr std::int64_t k_max_tries = std::numeric_limits<std::int32_t>::max();

  std::int64_t draw(sample_stream& stream) const {
    auto value = static_cast<std::int64_t>(std::exp(stream.uniform_double() * log_range_)) - 1;
    // Rounding could in principle reach range_max; TensorFlow folds it back the same way.
    return value % range_max_;
  }

  double probability(std::int64_t k) const {
    return std::log((static_cast<double>(k) + 2.0) / (static_cast<double>(k) + 1.0)) / log_range_;
  }

  float expected_count(std::int64_t k, std::int64_t num_tries) const {
    double p = probability(k);
    if (num_tries == num_sampled_) return static_cast<float>(p * static_cast<double>(num_sampled_));
    return static_cast<float>(-std::expm1(static_cast<double>(num_tries) * std::log1p(-p)));
  }

  std::int64_t num_true_ = 1;
  std::int64_t num_sampled_ = 1;
  bool unique_ = false;
  std::int64_t range_max_ = 1;
  double log_range_ = 0;
  std::shared_ptr<random_generator> generator_;
};

// For every row i and true class c of that row found among the sampled candidates, one
// hit (i, position of c, -FLT_MAX), rows in order and a row's classes in column order.
// A candidate sampled more than once is found at its last position (as TensorFlow).
class accidental_hits_kernel final : public op_kernel {
 public:
  explicit accidental_hits_kernel(kernel_construction& c) : op_kernel(c) {
    if (!c.get_attr("num_true", &num_true_)) return;
    if (num_true_ < 1) {
      c.fail(invalid_argument_error("ComputeAccidentalHits '", name(), "': num_true is ", num_true_,
                                    " but must be >= 1"));
    }
  }

  void compute(kernel_context& ctx) override {
    const tensor& classes = ctx.input(0);
    const tensor& candidates = ctx.input(1);
    if (!check_true_classes(ctx, *this, classes, num_true_)) return;
    if (candidates.rank() != 1) {
      ctx.fail_invalid_argument("ComputeAccidentalHits '", name(),
                                "': sampled_candidates must be a vector but has shape ",
                                candidates.shape().to_string());
      return;
    }
    if (classes.dim(0) > std::numeric_limits<std::int32_t>::max()) {
      ctx.fail_invalid_argument("ComputeAccidentalHits '", name(), "': ", classes.dim(0),
                                " rows do not fit the int32 indices output");
      return;
    }
    auto sampled = candidates.flat<std::int64_t>();
    std::unordered_map<std::int64_t, std::int64_t> position;
    position.reserve(sampled.size());
    for (std::size_t i = 0; i < sampled.size(); ++i) position[sampled[i]] = static_cast<std::int64_t>(i);

    std::vector<std::int32_t> rows;
    std::vector<std::int64_t> ids;
    auto true_classes = classes.flat<std::int64_t>();
    const std::int64_t batch = classes.dim(0);
    for (std::int64_t row = 0; row < batch; ++row) {
      for (std::int64_t j = 0; j < num_true_; ++j) {
        auto found = position.find(true_classes[static_cast<std::size_t>(row * num_true_ + j)]);
        if (found == position.end()) continue;
        rows.push_back(static_cast<std::int32_t>(row));
        ids.push_back(found->second);
      }
    }
    const auto hits = static_cast<std::int64_t>(rows.size());
    auto out_rows = ctx.allocate_output(0, {hits}).flat<std::int32_t>();
    auto out_ids = ctx.allocate_output(1, {hits}).flat<std::int64_t>();
    auto out_weights = ctx.allocate_output(2, {hits}).flat<float>();
    for (std::size_t i = 0; i < rows.size(); ++i) {
      out_rows[i] = rows[i];
      out_ids[i] = ids[i];
      out_weights[i] = -FLT_MAX;
    }
  }

  double estimated_ns(std::span<const tensor>) const override { return 0; }

 private:
  std::int64_t num_true_ = 1;
};

}  // namespace

void register_candidate_kernels(kernel_registry& registry) {
  registry.add("LogUniformCandidateSampler", "CPU", {}, make_kernel<log_uniform_sampler_kernel>);
  registry.add("ComputeAccidentalHits", "CPU", {}, make_kernel<accidental_hits_kernel>);
}

}  // namespace troupe::kernels
