// Queue actors as conversations: enqueue and dequeue in either order, back-pressure,
// batches, close and cancel, the shuffle and padding queues, type errors, many threads at
// once, the actor dying with requests parked; then the queue ops as kernels in an
// executable, including a step abort that cancels a parked dequeue, and in a session.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "actors/executor.h"
#include "tests/actors/answer.h"
#include "actors/queue.h"
#include "actors/runtime_device.h"
#include "actors/runtime_kernels.h"
#include "actors/session.h"
#include "core/phantom.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/ops.h"

using namespace troupe;
using namespace std::chrono_literals;
using actors::queue_kind;
using actors::queue_options;
using testing::answer;
using testing::test_config;

namespace {

using status_answer = answer<actors::done_t>;
using element_answer = answer<std::vector<tensor>>;

// An actor system for one test; every queue made through it is sent an exit before the
// system goes away.
struct system_fixture {
  caf::actor_system sys{test_config()};
  std::vector<caf::actor> spawned;

  std::shared_ptr<actors::queue_resource> make(queue_options o) {
    auto q = actors::make_queue(sys, std::move(o));
    REQUIRE(q.ok());
    spawned.push_back((*q)->actor());
    return *q;
  }
  ~system_fixture() {
    for (auto& a : spawned) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
};

queue_options fifo(std::int64_t capacity, std::vector<partial_shape> shapes = {{2}},
                   std::vector<dtype> types = {dtype::float32}) {
  queue_options o;
  o.name = std::string(1, 'q');  // not = "q": g++ 12 warns falsely (-Wrestrict) on that
  o.kind = queue_kind::fifo;
  o.types = std::move(types);
  o.shapes = std::move(shapes);
  o.capacity = capacity;
  return o;
}

tensor vec(std::vector<float> v) { return tensor::from_vector<float>(v); }
tensor mat(std::vector<float> v, tensor_shape s) { return tensor::from_vector<float>(v, std::move(s)); }

// Enqueues one element and waits for the answer.
status put(actors::queue_resource& q, std::vector<tensor> element) {
  status_answer a;
  q.enqueue(std::move(element), a.reply());
  return a.wait().to_status();
}

result<std::vector<tensor>> take(actors::queue_resource& q) {
  element_answer a;
  q.dequeue(a.reply());
  return a.wait();
}

std::int64_t size_of(actors::queue_resource& q) {
  answer<std::int64_t> a;
  q.size(a.reply());
  auto r = a.wait();
  REQUIRE(r.ok());
  return *r;
}


}  // namespace

TEST_CASE("a queue answers an enqueue then a dequeue, in order", "[actors][queue]") {
  system_fixture f;
  auto q = f.make(fifo(10));
  REQUIRE(put(*q, {vec({1, 2})}).ok());
  REQUIRE(put(*q, {vec({3, 4})}).ok());
  CHECK(size_of(*q) == 2);
  auto a = take(*q);
  REQUIRE(a.ok());
  REQUIRE(a->size() == 1);
  CHECK(a->at(0).equals(vec({1, 2})));
  auto b = take(*q);
  REQUIRE(b.ok());
  CHECK(b->at(0).equals(vec({3, 4})));
  CHECK(size_of(*q) == 0);
}

TEST_CASE("a queue batches and splits phantoms (a shape-only simulation's) as phantoms", "[actors][queue]") {
  system_fixture f;
  auto q = f.make(fifo(10, {{4096}}));
  REQUIRE(put(*q, {phantom_tensor(dtype::float32, {4096})}).ok());
  REQUIRE(put(*q, {tensor::zeros(dtype::float32, {4096})}).ok());
  element_answer two;
  q->dequeue_many(2, two.reply());
  auto batch = two.wait();
  REQUIRE(batch.ok());
  CHECK(is_phantom(batch->at(0)));  // a real element beside a phantom: a phantom batch
  CHECK(batch->at(0).shape() == tensor_shape({2, 4096}));
  status_answer many;
  q->enqueue_many({phantom_tensor(dtype::float32, {3, 4096})}, many.reply());
  REQUIRE(many.wait().ok());
  auto one = take(*q);
  REQUIRE(one.ok());
  CHECK(is_phantom(one->at(0)));
  CHECK(one->at(0).shape() == tensor_shape({4096}));
}

TEST_CASE("a dequeue before any enqueue is parked, then woken", "[actors][queue]") {
  system_fixture f;
  auto q = f.make(fifo(10));
  element_answer first, second;
  q->dequeue(first.reply());
  q->dequeue(second.reply());
  CHECK_FALSE(first.arrived());
  REQUIRE(put(*q, {vec({5, 6})}).ok());
  auto r = first.wait();
  REQUIRE(r.ok());
  CHECK(r->at(0).equals(vec({5, 6})));
  CHECK_FALSE(second.arrived());  // served in arrival order: the second still waits
  REQUIRE(put(*q, {vec({7, 8})}).ok());
  auto s = second.wait();
  REQUIRE(s.ok());
  CHECK(s->at(0).equals(vec({7, 8})));
}

TEST_CASE("a full queue parks enqueues until a dequeue makes room", "[actors][queue]") {
  system_fixture f;
  auto q = f.make(fifo(2));
  REQUIRE(put(*q, {vec({1, 1})}).ok());
  REQUIRE(put(*q, {vec({2, 2})}).ok());
  status_answer third, fourth;
  q->enqueue({vec({3, 3})}, third.reply());
  q->enqueue({vec({4, 4})}, fourth.reply());
  CHECK_FALSE(third.arrived());
  CHECK(size_of(*q) == 2);
  auto a = take(*q);
  REQUIRE(a.ok());
  CHECK(a->at(0).equals(vec({1, 1})));
  REQUIRE(third.wait().ok());
  CHECK_FALSE(fourth.arrived());
  for (float v : {2.0f, 3.0f, 4.0f}) {
    auto r = take(*q);
    REQUIRE(r.ok());
    CHECK(r->at(0).equals(vec({v, v})));
  }
  REQUIRE(fourth.wait().ok());
  CHECK(size_of(*q) == 0);
}

TEST_CASE("DequeueMany gathers elements across several enqueues, beyond the capacity", "[actors][queue]") {
  system_fixture f;
  auto q = f.make(fifo(3));
  element_answer many;
  q->dequeue_many(5, many.reply());
  status_answer batch;
  q->enqueue_many({mat({1, 1, 2, 2, 3, 3}, {3, 2})}, batch.reply());
  REQUIRE(batch.wait().ok());
  CHECK_FALSE(many.arrived());
  REQUIRE(put(*q, {vec({4, 4})}).ok());
  REQUIRE(put(*q, {vec({5, 5})}).ok());
  auto r = many.wait();
  REQUIRE(r.ok());
  CHECK(r->at(0).equals(mat({1, 1, 2, 2, 3, 3, 4, 4, 5, 5}, {5, 2})));
  CHECK(size_of(*q) == 0);

  SECTION("one whole enqueued batch comes back without a copy") {
    tensor whole = mat({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
    status_answer in;
    q->enqueue_many({whole}, in.reply());
    element_answer out;
    q->dequeue_many(4, out.reply());
    REQUIRE(in.wait().ok());
    auto o = out.wait();
    REQUIRE(o.ok());
    CHECK(o->at(0).shares_buffer_with(whole));
    CHECK(o->at(0).equals(whole));
  }
  SECTION("DequeueMany(0) answers at once with an empty batch") {
    element_answer none;
    q->dequeue_many(0, none.reply());
    auto o = none.wait();
    REQUIRE(o.ok());
    CHECK(o->at(0).shape() == tensor_shape({0, 2}));
  }
}

TEST_CASE("a large DequeueMany is stacked on the compute pool", "[actors][queue]") {
  compute_pool pool(2);  // outlives the actor system
  system_fixture f;
  queue_options o = fifo(4, {partial_shape{100000}});
  o.pool = &pool;
  auto q = f.make(o);
  std::vector<float> a(100000), b(100000);
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i);
    b[i] = -static_cast<float>(i);
  }
  REQUIRE(put(*q, {vec(a)}).ok());
  REQUIRE(put(*q, {vec(b)}).ok());
  element_answer many;
  q->dequeue_many(2, many.reply());
  auto r = many.wait();
  REQUIRE(r.ok());
  std::vector<float> both = a;
  both.insert(both.end(), b.begin(), b.end());
  CHECK(r->at(0).equals(mat(both, {2, 100000})));
}

TEST_CASE("an EnqueueMany larger than the capacity proceeds in parts, in order", "[actors][queue]") {
  system_fixture f;
  auto q = f.make(fifo(2, {partial_shape::scalar()}));
  status_answer batch, after;
  q->enqueue_many({vec({1, 2, 3, 4, 5})}, batch.reply());
  q->enqueue({tensor::scalar<float>(6)}, after.reply());
  CHECK_FALSE(batch.arrived());
  std::vector<float> seen;
  for (int i = 0; i < 6; ++i) {
    auto r = take(*q);
    REQUIRE(r.ok());
    seen.push_back(r->at(0).scalar_value<float>());
    if (i == 2) CHECK(batch.wait().ok());  // its last element went in when 1 left
  }
  CHECK(seen == std::vector<float>{1, 2, 3, 4, 5, 6});
  REQUIRE(after.wait().ok());
}

TEST_CASE("closing a queue", "[actors][queue]") {
  system_fixture f;
  auto q = f.make(fifo(10));

  SECTION("DequeueUpTo returns what is left, then OutOfRange") {
    for (float v : {1.0f, 2.0f, 3.0f}) REQUIRE(put(*q, {vec({v, v})}).ok());
    status_answer closed;
    q->close(false, closed.reply());
    REQUIRE(closed.wait().ok());
    element_answer up_to;
    q->dequeue_up_to(5, up_to.reply());
    auto r = up_to.wait();
    REQUIRE(r.ok());
    CHECK(r->at(0).equals(mat({1, 1, 2, 2, 3, 3}, {3, 2})));
    element_answer empty;
    q->dequeue_up_to(5, empty.reply());
    auto e = empty.wait();
    REQUIRE_FALSE(e.ok());
    CHECK(e.error().error_code() == code::out_of_range);
  }
  SECTION("DequeueMany with too few elements fails and leaves them in the queue") {
    REQUIRE(put(*q, {vec({1, 1})}).ok());
    status_answer closed;
    q->close(false, closed.reply());
    REQUIRE(closed.wait().ok());
    element_answer many;
    q->dequeue_many(2, many.reply());
    auto r = many.wait();
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().error_code() == code::out_of_range);
    CHECK(r.error().message() ==
          "queue 'q' is closed and has insufficient elements (requested 2, current size 1)");
    CHECK(size_of(*q) == 1);
    auto one = take(*q);
    REQUIRE(one.ok());
    CHECK(one->at(0).equals(vec({1, 1})));
  }
  SECTION("close wakes parked dequeues with OutOfRange, giving back what they took") {
    element_answer many, one;
    q->dequeue_many(3, many.reply());
    q->dequeue(one.reply());
    REQUIRE(put(*q, {vec({9, 9})}).ok());  // taken by the waiting DequeueMany
    CHECK(size_of(*q) == 0);
    CHECK_FALSE(many.arrived());
    status_answer closed;
    q->close(false, closed.reply());
    REQUIRE(closed.wait().ok());
    auto r = many.wait();
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().error_code() == code::out_of_range);
    CHECK(r.error().message() ==
          "queue 'q' is closed and has insufficient elements (requested 3, current size 1)");
    auto o = one.wait();  // the element given back serves the next dequeue
    REQUIRE(o.ok());
    CHECK(o->at(0).equals(vec({9, 9})));
    auto after = take(*q);
    REQUIRE_FALSE(after.ok());
    CHECK(after.error().error_code() == code::out_of_range);
  }
  SECTION("enqueues after close fail with cancelled; so does a second close") {
    status_answer closed;
    q->close(false, closed.reply());
    REQUIRE(closed.wait().ok());
    status s = put(*q, {vec({1, 1})});
    CHECK(s.error_code() == code::cancelled);
    CHECK(s.message() == "queue 'q' is closed");
    status_answer again;
    q->close(false, again.reply());
    auto a = again.wait();
    REQUIRE_FALSE(a.ok());
    CHECK(a.error().error_code() == code::cancelled);
  }
}

