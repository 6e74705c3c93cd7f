// The supervisor against a cluster: a killed PS task is restarted and its variables come
// back from the latest checkpoint (RESTORE_LOST: its own; ROLLBACK_ALL: all, with the
// global step), training threads that retry their failed steps go on and, with
// ROLLBACK_ALL, end on a consistent state; a task that fails more often than its budget
// allows makes the supervisor give up with a clear error; so does a lost task with no
// checkpoint to restore it from; and once the run has applied its last step, a recovery
// restores only what the lost task held, whatever the policy; a task lost during another's
// recovery has both restarted, the first restored again after; and one killed again
// inside its own recovery is recovered again.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <thread>

#include "cluster/checkpoint_manager.h"
#include "cluster/step_gate.h"
#include "cluster/supervisor.h"
#include "graph/ops.h"
#include "graph/train.h"
#include "graph/variables.h"
#include "tests/actors/session_fixture.h"
#include "tests/cluster/counting_model.h"
#include "tests/temp_dir.h"

using namespace troupe;
using graph::scope;

namespace {

using troupe::testing::build_counting_model;
using troupe::testing::counting_model;
using troupe::testing::temp_dir;

struct rig {
  temp_dir dir;
  std::shared_ptr<actors::cluster> cluster = troupe::testing::ps_worker_cluster(2, 1);
  std::unique_ptr<counting_model> model = build_counting_model(2, 8);
  std::unique_ptr<actors::session> session;
  cluster::step_gate gate;
  std::unique_ptr<cluster::checkpoint_manager> checkpoints;
  std::unique_ptr<cluster::supervisor> supervisor;
  std::vector<std::string> log;
  std::mutex log_mutex;
  std::atomic<std::int64_t> rolled_back_to{-1};
  std::function<void(const std::string&)> on_log;  // on the supervisor's thread; set before any failure
  std::function<void(std::int64_t)> on_restored;     // likewise, inside a recovery that restored the step

  explicit rig(cluster::supervisor_options so, bool with_checkpoints = true) {
    actors::session_options o;
    o.cluster = cluster;
    o.default_device = "/job:worker/task:0";
    session = troupe::testing::make_session(model->root, o);
    REQUIRE(session->run({}, {}, {"init"}).ok());
    auto g = model->root.to_graph();
    REQUIRE(g.ok());
    if (with_checkpoints) {
      cluster::checkpoint_manager_options mo;
      mo.dir = dir.path;
      mo.gate = &gate;
      mo.default_device = "/job:worker/task:0";
      auto m = cluster::checkpoint_manager::create(cluster, *g, mo);
      if (!m.ok()) FAIL(m.error().to_string());
      checkpoints = std::move(*m);
      so.checkpoints = checkpoints.get();
    }
    so.gate = &gate;
    so.log = [this](const std::string& line) {
      {
        std::lock_guard<std::mutex> lock(log_mutex);
        log.push_back(line);
      }
      if (on_log) on_log(line);
    };
    so.global_step_restored = [this](std::int64_t step) {
      rolled_back_to = step;
      if (on_restored) on_restored(step);
    };
    auto s = cluster::supervisor::create(cluster, so);
    if (!s.ok()) FAIL(s.error().to_string());
    supervisor = std::move(*s);
  }
  ~rig() { supervisor.reset(); }

  std::vector<float> read(const std::string& var) {
    auto r = session->run({}, {var + "/Read/ReadVariableOp"});
    if (!r.ok()) FAIL(r.error().to_string());
    if (r->at(0).type() == dtype::int64) return {static_cast<float>(r->at(0).scalar_value<std::int64_t>())};
    auto f = r->at(0).flat<float>();
    return {f.begin(), f.end()};
  }
  std::int64_t step() { return static_cast<std::int64_t>(read("global_step")[0]); }

