#include "sim/world.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/status.h"

namespace troupe::sim {

struct world::sim_thread {
  enum class state { running, runnable, waiting, done };
  std::uint64_t id = 0;
  std::string name;
  state now = state::runnable;
  const void* channel = nullptr;  // what it waits for
  env::clock::time_point deadline = env::clock::time_point::max();
  bool notified = false;
  std::condition_variable turn;  // signalled when running_ becomes this thread's id
  std::thread os;
};

namespace {
thread_local world::sim_thread* t_self = nullptr;
}  // namespace

world::world(options o)
    : options_(o), random_(o.seed), seeds_(o.seed ^ 0x9e3779b97f4a7c15ULL), now_(env::clock::time_point(k_start)) {
  if (env::current() != nullptr) {
    std::fprintf(stderr, "troupe: a simulated world already exists in this process\n");
    std::abort();
  }
  auto root = std::make_unique<sim_thread>();
  root->id = next_id_++;
  root->name = "main";
  root->now = sim_thread::state::running;
  running_ = root->id;
  t_self = root.get();
  threads_.emplace(root->id, std::move(root));
  env::install(this);
}

world::~world() {
  env::install(nullptr);
  t_self = nullptr;
  if (threads_.size() != 1) {
    std::fprintf(stderr, "troupe: a simulated world ended with %zu threads not joined\n", threads_.size() - 1);
    std::abort();
  }
}

void world::configure(caf::actor_system_config& config) { config.set("scheduler.policy", caf::atom("testing")); }

void world::attach(caf::actor_system* system) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (system == nullptr) {
    scheduler_ = nullptr;
    return;
  }
  scheduler_ = dynamic_cast<caf::scheduler::test_coordinator*>(&system->scheduler());
  if (scheduler_ == nullptr) {
    std::fprintf(stderr, "troupe: a simulated world needs CAF's testing scheduler (sim::world::configure)\n");
    std::abort();
  }
  scheduler_->clock().current_time = now_;
}

void world::at(env::clock::time_point t, std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.emplace(std::max(t, now_), std::move(fn));
}

std::chrono::nanoseconds world::elapsed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return now_ - env::clock::time_point(k_start);
}

env::clock::time_point world::now() {
  std::lock_guard<std::mutex> lock(mutex_);
  return now_;
}

std::uint64_t world::random_seed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return seeds_();
}

world::sim_thread* world::self_or_die(const char* what) {
  if (t_self == nullptr) {
    std::fprintf(stderr, "troupe: a thread outside the simulated world called %s\n", what);
    std::abort();
  }
  return t_self;
}

std::uint64_t world::start_thread(std::function<void()> fn, std::string name) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto t = std::make_unique<sim_thread>();
  sim_thread* raw = t.get();
  raw->id = next_id_++;
  raw->name = std::move(name);
  raw->now = sim_thread::state::runnable;
  runnable_.push_back(raw);
  raw->os = std::thread([this, raw, fn = std::move(fn)] {
    t_self = raw;
    {
      std::unique_lock<std::mutex> l(mutex_);
      raw->turn.wait(l, [&] { return running_ == raw->id; });
    }
    fn();
    std::unique_lock<std::mutex> l(mutex_);
    raw->now = sim_thread::state::done;
    wake(raw, /*all=*/true);  // its joiners
    hand_on(l, raw);
    t_self = nullptr;
  });
  threads_.emplace(raw->id, std::move(t));
  return raw->id;
}

void world::join_thread(std::uint64_t id) {
  sim_thread* self = self_or_die("join");
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = threads_.find(id);
  if (it == threads_.end()) return;
  sim_thread* t = it->second.get();
  while (t->now != sim_thread::state::done) {
    start_waiting(self, t, env::clock::time_point::max());
    hand_on(lock, self);
  }
  std::thread os = std::move(t->os);
  threads_.erase(it);
  lock.unlock();
  os.join();  // it has given the turn away and only returns
}