TEST_CASE("a close waits behind the enqueues parked before it", "[actors][queue]") {
  system_fixture f;
  auto q = f.make(fifo(1));
  REQUIRE(put(*q, {vec({1, 1})}).ok());
  status_answer parked, closed, late;
  q->enqueue({vec({2, 2})}, parked.reply());
  q->close(false, closed.reply());
  q->enqueue({vec({3, 3})}, late.reply());
  CHECK_FALSE(closed.arrived());
  auto a = take(*q);
  REQUIRE(a.ok());
  REQUIRE(parked.wait().ok());
  REQUIRE(closed.wait().ok());
  auto l = late.wait();
  REQUIRE_FALSE(l.ok());
  CHECK(l.error().error_code() == code::cancelled);
  auto b = take(*q);
  REQUIRE(b.ok());
  CHECK(b->at(0).equals(vec({2, 2})));
  CHECK(take(*q).error().error_code() == code::out_of_range);
}

TEST_CASE("close with cancel_pending_enqueues fails the parked enqueues", "[actors][queue]") {
  system_fixture f;
  auto q = f.make(fifo(1));
  REQUIRE(put(*q, {vec({1, 1})}).ok());
  status_answer one, many;
  q->enqueue({vec({2, 2})}, one.reply());
  q->enqueue_many({mat({3, 3, 4, 4}, {2, 2})}, many.reply());
  CHECK_FALSE(one.arrived());
  status_answer closed;
  q->close(true, closed.reply());
  REQUIRE(closed.wait().ok());
  CHECK(one.wait().error().error_code() == code::cancelled);
  CHECK(many.wait().error().error_code() == code::cancelled);
  auto a = take(*q);
  REQUIRE(a.ok());
  CHECK(a->at(0).equals(vec({1, 1})));
  CHECK(take(*q).error().error_code() == code::out_of_range);
}

