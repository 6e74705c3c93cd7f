// retry: the one way troupe makes a request again after a failure that may pass (a task
// lost and restarted, a connection dropped): tried again while the caller allows the
// failure and a deadline has not passed, with a pause that doubles up to a bound.
//
//   retry_policy p;
//   p.deadline = env::now() + std::chrono::seconds(5);   // max(): no deadline
//   p.pause = std::chrono::milliseconds(100);            // after the first failure
//   p.max_pause = std::chrono::seconds(1);
//   auto r = run_retried([&] { return session.run({}, {"step_value"}); }, is_retryable, p);
//
// `request` returns a status or a result<T>; `may_retry(const status&)` says whether its
// failure may be tried again (it may count or log the failures, or say no once the
// caller is stopping). The answer is the last try's. The pauses are env::sleep_for, so
// they are virtual time in a simulation: call from a thread that may wait (never a CAF
// scheduler thread).
#pragma once

#include <algorithm>
#include <chrono>

#include "core/env.h"
#include "core/status.h"

namespace troupe {

struct retry_policy {
  env::clock::time_point deadline = env::clock::time_point::max();
  std::chrono::milliseconds pause{100};
  std::chrono::milliseconds max_pause{1000};
};

inline const status& failure_of(const status& s) { return s; }
template <class T>
const status& failure_of(const result<T>& r) {
  return r.error();
}

template <class Request, class MayRetry>
auto run_retried(Request&& request, MayRetry&& may_retry, retry_policy policy) {
  for (;;) {
    auto r = request();
    if (r.ok() || env::now() > policy.deadline || !may_retry(failure_of(r))) return r;
    env::sleep_for(policy.pause);
    policy.pause = std::min(2 * policy.pause, policy.max_pause);
  }
}

}  // namespace troupe
