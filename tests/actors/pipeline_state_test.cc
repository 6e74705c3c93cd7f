// Input pipeline state for checkpoints: QueueSaveStateV2 / QueueRestoreStateV2 and
// IdxReaderSaveState / IdxReaderRestoreState, run through a session. A state saved and
// restored makes the same dequeues (a RandomShuffleQueue's generator included) and the
// same reader batches; what does not match the queue or the reader's files is refused,
// naming it; a restore while a dequeue waits is refused. Also the random ops' generators
// (RandomGeneratorSaveState / RandomGeneratorRestoreState).
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "actors/session.h"
#include "core/file.h"
#include "core/idx.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "tests/temp_dir.h"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

// A queue `q` of float [2] elements with enqueue_many (fed "x"), dequeue_many of 3, and
// its save and restore ops ("save", "restore" fed by "c0" and "rng").
std::unique_ptr<actors::session> queue_session(const std::string& op, std::int64_t capacity = 100,
                                               bool with_shapes = true) {
  auto root = graph::scope::new_root();
  const tf::AttrValue types = graph::attr_value(std::vector<dtype>{dtype::float32});
  std::map<std::string, tf::AttrValue> attrs = {{"component_types", types},
                                                {"capacity", graph::attr_value(capacity)}};
  if (with_shapes) attrs["shapes"] = graph::attr_value(std::vector<partial_shape>{partial_shape{2}});
  if (op == "RandomShuffleQueueV2") {
    attrs["seed"] = graph::attr_value(std::int64_t{11});
    attrs["seed2"] = graph::attr_value(std::int64_t{12});
  }
  auto q = root.with_name("q").add(op, {}, attrs);
  auto x = ops::placeholder(root.with_name("x"), dtype::float32, {-1, 2});
  root.with_name("enqueue").add("QueueEnqueueManyV2", {q.out(0), std::vector<graph::output>{x}});
  auto n = ops::scalar(root.with_name("n"), std::int32_t{3});
  root.with_name("dequeue").add("QueueDequeueManyV2", {q.out(0), n}, {{"component_types", types}});
  root.with_name("save").add("QueueSaveStateV2", {q.out(0)}, {{"component_types", types}});
  auto c0 = ops::placeholder(root.with_name("c0"), dtype::float32, {-1, 2});
  auto rng = ops::placeholder(root.with_name("rng"), dtype::int64, {-1});
  root.with_name("restore").add("QueueRestoreStateV2", {q.out(0), std::vector<graph::output>{c0}, rng},
                                {{"component_types", types}});
  auto g = root.to_graph();
  if (!g.ok()) FAIL(g.error().to_string());
  auto s = actors::session::create(std::move(*g));
  if (!s.ok()) FAIL(s.error().to_string());
  return std::move(*s);
}

tensor rows(int first, int count) {
  tensor t(dtype::float32, {count, 2});
  for (int i = 0; i < count; ++i) {
    t.flat<float>()[static_cast<std::size_t>(2 * i)] = static_cast<float>(first + i);
    t.flat<float>()[static_cast<std::size_t>(2 * i + 1)] = static_cast<float>(-(first + i));
  }
  return t;
}

std::vector<tensor> dequeues(actors::session& s, int k) {
  std::vector<tensor> out;
  for (int i = 0; i < k; ++i) {
    auto r = s.run({}, {"dequeue"});
    if (!r.ok()) FAIL(r.error().to_string());
    out.push_back(r->at(0));
  }
  return out;
}

// Fails the test with the step's error.
void require_ok(const result<std::vector<tensor>>& r) {
  if (!r.ok()) FAIL(r.error().to_string());
}

}  // namespace

TEST_CASE("a restored queue makes the same dequeues, a RandomShuffleQueue's draws included", "[actors][queue]") {
  for (const char* op : {"FIFOQueueV2", "RandomShuffleQueueV2"}) {
    INFO(op);
    auto s = queue_session(op);
    require_ok(s->run({{"x", rows(0, 20)}}, {}, {"enqueue"}));
    dequeues(*s, 2);  // the generator has moved on
    auto saved = s->run({}, {"save:0", "save:1"});
    REQUIRE(saved.ok());
    CHECK(saved->at(0).shape() == tensor_shape({14, 2}));
    CHECK(saved->at(1).num_elements() == (std::string(op) == "FIFOQueueV2" ? 0 : 11));
    auto first = dequeues(*s, 4);
    require_ok(s->run({{"c0", saved->at(0)}, {"rng", saved->at(1)}}, {}, {"restore"}));
    auto again = dequeues(*s, 4);
    for (std::size_t i = 0; i < first.size(); ++i) CHECK(first[i].equals(again[i]));
    // The restored contents are the saved ones: two elements are left either way.
    auto left = s->run({}, {"save:0"});
    REQUIRE(left.ok());
    CHECK(left->at(0).dim(0) == 2);
  }
}