TEST_CASE("cancel(request_id) fails that parked request and nothing else", "[actors][queue]") {
  system_fixture f;
  auto q = f.make(fifo(2));

  SECTION("a parked dequeue") {
    element_answer cancelled, other;
    std::uint64_t id = q->dequeue(cancelled.reply());
    q->dequeue(other.reply());
    q->cancel(id);
    auto r = cancelled.wait();
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().error_code() == code::cancelled);
    REQUIRE(put(*q, {vec({1, 1})}).ok());
    auto o = other.wait();
    REQUIRE(o.ok());
    CHECK(o->at(0).equals(vec({1, 1})));
  }
  SECTION("a DequeueMany that had taken elements gives them back, in order") {
    element_answer many;
    std::uint64_t id = q->dequeue_many(3, many.reply());
    REQUIRE(put(*q, {vec({1, 1})}).ok());
    REQUIRE(put(*q, {vec({2, 2})}).ok());
    CHECK(size_of(*q) == 0);
    q->cancel(id);
    CHECK(many.wait().error().error_code() == code::cancelled);
    CHECK(size_of(*q) == 2);
    CHECK(take(*q)->at(0).equals(vec({1, 1})));
    CHECK(take(*q)->at(0).equals(vec({2, 2})));
  }
  SECTION("a parked enqueue; the one behind it proceeds") {
    REQUIRE(put(*q, {vec({1, 1})}).ok());
    REQUIRE(put(*q, {vec({2, 2})}).ok());
    status_answer cancelled, behind;
    std::uint64_t id = q->enqueue({vec({3, 3})}, cancelled.reply());
    q->enqueue({vec({4, 4})}, behind.reply());
    q->cancel(id);
    CHECK(cancelled.wait().error().error_code() == code::cancelled);
    q->cancel(id);  // no longer parked: nothing happens
    CHECK(take(*q)->at(0).equals(vec({1, 1})));
    REQUIRE(behind.wait().ok());
    CHECK(take(*q)->at(0).equals(vec({2, 2})));
    CHECK(take(*q)->at(0).equals(vec({4, 4})));
  }
  SECTION("a timeout fails a parked request with deadline_exceeded") {
    element_answer timed;
    q->dequeue(timed.reply(), 30);
    auto r = timed.wait();
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().error_code() == code::deadline_exceeded);
    REQUIRE(put(*q, {vec({1, 1})}).ok());
    CHECK(size_of(*q) == 1);  // the timed-out dequeue took nothing
  }
}

