// step_gate: a consistent cut between training steps, for checkpoints.
//
//   cluster::step_gate gate;
//   // each training thread:
//   { cluster::step_gate::pass p(gate); session.run(..., {"train"}); }
//   // the checkpoint writer:
//   gate.close();   // returns once no step is inside, and keeps new ones out
//   ... read every variable (reads are snapshots) ...
//   gate.open();
//
// Between close() and open() no step that changes variables runs, so every step's updates
// are either all in the variables or all out: what is read then is one cut, however the
// updates of a step are spread over PS tasks. The gate prefers its closer: once close()
// has begun, new passes wait, so a stream of overlapping steps cannot starve it. Steps
// are kept out only while the closer reads (one step's time), not while it writes files.
//
// Several closers may hold the gate at once (a checkpoint and a recovery): it opens when
// the last of them calls open().
//
// Feeders: the steps that fill an input queue (a reader and its enqueue) pass the gate
// too, so that no batch is between a reader and its queue at a cut. A training step
// inside may wait for a feeder (a dequeue from a queue too empty), so feeders still enter
// while a closer waits for the steps inside, and only stop once the gate is closed.
// REQUIRES: a feeder's step never waits for a training step (an enqueue it makes never
// blocks on a full queue); else a closing gate could keep both out.
//
// Thread safety: every method may be called from any thread. REQUIRES: close() is not
// called by a thread that holds a pass; each close() is followed by one open().
#pragma once

#include <cstdint>
#include <mutex>

#include "core/env.h"

namespace troupe::cluster {

class step_gate {
 public:
  // A step inside the gate, from construction to destruction.
  class pass {
   public:
    enum class kind { step, feeder };
    explicit pass(step_gate& gate, kind k = kind::step) : gate_(gate) { gate_.enter(k == kind::feeder); }
    ~pass() { gate_.leave(); }
    pass(const pass&) = delete;
    pass& operator=(const pass&) = delete;

   private:
    step_gate& gate_;
  };

  void enter(bool feeder);
  void leave();
  void close();
  void open();

  // How many times the gate has been closed.
  std::int64_t closings() const;

 private:
  mutable std::mutex mutex_;
  env::condition_variable changed_;
  int inside_ = 0;
  int closers_ = 0;  // closing or closed
  int held_ = 0;     // closers whose close() has returned: the gate is closed
  std::int64_t closings_ = 0;
};

}  // namespace troupe::cluster
