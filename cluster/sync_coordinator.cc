#include "cluster/sync_coordinator.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "core/env.h"
#include "core/retry.h"

namespace troupe::cluster {

result<std::unique_ptr<sync_coordinator>> sync_coordinator::create(std::shared_ptr<actors::cluster> cluster,
                                                                   const graph::graph& g,
                                                                   const train::sync_replicas_ops& ops,
                                                                   sync_coordinator_options options) {
  if (ops.aggregates.empty() || !ops.update.valid() || ops.token_size.empty()) {
    return invalid_argument_error("sync coordinator: the graph's synchronous replication ops are incomplete");
  }
  actors::session_options so;
  so.cluster = cluster;
  so.default_device = options.default_device;
  auto copy = graph::graph::from_graph_def(g.to_graph_def(), g.registry());
  if (!copy.ok()) return copy.error().with_context("sync coordinator");
  auto session = actors::session::create(std::move(*copy), so);
  if (!session.ok()) return session.error().with_context("sync coordinator");
  return std::unique_ptr<sync_coordinator>(new sync_coordinator(std::move(*session), ops, std::move(options)));
}

sync_coordinator::sync_coordinator(std::unique_ptr<actors::session> session, const train::sync_replicas_ops& ops,
                                   sync_coordinator_options options)
    : session_(std::move(session)), options_(std::move(options)) {
  for (const auto& [take, read] : ops.aggregates) {
    takes_.push_back(take.name());
    reads_.push_back(read.name());
  }
  for (const auto& s : ops.token_size) sizes_.push_back(s.name());
  for (const auto& e : ops.token_enqueue) enqueues_.push_back(e.node);
  update_ = ops.update.node;
  step_after_ = ops.step_after_update.name();
  init_ = ops.init.node;
  step_at_init_ = ops.step_at_init.name();
  close_ = ops.close_tokens.node;
}

sync_coordinator::~sync_coordinator() {
  stop(true);
  if (thread_.joinable()) thread_.join();
}

bool sync_coordinator::may_retry(const status& failure) {
  return !stop_ && options_.retry && options_.retry(failure);
}

status sync_coordinator::start() {
  // A task that stays down for a minute fails the run.
  auto init = run_retried([&] { return reset(); }, [&](const status& e) { return may_retry(e); },
                          retry_policy{env::now() + std::chrono::minutes(1), std::chrono::milliseconds(100),
                                       std::chrono::milliseconds(1000)});
  if (!init.ok()) return init.error().with_context("sync coordinator: setting the accumulators' global step");
  known_step_ = *init;
  thread_ = env::thread([this] { loop(); });
  return status();
}

void sync_coordinator::rolled_back(std::int64_t step) {
  ++epoch_;
  known_step_ = step;
  status s = reset_and_release().to_status();
  if (options_.log) {
    options_.log(s.ok() ? str_cat("sync: accumulators reset to the restored global step ", step)
                        : str_cat("sync: resetting the accumulators after the restore failed (", s.message(),
                                  "); the coordinator resets them again"));
  }
  if (!s.ok()) {
    // No replica has a token, so no gradient comes: the turn waiting for them (or the
    // next) gives up now and the loop resets, rather than after the stall timeout.
    {
      std::lock_guard<std::mutex> lock(takes_state_->mutex);
      takes_state_->reset_owed = true;
    }
    takes_state_->answered.notify_all();
  }
}

void sync_coordinator::stop(bool close_tokens) {
  stop_ = true;
  {
    std::lock_guard<std::mutex> lock(takes_state_->mutex);
    takes_state_->stopped = true;
  }
  takes_state_->answered.notify_all();
  if (close_tokens) (void)session_->run({}, {}, {close_});
}

status sync_coordinator::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  ended_.wait(lock, [&] { return done_; });
  return outcome_;
}

status sync_coordinator::release_tokens() {
  auto sizes = session_->run({}, sizes_);
  if (!sizes.ok()) return sizes.error();
  std::vector<std::string> targets;
  for (std::size_t r = 0; r < sizes->size(); ++r) {
    if ((*sizes)[r].scalar_value<std::int32_t>() == 0) targets.push_back(enqueues_[r]);
  }
  if (targets.empty()) return status();
  auto given = session_->run({}, {}, targets);
  return given.ok() ? status() : given.error();
}