bool world::wait(const void* channel, env::clock::time_point deadline) {
  sim_thread* self = self_or_die("a wait or sleep");
  std::unique_lock<std::mutex> lock(mutex_);
  start_waiting(self, channel, deadline);
  hand_on(lock, self);
  return self->notified;
}

void world::start_waiting(sim_thread* self, const void* channel, env::clock::time_point deadline) {
  self->now = sim_thread::state::waiting;
  self->channel = channel;
  self->deadline = deadline;
  self->notified = false;
  waiters_[channel].push_back(self);
  if (deadline != env::clock::time_point::max()) deadlines_.emplace(deadline, self->id);
}

void world::make_runnable(sim_thread* t, bool notified) {
  if (t->deadline != env::clock::time_point::max()) deadlines_.erase({t->deadline, t->id});
  t->now = sim_thread::state::runnable;
  t->notified = notified;
  runnable_.push_back(t);
}

void world::notify(const void* channel, bool all) {
  std::lock_guard<std::mutex> lock(mutex_);
  wake(channel, all);
}

void world::wake(const void* channel, bool all) {
  auto it = waiters_.find(channel);
  if (it == waiters_.end()) return;
  std::deque<sim_thread*>& q = it->second;
  do {
    sim_thread* t = q.front();
    q.pop_front();
    make_runnable(t, /*notified=*/true);
  } while (all && !q.empty());
  if (q.empty()) waiters_.erase(it);
}

void world::drain() {
  const bool had_logger = caf::logger::current_logger() != nullptr;
  for (;;) {
    std::function<void()> event;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (scheduler_ != nullptr && scheduler_->has_job()) {
        auto& jobs = scheduler_->jobs;
        std::swap(jobs.front(), jobs[random_() % jobs.size()]);
      } else if (!events_.empty() && events_.begin()->first <= now_) {
        event = std::move(events_.begin()->second);
        events_.erase(events_.begin());
      } else {
        break;
      }
    }
    if (event) {
      event();
    } else {
      scheduler_->run_once();
    }
  }
  // Running actors on this thread may have tied it to their system (actors/spawn.h).
  if (!had_logger) caf::logger::set_current_actor_system(nullptr);
}

void world::hand_on(std::unique_lock<std::mutex>& lock, sim_thread* self) {
  for (;;) {
    lock.unlock();
    drain();
    lock.lock();
    if (scheduler_ != nullptr && scheduler_->has_job()) continue;  // an event made work
    if (!runnable_.empty()) {
      const std::size_t pick = random_() % runnable_.size();
      sim_thread* next = runnable_[pick];
      runnable_[pick] = runnable_.back();
      runnable_.pop_back();
      next->now = sim_thread::state::running;
      next->channel = nullptr;
      next->deadline = env::clock::time_point::max();
      running_ = next->id;
      if (next == self) return;
      next->turn.notify_one();
      if (self->now == sim_thread::state::done) return;
      self->turn.wait(lock, [&] { return running_ == self->id; });
      return;
    }
    // Nobody may go on now: on to the next thing scheduled.
    auto next = env::clock::time_point::max();
    if (!events_.empty()) next = events_.begin()->first;
    if (scheduler_ != nullptr && !scheduler_->clock().schedule().empty()) {
      next = std::min(next, scheduler_->clock().schedule().begin()->first);
    }
    if (!deadlines_.empty()) next = std::min(next, deadlines_.begin()->first);
    if (next == env::clock::time_point::max()) deadlock(lock);
    if (next > now_) {
      const auto step = next - now_;
      now_ = next;
      if (scheduler_ != nullptr) {
        auto* s = scheduler_;
        lock.unlock();
        s->advance_time(step);  // fires CAF's due timers and delayed messages
        lock.lock();
      }
    } else if (scheduler_ != nullptr && !scheduler_->clock().schedule().empty() &&
               scheduler_->clock().schedule().begin()->first <= now_) {
      auto* s = scheduler_;
      lock.unlock();
      s->advance_time(std::chrono::nanoseconds(0));
      lock.lock();
    }
    while (!deadlines_.empty() && deadlines_.begin()->first <= now_) {
      sim_thread* t = threads_.at(deadlines_.begin()->second).get();
      auto w = waiters_.find(t->channel);
      w->second.erase(std::find(w->second.begin(), w->second.end(), t));
      if (w->second.empty()) waiters_.erase(w);
      make_runnable(t, /*notified=*/false);
    }
  }
}