TEST_CASE("a RandomShuffleQueue keeps min_after_dequeue elements until closed", "[actors][queue]") {
  system_fixture f;
  queue_options o = fifo(10, {partial_shape::scalar()}, {dtype::int32});
  o.kind = queue_kind::random_shuffle;
  o.min_after_dequeue = 3;
  o.seed = 1;
  o.seed2 = 2;
  auto q = f.make(o);
  for (int i = 0; i < 3; ++i) REQUIRE(put(*q, {tensor::scalar<std::int32_t>(i)}).ok());
  element_answer first;
  q->dequeue(first.reply());
  CHECK_FALSE(first.arrived());  // size 3 is not more than min_after_dequeue
  REQUIRE(put(*q, {tensor::scalar<std::int32_t>(3)}).ok());
  REQUIRE(first.wait().ok());
  CHECK(size_of(*q) == 3);
  status_answer closed;
  q->close(false, closed.reply());
  REQUIRE(closed.wait().ok());
  element_answer rest;
  q->dequeue_up_to(10, rest.reply());
  auto r = rest.wait();
  REQUIRE(r.ok());
  CHECK(r->at(0).shape() == tensor_shape({3}));
}

TEST_CASE("a RandomShuffleQueue is deterministic for its seeds and dequeues a permutation", "[actors][queue]") {
  system_fixture f;
  auto drain = [&](std::uint64_t seed, std::uint64_t seed2) {
    queue_options o = fifo(-1, {partial_shape::scalar()}, {dtype::int32});
    o.kind = queue_kind::random_shuffle;
    o.seed = seed;
    o.seed2 = seed2;
    auto q = f.make(o);
    std::vector<std::int32_t> all(100);
    for (int i = 0; i < 100; ++i) all[static_cast<std::size_t>(i)] = i;
    status_answer in, closed;
    q->enqueue_many({tensor::from_vector<std::int32_t>(all)}, in.reply());
    q->close(false, closed.reply());
    REQUIRE(in.wait().ok());
    REQUIRE(closed.wait().ok());
    std::vector<std::int32_t> order;
    for (int i = 0; i < 60; ++i) {  // one at a time, then the rest as a batch
      auto r = take(*q);
      REQUIRE(r.ok());
      order.push_back(r->at(0).scalar_value<std::int32_t>());
    }
    element_answer rest;
    q->dequeue_many(40, rest.reply());
    auto r = rest.wait();
    REQUIRE(r.ok());
    for (std::int32_t v : r->at(0).flat<std::int32_t>()) order.push_back(v);
    return order;
  };
  auto a = drain(7, 11);
  auto b = drain(7, 11);
  auto c = drain(8, 11);
  CHECK(a == b);
  CHECK(a != c);
  std::vector<std::int32_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::int32_t> expected(100);
  for (int i = 0; i < 100; ++i) expected[static_cast<std::size_t>(i)] = i;
  CHECK(sorted == expected);
  CHECK(a != expected);
}

