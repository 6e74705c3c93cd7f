// The rendezvous table as conversations: a tensor that arrives before its Recv waits for
// it, a Recv that asks first is parked (nothing blocks) and answered on arrival, an
// aborted step fails its parked Recvs and refuses its late traffic, a cancelled Recv
// fails naming the transfer; keys match by value, once hashed; replies may re-enter the
// table (as a Recv answered inside a device actor's handler does); and the active table
// is only visible to its own device's kernels, inside its scope. Threads share a table (a
// link's reader delivers into it while its actor serves Recvs), and a table shut when its
// device goes refuses everything after.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "actors/rendezvous.h"
#include "core/buffer.h"

using namespace troupe;
using actors::rendezvous_table;
using actors::reply;
using actors::transfer_key;
using actors::transfer_key_ptr;

namespace {

constexpr const char* k_ps = "/job:ps/replica:0/task:0/device:CPU:0";
constexpr const char* k_worker = "/job:worker/replica:0/task:0/device:CPU:0";

transfer_key_ptr key_of(const std::string& tensor_name, std::uint64_t incarnation = 7) {
  return std::make_shared<const transfer_key>(placement::rendezvous_key{k_ps, incarnation, k_worker, tensor_name});
}

// A reply that records what it was answered with.
struct answer {
  std::shared_ptr<std::optional<result<tensor>>> got = std::make_shared<std::optional<result<tensor>>>();
  reply<tensor> make() const {
    return reply<tensor>([got = got](result<tensor> r) { *got = std::move(r); }, "device test");
  }
  bool answered() const { return got->has_value(); }
  const result<tensor>& value() const { return **got; }
};

}  // namespace

TEST_CASE("a transfer key is hashed and printed once, and equal keys match by value") {
  auto a = key_of("x:0");
  auto b = key_of("x:0");
  CHECK(a.get() != b.get());
  CHECK(*a == *b);
  CHECK(a->hash() == b->hash());
  CHECK(a->printed() == a->key().to_string());
  CHECK_FALSE(*a == *key_of("x:1"));
  CHECK_FALSE(*a == *key_of("x:0", 8));  // another incarnation of the sender
  auto later_receiver = std::make_shared<const transfer_key>(placement::rendezvous_key{k_ps, 7, k_worker, "x:0", 3});
  CHECK_FALSE(*a == *later_receiver);  // another incarnation of the receiver
}

TEST_CASE("a tensor that arrives first waits for its Recv, which gets its buffer") {
  rendezvous_table table;
  tensor value = tensor::scalar<float>(3.0f);
  REQUIRE(table.send(1, key_of("x:0"), value).ok());
  CHECK(table.num_waiting() == 1);
  answer a;
  table.recv(1, key_of("x:0"), a.make());
  REQUIRE(a.answered());
  REQUIRE(a.value().ok());
  CHECK(a.value()->shares_buffer_with(value));
  CHECK(table.num_waiting() == 0);
}

TEST_CASE("a Recv that asks first is parked until its tensor arrives, per step") {
  rendezvous_table table;
  answer step1, step2;
  table.recv(1, key_of("x:0"), step1.make());
  table.recv(2, key_of("x:0"), step2.make());
  CHECK_FALSE(step1.answered());  // parked: recv returned without an answer
  CHECK(table.num_waiting() == 2);
  REQUIRE(table.send(2, key_of("x:0"), tensor::scalar<float>(2.0f)).ok());
  CHECK_FALSE(step1.answered());
  REQUIRE(step2.answered());
  CHECK(step2.value()->scalar_value<float>() == 2.0f);
  REQUIRE(table.send(1, key_of("y:0"), tensor::scalar<float>(9.0f)).ok());  // another transfer
  CHECK_FALSE(step1.answered());
  REQUIRE(table.send(1, key_of("x:0"), tensor::scalar<float>(1.0f)).ok());
  REQUIRE(step1.answered());
  CHECK(step1.value()->scalar_value<float>() == 1.0f);
  CHECK(table.num_waiting() == 1);  // y:0 of step 1 still waits for its Recv
}

TEST_CASE("a second Recv for the same transfer and step is an internal error naming the key") {
  rendezvous_table table;
  answer first, second;
  table.recv(1, key_of("x:0"), first.make());
  table.recv(1, key_of("x:0"), second.make());
  CHECK_FALSE(first.answered());
  REQUIRE(second.answered());
  REQUIRE_FALSE(second.value().ok());
  CHECK(second.value().error().error_code() == code::internal);
  CHECK_THAT(second.value().error().message(), Catch::Contains(key_of("x:0")->printed()));
}

