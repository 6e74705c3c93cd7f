// rendezvous: where a tensor sent across devices waits for its Recv, or a Recv waits for
// its tensor. A producer never blocks: _Send posts a message to the destination device's
// actor (a tensor from another process is put here by its link's reader), and the table
// either hands the tensor to the Recv already waiting or keeps it until the Recv asks. A
// Recv that asks first is parked with its reply. Entries are keyed by (step id, the
// transfer's key); an aborted step fails its parked Recvs and drops its
// tensors, and anything arriving later for it is refused. A step that ends on the device
// is closed the same way (close()), so a tensor that arrives for it afterwards is dropped
// rather than kept; a tensor that waits longer than a given age for a step that never
// ran here is dropped by sweep(). What the table keeps is bounded: arrived tensors in
// bytes (a send beyond the bound is refused, and its step fails), the memory of closed
// steps in count (the oldest forgotten first).
//
// A _Recv asks by message, unless it runs inside a handler of its own device's actor
// (a step's first nodes run in the handler that starts it, and nodes woken by an arrival
// in the handler of that arrival): then the table is this thread's active one
// (active_scope) and the Recv asks it directly, saving a message per transfer. The table
// calls each reply after removing its entry and outside its lock, so a reply may re-enter
// the table.
//
// The table belongs to one device actor (runtime_device::rendezvous), which uses it from
// its handlers; a link's reader delivers tensors from other processes into it itself
// (deliver_transfer, actors/device_actor.h), saving a hand-off to the actor per tensor.
// Thread safety: every call takes the table's lock; replies run outside it.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actors/reply.h"
#include "core/tensor.h"
#include "placement/partition.h"

namespace troupe::actors {

class runtime_device;

// A transfer's key as the runtime carries it: the partitioner's rendezvous_key, read
// from a _Send's or _Recv's attributes once, when its partition is prepared, with its
// hash and printed form computed then, so a transfer hashes and prints no strings. The
// two ends of a transfer hold equal keys, not the same object.
class transfer_key {
 public:
  explicit transfer_key(placement::rendezvous_key key);

  const placement::rendezvous_key& key() const { return key_; }
  std::size_t hash() const { return hash_; }
  // TensorFlow's printed form (rendezvous_key::to_string), for traces.
  const std::string& printed() const { return printed_; }

  friend bool operator==(const transfer_key& a, const transfer_key& b) {
    return a.hash_ == b.hash_ && a.key_ == b.key_;
  }

 private:
  placement::rendezvous_key key_;
  std::size_t hash_;
  std::string printed_;
};

// What the rendezvous messages carry: shared by the kernel and its messages, never copied.
using transfer_key_ptr = std::shared_ptr<const transfer_key>;

using rv_send_atom = caf::atom_constant<caf::atom("rvsend")>;
using rv_recv_atom = caf::atom_constant<caf::atom("rvrecv")>;
using rv_cancel_atom = caf::atom_constant<caf::atom("rvcancel")>;

class rendezvous_table {
 public:
  using clock = std::chrono::steady_clock;

  // `limit_bytes` bounds the bytes of arrived tensors that no Recv has asked for yet.
  explicit rendezvous_table(std::int64_t limit_bytes = std::numeric_limits<std::int64_t>::max())
      : limit_bytes_(limit_bytes) {}
  rendezvous_table(const rendezvous_table&) = delete;
  rendezvous_table& operator=(const rendezvous_table&) = delete;