TEST_CASE("a PaddingFIFOQueue pads DequeueMany to the largest element", "[actors][queue]") {
  system_fixture f;
  queue_options o = fifo(10, {partial_shape{-1}, partial_shape::scalar()}, {dtype::float32, dtype::int32});
  o.kind = queue_kind::padding_fifo;
  auto q = f.make(o);
  REQUIRE(put(*q, {vec({1}), tensor::scalar<std::int32_t>(7)}).ok());
  REQUIRE(put(*q, {vec({1, 2, 3}), tensor::scalar<std::int32_t>(8)}).ok());
  REQUIRE(put(*q, {vec({1, 2}), tensor::scalar<std::int32_t>(9)}).ok());
  element_answer many;
  q->dequeue_many(3, many.reply());
  auto r = many.wait();
  REQUIRE(r.ok());
  CHECK(r->at(0).equals(mat({1, 0, 0, 1, 2, 3, 1, 2, 0}, {3, 3})));
  CHECK(r->at(1).equals(tensor::from_vector<std::int32_t>({7, 8, 9})));

  SECTION("in every unknown dimension, and keeps single elements as they are") {
    queue_options o2 = fifo(10, {{-1, 2, -1}});
    o2.name = "q2";
    o2.kind = queue_kind::padding_fifo;
    auto q2 = f.make(o2);
    REQUIRE(put(*q2, {mat({1, 2, 3, 4}, {1, 2, 2})}).ok());
    REQUIRE(put(*q2, {mat({5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {2, 2, 3})}).ok());
    REQUIRE(put(*q2, {mat({17, 18}, {1, 2, 1})}).ok());
    auto first = take(*q2);
    REQUIRE(first.ok());
    CHECK(first->at(0).equals(mat({1, 2, 3, 4}, {1, 2, 2})));
    element_answer two;
    q2->dequeue_many(2, two.reply());
    auto t = two.wait();
    REQUIRE(t.ok());
    CHECK(t->at(0).equals(mat({5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,  //
                               17, 0, 0, 18, 0, 0, 0, 0, 0, 0, 0, 0},
                              {2, 2, 2, 3})));
  }
}

TEST_CASE("enqueues of the wrong dtype or shape fail, naming the queue and the component", "[actors][queue]") {
  system_fixture f;
  auto q = f.make(fifo(10, {partial_shape{2}, partial_shape::scalar()}, {dtype::float32, dtype::int32}));
  auto i32 = tensor::scalar<std::int32_t>(1);

  status s = put(*q, {tensor::from_vector<std::int32_t>({1, 2}), i32});
  CHECK(s.error_code() == code::invalid_argument);
  CHECK(s.message() == "queue 'q': enqueued component 0 has dtype int32 but the queue's component 0 has dtype float");

  s = put(*q, {vec({1, 2, 3}), i32});
  CHECK(s.error_code() == code::invalid_argument);
  CHECK(s.message() == "queue 'q': enqueued component 0 has shape [3] but the queue's component 0 has shape [2]");

  s = put(*q, {vec({1, 2})});
  CHECK(s.error_code() == code::invalid_argument);
  CHECK(s.message().find("has 2 component(s)") != std::string::npos);

  status_answer many;
  q->enqueue_many({mat({1, 2, 3, 4}, {2, 2}), tensor::from_vector<std::int32_t>({1, 2, 3})}, many.reply());
  auto m = many.wait();
  REQUIRE_FALSE(m.ok());
  CHECK(m.error().message().find("disagree on the number of elements") != std::string::npos);

  status_answer bad_elements;
  q->enqueue_many({mat({1, 2, 3, 4, 5, 6}, {2, 3}), tensor::from_vector<std::int32_t>({1, 2})},
                  bad_elements.reply());
  auto b = bad_elements.wait();
  REQUIRE_FALSE(b.ok());
  CHECK(b.error().message() == "queue 'q': enqueued component 0 has shape [2,3] (elements of shape [3]) "
                               "but the queue's component 0 has shape [2]");
  CHECK(size_of(*q) == 0);

  SECTION("a queue without shapes refuses DequeueMany, as TensorFlow does") {
    auto any = f.make(fifo(10, {}));
    element_answer r;
    any->dequeue_many(1, r.reply());
    auto e = r.wait();
    REQUIRE_FALSE(e.ok());
    CHECK(e.error().error_code() == code::invalid_argument);
  }
  SECTION("bad options are refused before anything is spawned") {
    queue_options padding = fifo(10, {});
    padding.kind = queue_kind::padding_fifo;
    CHECK(actors::validate_queue_options(padding).error_code() == code::invalid_argument);
    queue_options shuffle = fifo(10);
    shuffle.kind = queue_kind::random_shuffle;
    shuffle.min_after_dequeue = 10;
    CHECK(actors::validate_queue_options(shuffle).error_code() == code::invalid_argument);
    CHECK(actors::validate_queue_options(fifo(10, {{-1}})).error_code() == code::invalid_argument);
    CHECK_FALSE(actors::make_queue(f.sys, fifo(10, {}, {})).ok());
  }
}

TEST_CASE("many producers and consumers: every element is dequeued exactly once, in FIFO order",
          "[actors][queue]") {
  system_fixture f;
  auto q = f.make(fifo(10, {partial_shape::scalar()}, {dtype::int64}));
  constexpr int k_threads = 4;
  constexpr int k_per_thread = 1000;
  constexpr int k_total = k_threads * k_per_thread;

  std::mutex mutex;
  std::condition_variable cv;
  int enqueued = 0, failures = 0;
  std::vector<std::int64_t> dequeued;  // in the order the queue answered
  auto on_enqueue = [&](result<actors::done_t> r) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!r.ok()) ++failures;
    ++enqueued;
    cv.notify_all();
  };
  auto on_dequeue = [&](result<std::vector<tensor>> r) {
    std::lock_guard<std::mutex> lock(mutex);
    if (r.ok()) {
      dequeued.push_back(r->at(0).scalar_value<std::int64_t>());
    } else {
      ++failures;
    }
    cv.notify_all();
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < k_per_thread; ++i) {
        q->enqueue({tensor::scalar<std::int64_t>(t * k_per_thread + i)}, actors::status_reply(on_enqueue, "q"));
      }
    });
    threads.emplace_back([&] {
      for (int i = 0; i < k_per_thread; ++i) q->dequeue(actors::element_reply(on_dequeue, "q"));
    });
  }
  for (auto& t : threads) t.join();
  {
    std::unique_lock<std::mutex> lock(mutex);
    bool finished = cv.wait_for(lock, 60s, [&] {
      return enqueued == k_total && static_cast<int>(dequeued.size()) + failures >= k_total;
    });
    REQUIRE(finished);
  }
  CHECK(failures == 0);
  std::vector<std::int64_t> sorted = dequeued;
  std::sort(sorted.begin(), sorted.end());
  REQUIRE(sorted.size() == static_cast<std::size_t>(k_total));
  for (int i = 0; i < k_total; ++i) REQUIRE(sorted[static_cast<std::size_t>(i)] == i);
  // Each producer's elements come out in the order it sent them.
  std::vector<std::int64_t> last(k_threads, -1);
  for (std::int64_t v : dequeued) {
    auto producer = static_cast<std::size_t>(v / k_per_thread);
    CHECK(v > last[producer]);
    last[producer] = v;
  }
  CHECK(size_of(*q) == 0);
}