  // Trains to step `saved`, commits a checkpoint there, then trains on to step `to`.
  void checkpoint_then_train(std::int64_t saved, std::int64_t to) {
    REQUIRE(train_until(saved));
    auto committed = checkpoints->save_now();
    REQUIRE(committed.ok());
    REQUIRE(committed->step == saved);
    REQUIRE(train_until(to));
  }
  // Lines of the supervisor's log that contain `text`.
  int logged(const std::string& text) {
    std::lock_guard<std::mutex> lock(log_mutex);
    int n = 0;
    for (const auto& line : log) n += line.find(text) != std::string::npos;
    return n;
  }

  // Steps through the gate until the global step reaches `target` (and, given
  // `release`, it is set), running again the steps a failure caught; false when a step
  // fails otherwise or the supervisor gives up.
  bool train_until(std::int64_t target, const std::atomic<bool>* release = nullptr) {
    for (int attempts = 0; attempts < 100000; ++attempts) {
      if (!supervisor->failure().ok()) return false;
      auto now = session->run({}, {"global_step/Read/ReadVariableOp"});
      if (now.ok() && now->at(0).scalar_value<std::int64_t>() >= target &&
          (release == nullptr || release->load())) {
        return true;
      }
      if (!now.ok() && !cluster::is_retryable(now.error())) return false;
      if (now.ok()) {
        cluster::step_gate::pass inside(gate);
        auto r = session->run({}, {}, {"train"});
        if (r.ok() || cluster::is_retryable(r.error())) continue;
        FAIL_CHECK(r.error().to_string());
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }
};

bool all_equal(const std::vector<float>& v, float x) {
  for (float y : v) {
    if (y != x) return false;
  }
  return !v.empty();
}

}  // namespace

TEST_CASE("RESTORE_LOST: a killed PS task comes back with its variables from the checkpoint", "[supervisor]") {
  cluster::supervisor_options so;
  so.recovery = cluster::recovery_policy::restore_lost;
  rig r(so);
  r.checkpoint_then_train(5, 9);
  REQUIRE(r.cluster->kill_task("/job:ps/task:0").ok());
  REQUIRE(r.supervisor->wait_for_recoveries(1, std::chrono::seconds(10)));
  CHECK(r.supervisor->failure().ok());
  auto restarts = r.supervisor->restarts();
  CHECK(restarts["/job:ps/replica:0/task:0"] == 1);
  CHECK(restarts.size() == 1);
  auto recoveries = r.supervisor->recoveries();
  REQUIRE(recoveries.size() == 1);
  CHECK(recoveries[0].recovered);
  CHECK(recoveries[0].restored_step == 5);
  CHECK_THAT(recoveries[0].reason, Catch::Contains("killed"));
  // ps:0's a and step are back at the checkpoint; ps:1's b kept its later updates.
  CHECK(all_equal(r.read("a"), 5.0f));
  CHECK(r.step() == 5);
  CHECK(all_equal(r.read("b"), 9.0f));
  CHECK(r.rolled_back_to == 5);  // ps:0 held the global step
  REQUIRE(r.train_until(12));
  CHECK(all_equal(r.read("a"), 12.0f));
  CHECK(all_equal(r.read("b"), 16.0f));
}

TEST_CASE("ROLLBACK_ALL under two training threads: the run ends on one consistent state", "[supervisor]") {
  cluster::supervisor_options so;
  so.recovery = cluster::recovery_policy::rollback_all;
  rig r(so);
  REQUIRE(r.train_until(20));
  REQUIRE(r.checkpoints->save_now().ok());
  std::atomic<bool> ok{true};
  // The trainers go on until step 200 and until the supervisor has rolled back: a loaded
  // machine may run this thread late, and the kill must come while they train.
  std::atomic<bool> recovered{false};
  std::vector<std::thread> trainers;
  for (int t = 0; t < 2; ++t) {
    trainers.emplace_back([&] {
      if (!r.train_until(200, &recovered)) ok = false;
    });
  }
  // Kill ps:1 while they train (after the step passes 40).
  while (r.step() < 40) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(r.cluster->kill_task("/job:ps/task:1").ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (r.rolled_back_to.load() < 0 && r.supervisor->failure().ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  recovered = true;
  for (auto& t : trainers) t.join();
  CHECK(ok);
  CHECK(r.supervisor->failure().ok());
  CHECK(r.rolled_back_to == 20);
  CHECK(r.supervisor->restarts()["/job:ps/replica:0/task:1"] == 1);
  // Every step's updates all in: a, b and the step agree, whatever was lost and redone.
  const std::int64_t step = r.step();
  CHECK(step >= 200);
  CHECK(all_equal(r.read("a"), static_cast<float>(step)));
  CHECK(all_equal(r.read("b"), static_cast<float>(step)));
}

TEST_CASE("a task failing beyond max_restarts within the window makes the supervisor give up", "[supervisor]") {
  cluster::supervisor_options so;
  so.max_restarts = 1;
  so.within_seconds = 600;
  rig r(so);
  REQUIRE(r.train_until(3));
  REQUIRE(r.checkpoints->save_now().ok());
  REQUIRE(r.cluster->kill_task("/job:worker/task:0").ok());
  REQUIRE(r.supervisor->wait_for_recoveries(1, std::chrono::seconds(10)));
  CHECK(r.supervisor->failure().ok());
  REQUIRE(r.train_until(5));  // the worker is back (it held no variables: nothing restored)
  CHECK(r.supervisor->recoveries().at(0).restored_step == -1);
  REQUIRE(r.cluster->kill_task("/job:worker/task:0").ok());
  REQUIRE(r.supervisor->wait_for_recoveries(2, std::chrono::seconds(10)));
  status f = r.supervisor->failure();
  REQUIRE_FALSE(f.ok());
  CHECK(f.error_code() == code::aborted);
  CHECK_THAT(f.message(), Catch::Contains("/job:worker/replica:0/task:0") && Catch::Contains("max_restarts (1)"));
  CHECK(r.supervisor->restarts()["/job:worker/replica:0/task:0"] == 1);
  CHECK_FALSE(r.train_until(10));  // the loop sees the supervisor gave up
}

TEST_CASE("a lost PS task with no checkpoint to restore it from: the supervisor gives up, naming it", "[supervisor]") {
  cluster::supervisor_options so;
  rig r(so);  // a checkpoint manager, but nothing committed
  REQUIRE(r.train_until(3));
  REQUIRE(r.cluster->kill_task("/job:ps/task:0").ok());
  REQUIRE(r.supervisor->wait_for_recoveries(1, std::chrono::seconds(10)));
  status f = r.supervisor->failure();
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(f.message(), Catch::Contains("/job:ps/replica:0/task:0") && Catch::Contains("no checkpoint"));
}

TEST_CASE("ROLLBACK_ALL once the run has applied its last step: only what the lost task held comes back",
          "[supervisor]") {
  cluster::supervisor_options so;
  so.recovery = cluster::recovery_policy::rollback_all;
  std::atomic<bool> over{false};
  so.finished = [&over] { return over.load(); };
  rig r(so);
  r.checkpoint_then_train(4, 9);
  // Before the end a worker's loss rolls every variable back, as ROLLBACK_ALL says...
  REQUIRE(r.cluster->kill_task("/job:worker/task:0").ok());
  REQUIRE(r.supervisor->wait_for_recoveries(1, std::chrono::seconds(10)));
  CHECK(r.rolled_back_to == 4);
  CHECK(r.step() == 4);
  REQUIRE(r.train_until(9));
  // ...once the run is over it rolls nothing back: the worker held no variables.
  over = true;
  r.rolled_back_to = -1;
  REQUIRE(r.cluster->kill_task("/job:worker/task:0").ok());
  REQUIRE(r.supervisor->wait_for_recoveries(2, std::chrono::seconds(10)));
  CHECK(r.supervisor->failure().ok());
  CHECK(r.supervisor->recoveries().at(1).recovered);
  CHECK(r.rolled_back_to == -1);
  CHECK(r.step() == 9);
  CHECK(all_equal(r.read("a"), 9.0f));
  CHECK(all_equal(r.read("b"), 9.0f));
  // A PS task's loss then restores its own variables only (ps:1 holds b, not the step).
  REQUIRE(r.cluster->kill_task("/job:ps/task:1").ok());
  REQUIRE(r.supervisor->wait_for_recoveries(3, std::chrono::seconds(10)));
  CHECK(r.supervisor->failure().ok());
  CHECK(r.rolled_back_to == -1);
  CHECK(r.step() == 9);
  CHECK(all_equal(r.read("a"), 9.0f));
  CHECK(all_equal(r.read("b"), 4.0f));
  CHECK(r.logged("has applied its last step") == 2);
}

TEST_CASE("ROLLBACK_ALL: a task lost during another's recovery: both are restarted, the first restored again after",
          "[supervisor]") {
  cluster::supervisor_options so;
  so.recovery = cluster::recovery_policy::rollback_all;
  rig r(so);
  r.checkpoint_then_train(4, 9);
  // ps:1 goes down as the supervisor begins on ps:0's loss, before ps:0's restore (which
  // reads every task) runs: that restore fails, and is done again after ps:1's recovery.
  std::atomic<bool> killed{false};
  r.on_log = [&](const std::string& line) {
    if (line.find("/job:ps/replica:0/task:0 went down") != std::string::npos && !killed.exchange(true)) {
      CHECK(r.cluster->kill_task("/job:ps/task:1").ok());
    }
  };
  REQUIRE(r.cluster->kill_task("/job:ps/task:0").ok());
  REQUIRE(r.supervisor->wait_for_recoveries(2, std::chrono::seconds(20)));
  CHECK(r.supervisor->failure().ok());
  auto restarts = r.supervisor->restarts();
  CHECK(restarts["/job:ps/replica:0/task:0"] == 1);
  CHECK(restarts["/job:ps/replica:0/task:1"] == 1);
  for (const auto& rec : r.supervisor->recoveries()) {
    CHECK(rec.recovered);
    CHECK(rec.restored_step == 4);
  }
  CHECK(r.rolled_back_to == 4);
  CHECK(r.step() == 4);
  CHECK(all_equal(r.read("a"), 4.0f));
  CHECK(all_equal(r.read("b"), 4.0f));
  CHECK(r.logged("restored again after") >= 1);
  REQUIRE(r.train_until(12));
  CHECK(all_equal(r.read("a"), 12.0f));
}

TEST_CASE("a task killed again after its restart, before its recovery is over, is recovered again", "[supervisor]") {
  cluster::supervisor_options so;
  so.recovery = cluster::recovery_policy::restore_lost;
  rig r(so);
  r.checkpoint_then_train(4, 9);
  // ps:0's new life is killed inside its recovery (it holds the global step, so the
  // recovery reports the restored step): that loss was taken for the first one's and
  // dropped, leaving the task down for good.
  std::atomic<bool> killed_again{false};
  r.on_restored = [&](std::int64_t) {
    if (killed_again.exchange(true)) return;
    CHECK(r.cluster->kill_task("/job:ps/task:0").ok());
    // The loss is reported while this recovery still runs.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  };
  REQUIRE(r.cluster->kill_task("/job:ps/task:0").ok());
  REQUIRE(r.supervisor->wait_for_recoveries(2, std::chrono::seconds(20)));
  CHECK(r.supervisor->failure().ok());
  CHECK(r.supervisor->restarts()["/job:ps/replica:0/task:0"] == 2);
  for (const auto& rec : r.supervisor->recoveries()) CHECK(rec.recovered);
  CHECK_FALSE(r.cluster->task_down("/job:ps/task:0"));
  CHECK(r.step() == 4);
  REQUIRE(r.train_until(7));
  CHECK(all_equal(r.read("a"), 7.0f));
}