  // A tensor arrived for (step, key). Errors, on which the caller fails the step: a second
  // tensor for the same transfer (internal), or the bound on kept bytes exceeded
  // (resource_exhausted, naming `device`); the tensor is not kept. A tensor for a closed
  // step is dropped (ok).
  status send(std::int64_t step, const transfer_key_ptr& key, tensor value, std::string_view device = "");
  // A Recv asks for (step, key): answered now (before this returns) or parked.
  void recv(std::int64_t step, const transfer_key_ptr& key, reply<tensor> r);
  // The Recv's step cancelled it: fail it with `cancelled` if still parked.
  void cancel(std::int64_t step, const transfer_key_ptr& key);
  // Fails every parked Recv of `step` with `error`, drops its tensors, and refuses later
  // traffic for it.
  void abort(std::int64_t step, const status& error);
  // The step ended on this device: as abort(), with a reason saying so.
  void close(std::int64_t step);
  // The device is gone: fails every parked Recv with `reason`, drops the tensors, and
  // from now on drops what arrives and fails every Recv so.
  void shut(const status& reason);
  // Drops tensors that arrived before `cutoff` for steps `is_running` says are not
  // running here (orphans of steps that ended, or never started, on this device).
  // Returns how many were dropped. (Under the table's lock: `is_running` must not call it.)
  int sweep(clock::time_point cutoff, const std::function<bool(std::int64_t)>& is_running);
  // The device's sweeps: arm_sweep() says true once entries wait and no sweep is due
  // (the caller then has one sent); keep_sweeping(), after a sweep, whether another is
  // due (entries still wait).
  bool arm_sweep();
  bool keep_sweeping();

  bool is_aborted(std::int64_t step) const;
  std::size_t num_waiting() const;
  std::int64_t bytes_waiting() const;
  std::pair<std::size_t, std::int64_t> waiting() const;  // both at one moment

  // Makes `table`, the rendezvous of `device`'s actor, the active one on this thread for
  // the scope's life. The device actor opens one in each handler that may run kernels.
  class active_scope {
   public:
    active_scope(rendezvous_table& table, const runtime_device* device);
    ~active_scope();
    active_scope(const active_scope&) = delete;
    active_scope& operator=(const active_scope&) = delete;

   private:
    rendezvous_table* previous_table_;
    const runtime_device* previous_device_;
  };
  // The table of `device`'s actor when one of its handlers runs on this thread, else null.
  static rendezvous_table* active(const runtime_device* device);

 private:
  using entry_key = std::pair<std::int64_t, const transfer_key*>;
  struct entry_hash {
    std::size_t operator()(const entry_key& k) const {
      return k.second->hash() ^ (static_cast<std::size_t>(k.first) * 0x9e3779b97f4a7c15ULL);
    }
  };
  struct entry_equal {
    bool operator()(const entry_key& a, const entry_key& b) const {
      return a.first == b.first && (a.second == b.second || *a.second == *b.second);
    }
  };
  struct entry {
    transfer_key_ptr key;  // keeps the pointer in the map key alive
    tensor value;          // arrived, not yet received
    clock::time_point arrived;
    reply<tensor> waiting;
  };
  using entry_map = std::unordered_map<entry_key, entry, entry_hash, entry_equal>;
  // What a call took out of the table under its lock, answered and freed once it is
  // released (the Recvs fail outside it; a tensor freed may write a release to a link).
  struct dropped {
    std::vector<tensor> tensors;
    std::vector<reply<tensor>> to_fail;
  };
  // Under mutex_:
  void remember_closed(std::int64_t step, const status& reason);  // ok: ended normally
  void abort_locked(std::int64_t step, const status& error, dropped& out);
  void take_out(entry& e, dropped& out);  // its parked Recv or its tensor, into `out`
  static status ended_error(std::int64_t step);
  tensor take(entry& e);
  entry_map::iterator erase(entry_map::iterator it);  // keeps per_step_ right

  entry_map entries_;
  // How many entries each step has here: a few steps at a time, so a vector.
  std::vector<std::pair<std::int64_t, int>> per_step_;
  void count_entry(std::int64_t step, int delta);
  bool has_entries(std::int64_t step) const;
  // Recently closed (ended or aborted) steps (bounded, oldest forgotten first) and why (ok
  // for a step that ended),
  // so late messages for them are refused.
  std::unordered_map<std::int64_t, status> closed_;
  std::deque<std::int64_t> closed_order_;
  std::int64_t bytes_ = 0;  // of arrived tensors in entries_
  std::int64_t limit_bytes_;
  bool sweep_armed_ = false;
  bool shut_ = false;
  status shut_reason_;
  mutable std::mutex mutex_;  // guards everything above
};

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::transfer_key_ptr)