TEST_CASE("a queue actor that dies fails its parked requests with unavailable", "[actors][queue]") {
  system_fixture f;
  auto full = f.make(fifo(1));
  auto empty = f.make(fifo(1));
  REQUIRE(put(*full, {vec({1, 1})}).ok());
  status_answer parked_enqueue;
  element_answer parked_dequeue, parked_many;
  full->enqueue({vec({2, 2})}, parked_enqueue.reply());
  empty->dequeue(parked_dequeue.reply());
  empty->dequeue_many(3, parked_many.reply());
  CHECK_FALSE(parked_dequeue.arrived());
  caf::anon_send_exit(full->actor(), caf::exit_reason::kill);
  caf::anon_send_exit(empty->actor(), caf::exit_reason::user_shutdown);
  auto e = parked_enqueue.wait();
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().error_code() == code::unavailable);
  CHECK(parked_dequeue.wait().error().error_code() == code::unavailable);
  CHECK(parked_many.wait().error().error_code() == code::unavailable);
  // A request sent after the end fails the same way (the dropped message drops its reply).
  element_answer late;
  empty->dequeue(late.reply());
  CHECK(late.wait().error().error_code() == code::unavailable);

  SECTION("a queue ends with its owner") {
    caf::actor owner = f.sys.spawn([](caf::event_based_actor*, int) -> caf::behavior { return {[](int) {}}; }, 0);
    queue_options o = fifo(1);
    o.owner = owner;
    auto owned = f.make(o);
    element_answer waiting;
    owned->dequeue(waiting.reply());
    CHECK_FALSE(waiting.arrived());
    caf::anon_send_exit(owner, caf::exit_reason::user_shutdown);
    CHECK(waiting.wait().error().error_code() == code::unavailable);
  }
}

// ---- The queue ops as kernels in an executable on a runtime_device.

namespace {

struct queue_graph {
  std::shared_ptr<const graph::graph> g;

  std::shared_ptr<const actors::executable> prepare(kernels::device* dev, const std::vector<std::string>& nodes,
                                                    const std::vector<std::string>& feeds,
                                                    const std::vector<std::string>& fetches) const {
    actors::executable_spec spec;
    spec.graph = g;
    spec.device = dev;
    for (const auto& n : nodes) {
      const graph::node* node = g->find(n);
      REQUIRE(node != nullptr);
      spec.nodes.push_back(node->id);
    }
    for (const auto& t : feeds) spec.feeds.push_back(*g->resolve(t));
    for (const auto& t : fetches) spec.fetches.push_back(*g->resolve(t));
    auto exec = actors::executable::create(spec);
    if (!exec.ok()) FAIL(exec.error().to_string());
    return *exec;
  }
};

queue_graph build_queue_graph() {
  auto root = graph::scope::new_root();
  const tf::AttrValue types = graph::attr_value(std::vector<dtype>{dtype::float32});
  auto q = root.with_name("q").add("FIFOQueueV2", {},
                                   {{"component_types", types},
                                    {"shapes", graph::attr_value(std::vector<partial_shape>{partial_shape{2}})},
                                    {"capacity", graph::attr_value(std::int64_t{2})}});
  // Another node naming the same shared queue with another capacity.
  root.with_name("q_other").add("FIFOQueueV2", {},
                                {{"component_types", types},
                                 {"shapes", graph::attr_value(std::vector<partial_shape>{partial_shape{2}})},
                                 {"capacity", graph::attr_value(std::int64_t{3})},
                                 {"shared_name", graph::attr_value("q")}});
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {2});
  root.with_name("enqueue").add("QueueEnqueueV2", {q.out(0), std::vector<graph::output>{x}});
  root.with_name("dequeue").add("QueueDequeueV2", {q.out(0)}, {{"component_types", types}});
  root.with_name("dequeue_timeout")
      .add("QueueDequeueV2", {q.out(0)},
           {{"component_types", types}, {"timeout_ms", graph::attr_value(std::int64_t{30})}});
  auto n = ops::scalar(root.with_name("n"), std::int32_t{2});
  root.with_name("dequeue_many").add("QueueDequeueManyV2", {q.out(0), n}, {{"component_types", types}});
  root.with_name("dequeue_up_to").add("QueueDequeueUpToV2", {q.out(0), n}, {{"component_types", types}});
  root.with_name("size").add("QueueSizeV2", {q.out(0)});
  root.with_name("close").add("QueueCloseV2", {q.out(0)});
  auto g = root.to_graph();
  if (!g.ok()) FAIL(g.error().to_string());
  return {std::make_shared<const graph::graph>(std::move(*g))};
}