TEST_CASE("a queue restore that does not match is refused, naming the queue; the contents stay", "[actors][queue]") {
  auto s = queue_session("RandomShuffleQueueV2", /*capacity=*/10);
  require_ok(s->run({{"x", rows(0, 5)}}, {}, {"enqueue"}));
  auto saved = s->run({}, {"save:0", "save:1"});
  REQUIRE(saved.ok());
  auto too_many = s->run({{"c0", rows(0, 11)}, {"rng", saved->at(1)}}, {}, {"restore"});
  REQUIRE_FALSE(too_many.ok());
  CHECK(too_many.error().error_code() == code::invalid_argument);
  CHECK_THAT(too_many.error().message(), Catch::Contains("queue 'q'") && Catch::Contains("capacity of 10"));
  auto short_rng = s->run({{"c0", rows(0, 2)}, {"rng", tensor(dtype::int64, {3})}}, {}, {"restore"});
  REQUIRE_FALSE(short_rng.ok());
  CHECK_THAT(short_rng.error().message(), Catch::Contains("generator state must be int64 [11]"));
  auto back = s->run({}, {"save:0"});
  REQUIRE(back.ok());
  CHECK(back->at(0).equals(saved->at(0)));

  // A dequeue waiting in the queue: restoring under it is refused.
  auto empty = queue_session("FIFOQueueV2");
  auto promise = std::make_shared<std::promise<result<std::vector<tensor>>>>();
  auto future = promise->get_future();
  empty->run_async({}, {"dequeue"}, {}, [promise](result<std::vector<tensor>> r) { promise->set_value(std::move(r)); });
  CHECK(future.wait_for(50ms) == std::future_status::timeout);
  auto parked = empty->run({{"c0", rows(0, 3)}, {"rng", tensor(dtype::int64, {0})}}, {}, {"restore"});
  REQUIRE_FALSE(parked.ok());
  CHECK(parked.error().error_code() == code::failed_precondition);
  CHECK_THAT(parked.error().message(), Catch::Contains("restore it between steps"));
  REQUIRE(empty->run({{"x", rows(0, 3)}}, {}, {"enqueue"}).ok());
  REQUIRE(future.wait_for(10s) == std::future_status::ready);
  CHECK(future.get().ok());

  // Elements of unknown shape cannot be stacked: the save says so.
  auto shapeless = queue_session("FIFOQueueV2", 100, /*with_shapes=*/false);
  auto refused = shapeless->run({}, {"save:0"});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().error_code() == code::failed_precondition);
  CHECK_THAT(refused.error().message(), Catch::Contains("cannot be saved"));
}

TEST_CASE("a restored IdxReader continues with the same batches, across epochs", "[actors][io]") {
  testing::temp_dir dir("troupe-pipeline-state");
  std::filesystem::create_directories(dir.path);
  const int n = 16;
  tensor images(dtype::uint8, {n, 1, 1});
  tensor labels(dtype::uint8, {n});
  for (int i = 0; i < n; ++i) images.flat<std::uint8_t>()[static_cast<std::size_t>(i)] = labels.flat<std::uint8_t>()[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i);
  REQUIRE(write_file(dir.path + "/images", to_idx_bytes(images)).ok());
  REQUIRE(write_file(dir.path + "/labels", to_idx_bytes(labels)).ok());

  auto root = graph::scope::new_root();
  root.with_name("reader").add("IdxReader", {},
                               {{"images", graph::attr_value(dir.path + "/images")},
                                {"labels", graph::attr_value(dir.path + "/labels")},
                                {"batch_size", graph::attr_value(std::int64_t{5})},
                                {"seed", graph::attr_value(std::int64_t{3})}});
  root.with_name("save").add("IdxReaderSaveState", {}, {{"shared_name", graph::attr_value(std::string("reader"))}});
  auto cursor = ops::placeholder(root.with_name("cursor"), dtype::int64, {2});
  root.with_name("restore").add("IdxReaderRestoreState", {cursor},
                                {{"shared_name", graph::attr_value(std::string("reader"))}});
  auto g = root.to_graph();
  REQUIRE(g.ok());
  auto s = actors::session::create(std::move(*g));
  REQUIRE(s.ok());
  auto& session = **s;
  auto batches = [&](int k) {
    std::vector<tensor> out;
    for (int i = 0; i < k; ++i) {
      auto r = session.run({}, {"reader:1"});
      if (!r.ok()) FAIL(r.error().to_string());
      out.push_back(r->at(0));
    }
    return out;
  };
  auto fresh = session.run({}, {"save"});
  REQUIRE(fresh.ok());
  CHECK(fresh->at(0).equals(tensor::from_vector<std::int64_t>({0, 0})));  // not run yet: at its start
  batches(4);  // 20 examples: epoch 1, position 4
  auto saved = session.run({}, {"save"});
  REQUIRE(saved.ok());
  CHECK(saved->at(0).equals(tensor::from_vector<std::int64_t>({1, 4})));
  auto first = batches(6);  // into epoch 2 and 3: new permutations
  REQUIRE(session.run({{"cursor", saved->at(0)}}, {}, {"restore"}).ok());
  auto again = batches(6);
  for (std::size_t i = 0; i < first.size(); ++i) CHECK(first[i].equals(again[i]));

  // A cursor past the files (saved from other files) fails the reader's next run.
  REQUIRE(session.run({{"cursor", tensor::from_vector<std::int64_t>({0, 99})}}, {}, {"restore"}).ok());
  auto past = session.run({}, {"reader:1"});
  REQUIRE_FALSE(past.ok());
  CHECK(past.error().error_code() == code::invalid_argument);
  CHECK_THAT(past.error().message(), Catch::Contains("restored position 99") && Catch::Contains("16 examples"));
  auto negative = session.run({{"cursor", tensor::from_vector<std::int64_t>({-1, 0})}}, {}, {"restore"});
  REQUIRE_FALSE(negative.ok());
  CHECK_THAT(negative.error().message(), Catch::Contains("must not be negative"));
}