TEST_CASE("an aborted step fails its parked Recvs and refuses its late traffic") {
  rendezvous_table table;
  answer parked, other_step;
  table.recv(5, key_of("x:0"), parked.make());
  table.recv(6, key_of("x:0"), other_step.make());
  REQUIRE(table.send(5, key_of("y:0"), tensor::scalar<float>(1.0f)).ok());
  table.abort(5, aborted_error("node 'bad' failed"));
  REQUIRE(parked.answered());
  REQUIRE_FALSE(parked.value().ok());
  CHECK(parked.value().error().error_code() == code::aborted);
  CHECK_THAT(parked.value().error().message(), Catch::Contains("'bad'"));
  CHECK_FALSE(other_step.answered());
  CHECK(table.num_waiting() == 1);  // step 6's Recv; step 5's tensor was dropped
  CHECK(table.is_aborted(5));
  CHECK_FALSE(table.is_aborted(6));

  // Late traffic: a tensor is dropped, a Recv fails at once with the step's reason.
  REQUIRE(table.send(5, key_of("z:0"), tensor::scalar<float>(1.0f)).ok());
  CHECK(table.num_waiting() == 1);
  answer late;
  table.recv(5, key_of("y:0"), late.make());
  REQUIRE(late.answered());
  REQUIRE_FALSE(late.value().ok());
  CHECK_THAT(late.value().error().message(), Catch::Contains("'bad'"));
}

TEST_CASE("a second tensor for one transfer is an internal error naming the key; the first stays") {
  rendezvous_table table;
  REQUIRE(table.send(1, key_of("x:0"), tensor::scalar<float>(1.0f)).ok());
  status second = table.send(1, key_of("x:0"), tensor::scalar<float>(2.0f));
  REQUIRE_FALSE(second.ok());
  CHECK(second.error_code() == code::internal);
  CHECK_THAT(second.message(), Catch::Contains(key_of("x:0")->printed()) && Catch::Contains("step 1"));
  answer a;
  table.recv(1, key_of("x:0"), a.make());
  REQUIRE(a.value().ok());
  CHECK(a.value()->scalar_value<float>() == 1.0f);
}

TEST_CASE("tensors kept for Recvs are bounded in bytes: one beyond the bound is refused, naming the device") {
  rendezvous_table table(/*limit_bytes=*/100);
  REQUIRE(table.send(1, key_of("x:0"), tensor(dtype::float32, {20})).ok());  // 80 bytes
  CHECK(table.bytes_waiting() == 80);
  status over = table.send(1, key_of("y:0"), tensor(dtype::float32, {10}), "device d");
  REQUIRE_FALSE(over.ok());
  CHECK(over.error_code() == code::resource_exhausted);
  CHECK_THAT(over.message(), Catch::Contains("device d") && Catch::Contains("bound of 100 bytes"));
  CHECK(table.num_waiting() == 1);  // the refused tensor is not kept
  answer a;
  table.recv(1, key_of("x:0"), a.make());  // receiving frees its bytes
  CHECK(table.bytes_waiting() == 0);
  REQUIRE(table.send(1, key_of("y:0"), tensor(dtype::float32, {10})).ok());
}

TEST_CASE("a step that ended here drops its leftovers and refuses later tensors") {
  rendezvous_table table;
  REQUIRE(table.send(3, key_of("x:0"), tensor::scalar<float>(1.0f)).ok());
  REQUIRE(table.send(4, key_of("x:0"), tensor::scalar<float>(1.0f)).ok());
  table.close(3);
  CHECK(table.num_waiting() == 1);  // step 4's
  REQUIRE(table.send(3, key_of("y:0"), tensor::scalar<float>(1.0f)).ok());  // late: dropped
  CHECK(table.num_waiting() == 1);
  CHECK(table.bytes_waiting() == 4);
}

TEST_CASE("a sweep drops old tensors of steps not running here, and nothing else") {
  rendezvous_table table;
  answer parked;
  table.recv(7, key_of("w:0"), parked.make());                            // a waiting Recv: kept
  REQUIRE(table.send(5, key_of("x:0"), tensor::scalar<float>(1.0f)).ok());  // an orphan
  REQUIRE(table.send(6, key_of("x:0"), tensor::scalar<float>(1.0f)).ok());  // its step runs here
  const auto later = rendezvous_table::clock::now() + std::chrono::hours(1);
  CHECK(table.sweep(later, [](std::int64_t step) { return step == 6; }) == 1);
  CHECK(table.num_waiting() == 2);
  CHECK(table.sweep(rendezvous_table::clock::now() - std::chrono::hours(1), [](std::int64_t) { return false; }) == 0);
  CHECK_FALSE(parked.answered());
}