// Runs one step with `abort` and waits (with a timeout) for its end.
result<std::vector<tensor>> run_step(const actors::executable& exec, std::vector<tensor> feeds, compute_pool& pool,
                                     kernels::cancellation_manager* abort) {
  auto promise = std::make_shared<std::promise<result<std::vector<tensor>>>>();
  auto future = promise->get_future();
  exec.run(1, std::move(feeds), pool, [promise](result<std::vector<tensor>> r) { promise->set_value(std::move(r)); },
           abort);
  if (future.wait_for(10s) != std::future_status::ready) return deadline_exceeded_error("the step did not end");
  return future.get();
}

}  // namespace

TEST_CASE("queue ops run as kernels in an executable on a runtime device", "[actors][queue]") {
  actors::ensure_runtime_kernels();  // register_queue_kernels into builtin(), once per process
  compute_pool pool(2);  // outlives the actor system (queues may copy on it)
  caf::actor_system sys{test_config()};
  actors::runtime_device dev("/job:localhost/replica:0/task:0/device:CPU:0", "CPU", "/job:localhost/replica:0/task:0", sys,
                             pool);
  queue_graph qg = build_queue_graph();
  auto enqueue = qg.prepare(&dev, {"q", "enqueue"}, {"x"}, {});
  auto dequeue = qg.prepare(&dev, {"q", "dequeue"}, {}, {"dequeue"});
  auto dequeue_many = qg.prepare(&dev, {"q", "n", "dequeue_many"}, {}, {"dequeue_many"});
  auto dequeue_up_to = qg.prepare(&dev, {"q", "n", "dequeue_up_to"}, {}, {"dequeue_up_to"});
  auto size = qg.prepare(&dev, {"q", "size"}, {}, {"size"});
  auto close = qg.prepare(&dev, {"q", "close"}, {}, {});
  auto size_now = [&] {
    auto r = size->run_and_wait(1, {}, pool);
    REQUIRE(r.ok());
    return r->at(0).scalar_value<std::int32_t>();
  };

  CHECK(size_now() == 0);
  REQUIRE(enqueue->run_and_wait(1, {vec({1, 2})}, pool).ok());
  REQUIRE(enqueue->run_and_wait(2, {vec({3, 4})}, pool).ok());
  CHECK(size_now() == 2);
  auto many = dequeue_many->run_and_wait(3, {}, pool);
  REQUIRE(many.ok());
  CHECK(many->at(0).equals(mat({1, 2, 3, 4}, {2, 2})));

  SECTION("an aborted step cancels its parked dequeue, which takes nothing") {
    kernels::cancellation_manager abort;
    auto promise = std::make_shared<std::promise<result<std::vector<tensor>>>>();
    auto future = promise->get_future();
    dequeue->run(4, {}, pool, [promise](result<std::vector<tensor>> r) { promise->set_value(std::move(r)); },
                 &abort);
    CHECK(future.wait_for(50ms) == std::future_status::timeout);  // parked in the queue
    abort.start_cancel();
    REQUIRE(future.wait_for(10s) == std::future_status::ready);
    auto r = future.get();
    REQUIRE_FALSE(r.ok());
    CHECK((r.error().error_code() == code::aborted || r.error().error_code() == code::cancelled));
    REQUIRE(enqueue->run_and_wait(5, {vec({5, 6})}, pool).ok());
    CHECK(size_now() == 1);
    auto d = dequeue->run_and_wait(6, {}, pool);
    REQUIRE(d.ok());
    CHECK(d->at(0).equals(vec({5, 6})));
  }
  SECTION("an aborted step cancels its parked enqueue into a full queue") {
    REQUIRE(enqueue->run_and_wait(4, {vec({1, 1})}, pool).ok());
    REQUIRE(enqueue->run_and_wait(5, {vec({2, 2})}, pool).ok());
    kernels::cancellation_manager abort;
    auto promise = std::make_shared<std::promise<result<std::vector<tensor>>>>();
    auto future = promise->get_future();
    enqueue->run(6, {vec({3, 3})}, pool,
                 [promise](result<std::vector<tensor>> r) { promise->set_value(std::move(r)); }, &abort);
    CHECK(future.wait_for(50ms) == std::future_status::timeout);
    abort.start_cancel();
    REQUIRE(future.wait_for(10s) == std::future_status::ready);
    CHECK_FALSE(future.get().ok());
    CHECK(size_now() == 2);
    auto r = dequeue_many->run_and_wait(7, {}, pool);
    REQUIRE(r.ok());
    CHECK(r->at(0).equals(mat({1, 1, 2, 2}, {2, 2})));
  }
  SECTION("timeout_ms fails a parked dequeue with deadline_exceeded") {
    auto timed = qg.prepare(&dev, {"q", "dequeue_timeout"}, {}, {"dequeue_timeout"});
    auto r = run_step(*timed, {}, pool, nullptr);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().error_code() == code::deadline_exceeded);
    CHECK(r.error().message().find("node 'dequeue_timeout'") != std::string::npos);
  }
  SECTION("after close, DequeueUpTo drains and Dequeue fails with OutOfRange naming the node") {
    REQUIRE(enqueue->run_and_wait(4, {vec({7, 8})}, pool).ok());
    REQUIRE(close->run_and_wait(5, {}, pool).ok());
    auto up_to = dequeue_up_to->run_and_wait(6, {}, pool);
    REQUIRE(up_to.ok());
    CHECK(up_to->at(0).equals(mat({7, 8}, {1, 2})));
    auto r = dequeue->run_and_wait(7, {}, pool);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().error_code() == code::out_of_range);
    CHECK(r.error().message().find("node 'dequeue'") != std::string::npos);
    CHECK(r.error().message().find("queue 'q' is closed and has insufficient elements") != std::string::npos);
    auto e = enqueue->run_and_wait(8, {vec({9, 9})}, pool);
    REQUIRE_FALSE(e.ok());
    CHECK(e.error().error_code() == code::cancelled);
  }
  SECTION("another node naming the same shared queue must agree with it") {
    auto other = qg.prepare(&dev, {"q_other"}, {}, {"q_other"});
    auto r = other->run_and_wait(4, {}, pool);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message().find("has capacity 2 but the requested capacity is 3") != std::string::npos);
  }
  SECTION("a queue op outside the actor runtime fails to build, saying why") {
    actors::executable_spec spec;
    spec.graph = qg.g;
    spec.nodes = {qg.g->find("q")->id};
    auto exec = actors::executable::create(spec);
    REQUIRE_FALSE(exec.ok());
    CHECK(exec.error().error_code() == code::failed_precondition);
    CHECK(exec.error().message().find("actor runtime") != std::string::npos);
  }

  for (const auto& [key, r] : dev.resources().list()) {
    if (auto* q = dynamic_cast<actors::queue_resource*>(r.get())) {
      caf::anon_send_exit(q->actor(), caf::exit_reason::user_shutdown);
    }
  }
  dev.resources().clear();
}

