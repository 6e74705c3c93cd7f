// compute_pool: the threads a device runs kernels on, and intra-op parallelism.
//
// schedule() queues a closure; parallel_for() splits a range into blocks that pool threads
// and the caller claim from a shared counter, so a caller only ever waits for blocks
// that some running thread has already claimed: nested parallel_for calls from pool
// threads cannot deadlock. With one thread everything runs inline in the caller.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace troupe {

class compute_pool {
 public:
  // num_threads 0: no threads of its own; schedule() hands work to env::post (a simulated
  // world's turn, or at once in the caller in the real world) and parallel_for runs in
  // the caller.
  //
  // spin: a thread that runs out of work first looks for more for a while (a few thousand
  // tries, about 0.1-0.5 ms) before it sleeps, as TensorFlow's pools do, so that work
  // arriving soon after starts without a wake-up. That pays while the cores would
  // otherwise be idle; where several busy processes share the cores (the servers of a
  // cluster on one machine), the spinning takes a core from another process's work, and
  // a pool made with spin false sleeps at once (cluster_options::compute_spin).
  explicit compute_pool(int num_threads, std::string name = "troupe-compute", bool spin = true);
  ~compute_pool();

  compute_pool(const compute_pool&) = delete;
  compute_pool& operator=(const compute_pool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs `fn` on a pool thread (or inline when the pool has no worker threads).
  void schedule(std::function<void()> fn);

  // Calls fn(begin, end) over [0, n) in blocks; `cost_per_unit` is an estimate in
  // nanoseconds of one unit's work, used to decide how many blocks are worth it (below
  // ~20 us of work in all, everything runs inline). An exception thrown by fn reaches the
  // caller (the first one, once every started block has finished; blocks not yet started
  // are skipped), never a pool thread.
  void parallel_for(std::int64_t n, double cost_per_unit,
                    const std::function<void(std::int64_t, std::int64_t)>& fn);

  // True on one of this pool's threads (always, for a pool without threads).
  bool in_pool() const;

 private:
  struct impl;
  int num_threads_;
  std::unique_ptr<impl> impl_;
};

// The number of hardware threads, or TROUPE_NUM_THREADS when set.
int default_num_threads();

}  // namespace troupe