TEST_CASE("the table remembers a bounded number of aborted steps, oldest forgotten first") {
  rendezvous_table table;
  for (std::int64_t step = 0; step <= 4096; ++step) table.abort(step, aborted_error("step ", step));
  CHECK_FALSE(table.is_aborted(0));
  CHECK(table.is_aborted(1));
  CHECK(table.is_aborted(4096));
}

TEST_CASE("a cancelled Recv fails naming the tensor and its sender; a later cancel does nothing") {
  rendezvous_table table;
  answer parked;
  table.recv(3, key_of("x:0"), parked.make());
  table.cancel(3, key_of("x:0"));
  REQUIRE(parked.answered());
  REQUIRE_FALSE(parked.value().ok());
  CHECK(parked.value().error().error_code() == code::cancelled);
  CHECK_THAT(parked.value().error().message(), Catch::Contains("x:0") && Catch::Contains(k_ps));
  CHECK(table.num_waiting() == 0);

  answer received;
  REQUIRE(table.send(4, key_of("x:0"), tensor::scalar<float>(1.0f)).ok());
  table.recv(4, key_of("x:0"), received.make());
  table.cancel(4, key_of("x:0"));  // already answered: stays answered with the tensor
  REQUIRE(received.value().ok());
}

TEST_CASE("a reply may re-enter the table that answers it") {
  // As inside a device actor: an arrival completes a Recv, whose step then runs another
  // Recv that asks the same table directly, and finds its tensor already there.
  rendezvous_table table;
  answer inner;
  bool outer_answered = false;
  REQUIRE(table.send(1, key_of("y:0"), tensor::scalar<float>(2.0f)).ok());
  table.recv(1, key_of("x:0"), reply<tensor>([&](result<tensor> r) {
                                   outer_answered = r.ok();
                                   table.recv(1, key_of("y:0"), inner.make());
                                   table.recv(1, key_of("z:0"), reply<tensor>([](result<tensor>) {}, "device test"));
                                 },
                                 "device test"));
  REQUIRE(table.send(1, key_of("x:0"), tensor::scalar<float>(1.0f)).ok());
  CHECK(outer_answered);
  REQUIRE(inner.answered());
  CHECK(inner.value()->scalar_value<float>() == 2.0f);
  CHECK(table.num_waiting() == 1);  // z:0 parked from inside the reply

  // And an abort whose failed Recv asks again is refused, not parked.
  answer refused;
  table.abort(1, aborted_error("step 1 aborted"));
  table.recv(1, key_of("z:0"), refused.make());
  CHECK(refused.answered());
  CHECK(table.num_waiting() == 0);
}

TEST_CASE("a Recv still parked when its table goes is answered unavailable, naming the peer") {
  answer parked;
  {
    rendezvous_table table;
    table.recv(1, key_of("x:0"), parked.make());
  }
  REQUIRE(parked.answered());
  REQUIRE_FALSE(parked.value().ok());
  CHECK(parked.value().error().error_code() == code::unavailable);
  CHECK_THAT(parked.value().error().message(), Catch::Contains("device test"));
}

TEST_CASE("the active table is visible only to its own device, inside its scope") {
  rendezvous_table outer_table, inner_table;
  // Stand-ins for two devices: the table compares their addresses only.
  const auto* device_a = reinterpret_cast<const actors::runtime_device*>(&outer_table);
  const auto* device_b = reinterpret_cast<const actors::runtime_device*>(&inner_table);
  CHECK(rendezvous_table::active(device_a) == nullptr);
  {
    rendezvous_table::active_scope a(outer_table, device_a);
    CHECK(rendezvous_table::active(device_a) == &outer_table);
    CHECK(rendezvous_table::active(device_b) == nullptr);
    CHECK(rendezvous_table::active(nullptr) == nullptr);
    {
      rendezvous_table::active_scope b(inner_table, device_b);
      CHECK(rendezvous_table::active(device_b) == &inner_table);
      CHECK(rendezvous_table::active(device_a) == nullptr);
    }
    CHECK(rendezvous_table::active(device_a) == &outer_table);
  }
  CHECK(rendezvous_table::active(device_a) == nullptr);
}

TEST_CASE("a table shut when its device goes fails its parked Recvs, drops its tensors and refuses later traffic") {
  rendezvous_table table;
  answer parked;
  table.recv(1, key_of("x:0"), parked.make());
  REQUIRE(table.send(2, key_of("y:0"), tensor::scalar<float>(1.0f)).ok());
  table.shut(unavailable_error("device d went down"));
  REQUIRE(parked.answered());
  REQUIRE_FALSE(parked.value().ok());
  CHECK(parked.value().error().message() == "device d went down");
  CHECK(table.num_waiting() == 0);
  CHECK(table.bytes_waiting() == 0);
  CHECK(table.is_aborted(3));
  CHECK(table.send(3, key_of("z:0"), tensor::scalar<float>(2.0f)).ok());  // dropped
  CHECK(table.num_waiting() == 0);
  answer late;
  table.recv(3, key_of("z:0"), late.make());
  REQUIRE(late.answered());
  CHECK(late.value().error().error_code() == code::unavailable);
}