result<std::int64_t> sync_coordinator::reset() {
  auto init = session_->run({}, {step_at_init_}, {init_});
  if (!init.ok()) return init.error();
  return init->at(0).scalar_value<std::int64_t>();
}

result<std::int64_t> sync_coordinator::reset_and_release() {
  auto step = reset();
  if (!step.ok()) return step;
  TROUPE_RETURN_IF_ERROR(release_tokens());
  return step;
}

std::optional<step_gate::pass> sync_coordinator::inside_gate() {
  if (options_.gate == nullptr) return std::nullopt;
  return std::optional<step_gate::pass>(std::in_place, *options_.gate);  // built in place: a pass cannot move
}

namespace {
constexpr const char* k_reset_owed = "a rollback's reset of the accumulators failed; they are reset again";
}  // namespace

result<std::int64_t> sync_coordinator::turn(std::int64_t epoch) {
  auto st = takes_state_;
  std::uint64_t turn = 0;
  {
    std::lock_guard<std::mutex> lock(st->mutex);
    turn = ++st->turn;
    st->value.reset();
    if (std::exchange(st->reset_owed, false)) return aborted_error(k_reset_owed);
  }
  session_->run_async({}, takes_, {}, [st, turn](result<std::vector<tensor>> r) {
    {
      std::lock_guard<std::mutex> lock(st->mutex);
      if (st->turn != turn) return;
      st->value.emplace(std::move(r));
    }
    st->answered.notify_all();
  });
  result<std::vector<tensor>> taken = internal_error("not taken");
  const auto started = env::now();
  const auto limit = options_.stall_timeout.count() > 0
                         ? options_.stall_timeout
                         : std::chrono::milliseconds(static_cast<std::int64_t>(std::max(floor_ms_, 50 * average_turn_ms_)));
  {
    std::unique_lock<std::mutex> lock(st->mutex);
    if (!st->answered.wait_for(lock, limit, [&] { return st->value.has_value() || st->stopped || st->reset_owed; })) {
      // The takes still waiting fail when the failed turn resets the accumulators.
      const status lost = unavailable_error("sync coordinator: the gradients of a step did not all come within ",
                                            limit.count(), " ms (one was lost); every replica computes the step again");
      if (options_.log) options_.log(str_cat("sync: ", lost.message()));
      // No turn has come through yet: perhaps they are just long (a model whose steps
      // take seconds, 200 workers): wait twice as long next time, up to 10 minutes.
      if (average_turn_ms_ == 0) floor_ms_ = std::min(2 * floor_ms_, 600000.0);
      return lost;
    }
    if (std::exchange(st->reset_owed, false)) return aborted_error(k_reset_owed);
    if (!st->value.has_value()) return cancelled_error("the coordinator was stopped while gathering gradients");
    taken = std::move(*st->value);
  }
  if (!taken.ok()) return taken.error();
  // The aggregates lost after they were taken (the coordinator's task failing between the
  // take and the update): every replica computes the step again.
  if (env::buggify("sync.lost_aggregates")) {
    return unavailable_error("buggify sync.lost_aggregates: the step's aggregates were lost after they were taken");
  }
  const double took_ms = std::chrono::duration<double, std::milli>(env::now() - started).count();
  average_turn_ms_ = average_turn_ms_ == 0 ? took_ms : 0.9 * average_turn_ms_ + 0.1 * took_ms;
  actors::feed_list feeds;
  for (std::size_t i = 0; i < reads_.size(); ++i) feeds.emplace_back(reads_[i], (*taken)[i]);
  std::int64_t step = 0;
  status released;
  {
    auto inside = inside_gate();
    if (epoch_.load() != epoch) return aborted_error("a recovery restored the variables while the step's gradients "
                                                     "were being gathered");
    auto applied = session_->run(feeds, {step_after_}, {update_});
    if (!applied.ok()) return applied.error();
    step = applied->at(0).scalar_value<std::int64_t>();
    known_step_ = step;
    if (step >= options_.last_step) finished_ = true;
    if (!options_.before_tokens) released = release_tokens();
  }
  // The tokens, inside the gate (none if a rollback meanwhile handed out those of the
  // step it restored).
  auto hand_out = [&] {
    auto inside = inside_gate();
    return epoch_.load() != epoch ? status() : release_tokens();
  };
  if (options_.before_tokens) {
    options_.before_tokens(step);
    // Tokens handed out late: every replica waits, and a recovery may come between the
    // update and the tokens.
    if (env::buggify("sync.slow_tokens")) env::sleep_for(k_slow_tokens);
    released = hand_out();
  }
  // The update is in: the turn must not fail now (the next would wait for a step after
  // the last), so the tokens are handed out again while their failure is retryable.
  if (!released.ok() && may_retry(released)) {
    released = run_retried(hand_out, [&](const status& e) { return may_retry(e); }, k_pause_again);
  }
  if (!released.ok()) return released.with_context("handing out tokens");
  return step;
}