TEST_CASE("a session feeds a queue in one step and drains it in others", "[actors][queue]") {
  auto root = graph::scope::new_root();
  const tf::AttrValue types = graph::attr_value(std::vector<dtype>{dtype::float32});
  auto q = root.with_name("q").add("FIFOQueueV2", {},
                                   {{"component_types", types},
                                    {"shapes", graph::attr_value(std::vector<partial_shape>{partial_shape{2}})},
                                    {"capacity", graph::attr_value(std::int64_t{2})}});
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {2});
  root.with_name("enqueue").add("QueueEnqueueV2", {q.out(0), std::vector<graph::output>{x}});
  auto n = ops::scalar(root.with_name("n"), std::int32_t{3});
  root.with_name("dequeue_many").add("QueueDequeueManyV2", {q.out(0), n}, {{"component_types", types}});
  root.with_name("close").add("QueueCloseV2", {q.out(0)});
  auto g = root.to_graph();
  REQUIRE(g.ok());
  auto s = actors::session::create(std::move(*g));
  REQUIRE(s.ok());

  auto promise = std::make_shared<std::promise<result<std::vector<tensor>>>>();
  auto future = promise->get_future();
  (*s)->run_async({}, {"dequeue_many"}, {}, [promise](result<std::vector<tensor>> r) { promise->set_value(std::move(r)); });
  CHECK(future.wait_for(50ms) == std::future_status::timeout);  // waits for 3, more than fit

  for (float v : {1.0f, 2.0f, 3.0f}) REQUIRE((*s)->run({{"x", vec({v, v})}}, {}, {"enqueue"}).ok());
  REQUIRE(future.wait_for(10s) == std::future_status::ready);
  auto batch = future.get();
  REQUIRE(batch.ok());
  CHECK(batch->at(0).equals(mat({1, 1, 2, 2, 3, 3}, {3, 2})));

  REQUIRE((*s)->run({{"x", vec({4, 4})}}, {}, {"enqueue"}).ok());
  REQUIRE((*s)->run({}, {}, {"close"}).ok());
  auto r = (*s)->run({}, {"dequeue_many"});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().error_code() == code::out_of_range);
  CHECK(r.error().message().find("queue 'q' is closed and has insufficient elements (requested 3, current size 1)") !=
        std::string::npos);
}