TEST_CASE("a sweep is armed once while entries wait, and stays armed only while they do") {
  rendezvous_table table;
  CHECK_FALSE(table.arm_sweep());  // nothing waits
  REQUIRE(table.send(1, key_of("x:0"), tensor::scalar<float>(1.0f)).ok());
  CHECK(table.arm_sweep());
  CHECK_FALSE(table.arm_sweep());  // one is due already
  CHECK(table.keep_sweeping());    // x:0 still waits
  answer a;
  table.recv(1, key_of("x:0"), a.make());
  CHECK(a.answered());
  CHECK_FALSE(table.keep_sweeping());
  REQUIRE(table.send(2, key_of("x:0"), tensor::scalar<float>(1.0f)).ok());
  CHECK(table.arm_sweep());  // armed again by the next arrival
}

TEST_CASE("threads share a table: every transfer meets its Recv once, whichever end comes first") {
  // Four threads deliver (as links' readers do) while four ask (as a device's actor and
  // its kernels do), each in its own shuffled order; every Recv gets its own tensor.
  constexpr int k_threads = 4, k_per_thread = 2000;
  rendezvous_table table;
  std::vector<transfer_key_ptr> keys;
  for (int i = 0; i < k_threads * k_per_thread; ++i) keys.push_back(key_of("t" + std::to_string(i) + ":0"));
  std::vector<std::atomic<int>> got(keys.size());
  std::atomic<int> wrong{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2 * k_threads; ++t) {
    threads.emplace_back([&, t] {
      const bool sender = t < k_threads;
      std::vector<int> order;
      for (int i = 0; i < k_per_thread; ++i) order.push_back((t % k_threads) * k_per_thread + i);
      std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(20161102 + t)));
      for (int i : order) {
        if (sender) {
          if (!table.send(1, keys[static_cast<std::size_t>(i)], tensor::scalar<std::int32_t>(i)).ok()) ++refused;
          continue;
        }
        table.recv(1, keys[static_cast<std::size_t>(i)], reply<tensor>([&, i](result<tensor> r) {
                     if (!r.ok() || r->scalar_value<std::int32_t>() != i) ++wrong;
                     ++got[static_cast<std::size_t>(i)];
                   },
                                                                       "device test"));
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(refused == 0);
  CHECK(wrong == 0);
  int once = 0;
  for (auto& g : got) once += g.load() == 1 ? 1 : 0;
  CHECK(once == k_threads * k_per_thread);
  CHECK(table.num_waiting() == 0);
  CHECK(table.bytes_waiting() == 0);
}

namespace {

// Memory whose release asks `table` something (as a tensor in a peer's shared memory
// writes a release to its link when freed). The ask runs on a thread of its own: a
// release under the table's lock shows as an ask that did not finish in 2 s, not a hang.
struct asking_memory final : troupe::external_memory {
  rendezvous_table* table = nullptr;
  std::atomic<int> released{0}, under_lock{0};
  std::vector<std::thread> asks;  // joined by the test once the table is free
  void release(void* data, std::size_t) noexcept override {
    auto answered = std::make_shared<std::promise<void>>();
    auto done = answered->get_future();
    asks.emplace_back([t = table, answered] {
      t->num_waiting();
      answered->set_value();
    });
    if (done.wait_for(std::chrono::seconds(2)) != std::future_status::ready) ++under_lock;
    ::operator delete(data);
    ++released;
  }
  bool host_accessible() const override { return true; }
  tensor make() { return tensor(dtype::float32, {4}, buffer::adopt(::operator new(16), 16, this)); }
};

}  // namespace

TEST_CASE("tensors the table drops are freed outside its lock") {
  rendezvous_table table;
  asking_memory memory;
  memory.table = &table;
  REQUIRE(table.send(1, key_of("a:0"), memory.make()).ok());
  table.abort(1, aborted_error("step 1 aborted"));  // abort
  REQUIRE(table.send(2, key_of("a:0"), memory.make()).ok());
  table.close(2);  // a step that ended with a tensor left
  REQUIRE(table.send(3, key_of("a:0"), memory.make()).ok());
  CHECK(table.sweep(rendezvous_table::clock::now() + std::chrono::seconds(1), [](std::int64_t) { return false; }) == 1);
  REQUIRE(table.send(4, key_of("a:0"), memory.make()).ok());
  table.shut(unavailable_error("device d went down"));
  for (auto& ask : memory.asks) ask.join();
  CHECK(memory.released == 4);
  CHECK(memory.under_lock == 0);
}
