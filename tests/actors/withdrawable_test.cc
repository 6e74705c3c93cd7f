// send_withdrawable (actors/withdrawable.h) against its races: an actor stand-in that may
// answer inside `send`, from another thread at any moment, or not at all until the
// request is withdrawn; and a step that aborts before the request is sent, while it is
// sent, or after it was answered. Whatever the interleaving, the kernel finishes exactly
// once, with the actor's answer, and nothing is left registered.
#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "actors/withdrawable.h"
#include "core/thread_pool.h"

using namespace troupe;

namespace {

// Holds the reply of one request, as an actor's state would; answers it once: with a
// value, or `cancelled` when the request is withdrawn while still held.
class actor_stand_in {
 public:
  void receive(actors::reply<tensor> r) {
    std::lock_guard<std::mutex> lock(mutex_);
    held_ = std::move(r);
  }
  bool answer(float value) {
    auto r = take();
    if (!r) return false;
    (*r)(tensor::scalar(value));
    return true;
  }
  void withdraw() {
    ++withdrawals;
    if (auto r = take()) (*r)(cancelled_error("withdrawn"));
  }
  std::atomic<int> withdrawals{0};

 private:
  std::optional<actors::reply<tensor>> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    auto r = std::move(held_);
    held_.reset();
    return r;
  }
  std::mutex mutex_;
  std::optional<actors::reply<tensor>> held_;
};

}  // namespace

TEST_CASE("a withdrawable request finishes exactly once whatever the interleaving", "[actors][withdrawable]") {
  compute_pool pool(1);
  std::mt19937 rng(42);
  const std::vector<dtype> types = {dtype::float32};
  int answered = 0, withdrawn = 0;
  for (int i = 0; i < 4000; ++i) {
    INFO("iteration " << i);
    const int mode = i % 4;  // 0: answer inside send; 1: abort before send; 2, 3: race both
    kernels::cancellation_manager cancellation;
    kernels::step_info info;
    info.step_id = i;
    info.pool = &pool;
    info.cancellation = &cancellation;
    std::vector<tensor> outputs(1);
    kernels::kernel_context ctx({}, outputs, types, info);
    actor_stand_in actor;
    std::atomic<int> finished{0}, done{0};
    if (mode == 1) cancellation.start_cancel();
    std::uniform_int_distribution<int> spin(0, 2000);
    const int answer_after = spin(rng), abort_after = spin(rng);
    actors::send_withdrawable<tensor>(
        ctx, [&] { ++done; }, std::make_shared<const std::string>("actor"),
        [&](actors::reply<tensor> r) {
          actor.receive(std::move(r));
          if (mode == 0) actor.answer(1.0f);
        },
        [&] { actor.withdraw(); },
        [&](kernels::kernel_context& c, result<tensor> r) {
          ++finished;
          if (r.ok()) c.set_output(0, std::move(*r));
          else c.fail(r.error());
        });
    std::thread answerer([&] {
      for (volatile int k = 0; k < answer_after; ++k) {
      }
      actor.answer(2.0f);
    });
    std::thread aborter([&] {
      for (volatile int k = 0; k < abort_after; ++k) {
      }
      if (mode >= 2) cancellation.start_cancel();
    });
    answerer.join();
    aborter.join();
    REQUIRE(finished == 1);
    REQUIRE(done == 1);
    CHECK(actor.withdrawals <= 1);
    if (ctx.ok()) {
      ++answered;
      CHECK(outputs[0].scalar_value<float>() == (mode == 0 ? 1.0f : 2.0f));
    } else {
      ++withdrawn;
      CHECK(ctx.get_status().error_code() == code::cancelled);
    }
    if (mode == 1) CHECK(actor.withdrawals == 1);  // withdrawn at once: the step had aborted
  }
  // Both outcomes occurred (the races were real).
  CHECK(answered > 0);
  CHECK(withdrawn > 0);
}
