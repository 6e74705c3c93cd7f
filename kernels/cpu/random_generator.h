// The Philox generator of a stateful random op (RandomUniform, RandomStandardNormal,
// TruncatedNormal, LogUniformCandidateSampler): a resource of the op's device under
// (container, shared_name), by default ("", the node's name), so that
// RandomGeneratorSaveState / RandomGeneratorRestoreState (graph/ops/random_ops.cc) find it
// and a checkpoint holds where each op's stream is: a restored run draws the numbers the
// uninterrupted one would have drawn. Outside a device (a kernel run on its own) the
// kernel keeps a generator of its own.
//
// Created by whoever asks first, seeded from that node's seed and seed2 as TensorFlow's
// PhiloxRandom (both 0: a fresh seed); the save and restore ops carry the random op's
// seeds, so the generator is the same whichever runs first.
//
//   auto g = generator_of(c, /*require_shared_name=*/false);   // in a kernel's constructor
//   philox base = g->reserve(blocks);                           // in compute()
#pragma once

#include <memory>
#include <mutex>
#include <string_view>

#include "core/random.h"
#include "core/resource.h"
#include "kernels/kernel.h"

namespace troupe::kernels {

class random_generator final : public resource {
 public:
  explicit random_generator(philox start) : generator_(start) {}
  std::string_view kind() const override { return "random generator"; }

  // The generator at the start of `blocks` counter blocks, which are skipped past.
  philox reserve(std::uint64_t blocks) {
    std::lock_guard<std::mutex> lock(mutex_);
    philox at = generator_;
    generator_.skip(blocks);
    return at;
  }
  philox::words state() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return generator_.state();
  }
  void set_state(const philox::words& w) {
    std::lock_guard<std::mutex> lock(mutex_);
    generator_ = philox::from_state(w);
  }

 private:
  mutable std::mutex mutex_;
  philox generator_;  // guarded by mutex_
};

// The generator of c's node (see above); null with c failed. `require_shared_name`: the
// save and restore ops, which name another node's generator.
std::shared_ptr<random_generator> generator_of(kernel_construction& c, bool require_shared_name);

}  // namespace troupe::kernels