void world::set_buggify(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  buggify_ = on;
}

std::map<std::string, std::int64_t> world::buggify_fires() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {buggify_fires_.begin(), buggify_fires_.end()};
}

namespace {
// Whether TROUPE_BUGGIFY_LIVE names `site` ("a,b=0.05,c"), and the probability it gives it
// (negative: none, or not named).
std::pair<bool, double> named_live(std::string_view site) {
  const char* env = std::getenv("TROUPE_BUGGIFY_LIVE");
  if (env == nullptr) return {false, -1};
  std::string_view names(env);
  while (!names.empty()) {
    const auto comma = names.find(',');
    std::string_view entry = names.substr(0, comma);
    const auto equals = entry.find('=');
    if (entry.substr(0, equals) == site) {
      if (equals == std::string_view::npos) return {true, -1};
      const std::string number(entry.substr(equals + 1));
      char* end = nullptr;
      const double p = std::strtod(number.c_str(), &end);
      if (number.empty() || *end != '\0' || !(p >= 0 && p <= 1)) {
        // A setting of the environment, met on a world's thread under its lock: ends the
        // process at once (as a deadlock does), not through the exit handlers.
        std::fprintf(stderr, "troupe: TROUPE_BUGGIFY_LIVE: '%s' must be a probability in [0, 1] (for site %s)\n",
                     number.c_str(), std::string(site).c_str());
        std::fflush(stderr);
        std::_Exit(2);
      }
      return {true, p};
    }
    if (comma == std::string_view::npos) break;
    names.remove_prefix(comma + 1);
  }
  return {false, -1};
}
}  // namespace

bool world::buggify(std::string_view site, double probability) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!buggify_) return false;
  auto it = buggify_live_.find(site);
  if (it == buggify_live_.end()) {
    // Live with probability 1/4, from the seed and the name alone (not from the order in
    // which sites are first asked).
    std::uint64_t h = options_.seed ^ 0xcbf29ce484222325ULL;
    for (char c : site) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    const auto [named, named_probability] = named_live(site);
    it = buggify_live_.emplace(std::string(site), buggify_site{h % 4 == 0 || named, named_probability}).first;
    if (it->second.live) buggify_fires_.emplace(std::string(site), 0);
  }
  if (!it->second.live) return false;
  if (it->second.probability >= 0) probability = it->second.probability;
  // One draw: a probability 1/n fires when the draw is 0 modulo n (1/4: the one rule that
  // was, so that every seed explored before replays the same), any other when it is below
  // p * 2^20 modulo 2^20.
  const std::uint64_t draw = random_();
  const double inverse = probability > 0 ? 1 / probability : 0;
  const bool fires = inverse >= 1 && std::abs(inverse - std::round(inverse)) < 1e-9
                         ? draw % static_cast<std::uint64_t>(std::round(inverse)) == 0
                         : static_cast<double>(draw % (1u << 20)) < probability * (1u << 20);
  if (!fires) return false;
  ++buggify_fires_.find(site)->second;
  return true;
}

void world::deadlock(std::unique_lock<std::mutex>& lock) {
  std::string what;
  for (auto& [id, t] : threads_) {
    if (t->now == sim_thread::state::waiting) what += str_cat("\n  thread '", t->name, "' waits");
  }
  std::fprintf(stderr,
               "troupe: the simulation can never go on (seed %llu, virtual time %.6f s): every thread waits and "
               "nothing is scheduled:%s\n",
               static_cast<unsigned long long>(options_.seed),
               std::chrono::duration<double>(now_ - env::clock::time_point(k_start)).count(), what.c_str());
  std::fflush(stderr);
  lock.unlock();
  std::_Exit(70);
}

}  // namespace troupe::sim