namespace {

// A random op `r` (seed 7, 8) drawing [3, 4] floats, a LogUniformCandidateSampler `cand`
// (seeds 0: a fresh seed), and the save and restore ops of their generators.
std::unique_ptr<actors::session> random_session(const std::string& op) {
  auto root = graph::scope::new_root();
  auto shape = ops::constant(root.with_name("shape"), tensor::from_vector<std::int32_t>({3, 4}));
  root.with_name("r").add(op, {shape}, {{"dtype", graph::attr_value(dtype::float32)},
                                        {"seed", graph::attr_value(std::int64_t{7})},
                                        {"seed2", graph::attr_value(std::int64_t{8})}});
  auto classes = ops::constant(root.with_name("classes"), tensor::from_vector<std::int64_t>({1, 2, 3}, {3, 1}));
  root.with_name("cand").add("LogUniformCandidateSampler", {classes},
                             {{"num_true", graph::attr_value(std::int64_t{1})},
                              {"num_sampled", graph::attr_value(std::int64_t{5})},
                              {"unique", graph::attr_value(true)},
                              {"range_max", graph::attr_value(std::int64_t{1000})}});
  for (const char* target : {"r", "cand"}) {
    const std::map<std::string, tf::AttrValue> names = {{"shared_name", graph::attr_value(std::string(target))},
                                                        {"seed", graph::attr_value(std::int64_t{target[0] == 'r' ? 7 : 0})},
                                                        {"seed2", graph::attr_value(std::int64_t{target[0] == 'r' ? 8 : 0})}};
    root.with_name(str_cat("save_", target)).add("RandomGeneratorSaveState", {}, names);
    auto value = ops::placeholder(root.with_name(str_cat("state_", target)), dtype::int64, {6});
    root.with_name(str_cat("restore_", target)).add("RandomGeneratorRestoreState", {value}, names);
  }
  auto g = root.to_graph();
  if (!g.ok()) FAIL(g.error().to_string());
  auto s = actors::session::create(std::move(*g));
  if (!s.ok()) FAIL(s.error().to_string());
  return std::move(*s);
}

}  // namespace

TEST_CASE("a restored random generator draws the same numbers again; a bad state is refused", "[actors][random]") {
  for (const char* op : {"RandomUniform", "RandomStandardNormal", "TruncatedNormal"}) {
    INFO(op);
    auto s = random_session(op);
    // Saved before the op ever ran: the save makes the generator, seeded as the op's.
    auto before = s->run({}, {"save_r"});
    REQUIRE(before.ok());
    auto first = s->run({}, {"r", "cand"});
    REQUIRE(first.ok());
    auto saved = s->run({}, {"save_r", "save_cand"});
    REQUIRE(saved.ok());
    CHECK_FALSE(saved->at(0).equals(before->at(0)));  // the counter moved on
    auto a = s->run({}, {"r", "cand"});
    auto b = s->run({}, {"r", "cand"});
    REQUIRE((a.ok() && b.ok()));
    CHECK_FALSE(a->at(0).equals(b->at(0)));
    require_ok(s->run({{"state_r", saved->at(0)}, {"state_cand", saved->at(1)}}, {}, {"restore_r", "restore_cand"}));
    auto a2 = s->run({}, {"r", "cand"});
    auto b2 = s->run({}, {"r", "cand"});
    REQUIRE((a2.ok() && b2.ok()));
    for (std::size_t i = 0; i < 2; ++i) {
      CHECK(a2->at(i).equals(a->at(i)));
      CHECK(b2->at(i).equals(b->at(i)));
    }
    // Back to before the first run: the first draw again.
    require_ok(s->run({{"state_r", before->at(0)}}, {}, {"restore_r"}));
    auto again = s->run({}, {"r"});
    REQUIRE(again.ok());
    CHECK(again->at(0).equals(first->at(0)));

    auto kept = s->run({}, {"save_r"});
    REQUIRE(kept.ok());
    auto bad = s->run({{"state_r", tensor::from_vector<std::int64_t>({1, 2, 3, 4, 5, -1})}}, {}, {"restore_r"});
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().error_code() == code::invalid_argument);
    CHECK_THAT(bad.error().message(), Catch::Contains("restore_r") && Catch::Contains("int64 [6] of 32-bit words"));
    auto after = s->run({}, {"save_r"});  // the refused restore changed nothing
    REQUIRE(after.ok());
    CHECK(after->at(0).equals(kept->at(0)));
  }
}