void sync_coordinator::loop() {
  status outcome;
  std::int64_t step = -1;
  // An update that went in: counted, and step_done told. Whether it was the last.
  auto updated = [&](std::int64_t to) {
    step = to;
    ++updates_;
    if (options_.step_done) options_.step_done(step);
    return step >= options_.last_step;
  };
  while (!stop_) {
    const std::int64_t epoch = epoch_.load();
    auto next = turn(epoch);
    if (!next.ok()) {
      if (stop_) break;
      // A turn a rollback cut short is tried again whatever its error.
      const bool rolled = epoch_.load() != epoch;
      if (!rolled && (!options_.retry || !options_.retry(next.error()))) {
        outcome = next.error().with_context("sync coordinator");
        break;
      }
      // The turn's gradients are lost with it: every replica computes the step again
      // (inside the gate: after the recovery under way, if any, has restored the values).
      // (After a rollback this resets a second time: replicas that handed in the restored
      // step's gradient meanwhile compute it again; the runner's workers do so on the
      // batch they kept. Skipping the reset could leave them waiting for ever when this
      // turn's takes had consumed those gradients.)
      // The reset is done again until it is through while its failure is retryable: no
      // replica gets a token without it, and the next turn would wait for gradients
      // that cannot come (outside the gate meanwhile: a recovery may need it closed).
      // (A failure it does not allow: the next turn fails and resets again.) Only the
      // first failure of a reset is logged: a task down retries it for a second or more.
      env::sleep_for(std::chrono::milliseconds(1));
      int failures = 0;
      result<std::int64_t> reset = run_retried(
          [&] {
            auto inside = inside_gate();
            return reset_and_release();
          },
          [&](const status& e) {
            if (++failures == 1 && options_.log && !stop_) {
              options_.log(str_cat("sync: resetting after a failed update: ", e.message(), "; trying again"));
            }
            return may_retry(e);
          },
          k_pause_again);
      if (failures > 1 && reset.ok() && options_.log) options_.log(str_cat("sync: reset after ", failures + 1, " tries"));
      // The failed turn's update may have gone in all the same (its answer lost with a
      // connection): the reset read a global step past the last one known. It counts as
      // done, and when it is the last the loop ends (else it would wait for the
      // gradients of a step after the last, which no replica computes).
      if (reset.ok() && *reset > known_step_.load()) {
        if (options_.log) options_.log(str_cat("sync: the update to global step ", *reset, " went in though its answer was lost"));
        known_step_ = *reset;
        if (*reset >= options_.last_step) finished_ = true;
        if (updated(*reset)) break;
      }
      continue;
    }
    if (updated(*next)) break;
  }
  if (outcome.ok() && step < options_.last_step) outcome = cancelled_error("sync coordinator: stopped at global step ", step);
  // No replica waits for a token that will never come.
  (void)release_tokens();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    outcome_ = outcome;
  }
  ended_.notify_all();
}

}  // namespace troupe::cluster
