// rendezvous: where a tensor sent across devices waits for its Recv, or a Recv waits for
// its tensor. A producer never blocks: _Send posts a message to the destination device's
// actor, which either hands the tensor to the Recv already waiting there or keeps it
// until the Recv asks. A Recv that asks first is parked with its reply. Entries are keyed
// by (step id, the transfer's structured key); an aborted step fails its parked Recvs and
// drops its tensors, and anything arriving later for it is refused.
//
// This table belongs to one device actor and is used only from its handlers: no locks.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <unordered_map>

#include "actors/reply.h"
#include "core/tensor.h"
#include "placement/partition.h"

namespace troupe::actors {

using transfer_key = std::shared_ptr<const placement::rendezvous_key>;

using rv_send_atom = caf::atom_constant<caf::atom("rvsend")>;
using rv_recv_atom = caf::atom_constant<caf::atom("rvrecv")>;
using rv_cancel_atom = caf::atom_constant<caf::atom("rvcancel")>;

class rendezvous_table {
 public:
  // A tensor arrived for (step, key).
  void send(std::int64_t step, const transfer_key& key, tensor value);
  // A Recv asks for (step, key): answered now or parked.
  void recv(std::int64_t step, const transfer_key& key, reply<tensor> r);
  // The Recv's step cancelled it: fail it with `cancelled` if still parked.
  void cancel(std::int64_t step, const transfer_key& key);
  // Fails every parked Recv of `step` with `error`, drops its tensors, and refuses later
  // traffic for it.
  void abort(std::int64_t step, const status& error);

  bool is_aborted(std::int64_t step) const { return aborted_.count(step) > 0; }
  std::size_t num_waiting() const { return entries_.size(); }

 private:
  struct key_hash {
    std::size_t operator()(const std::pair<std::int64_t, const placement::rendezvous_key*>& k) const;
  };
  struct key_equal {
    bool operator()(const std::pair<std::int64_t, const placement::rendezvous_key*>& a,
                    const std::pair<std::int64_t, const placement::rendezvous_key*>& b) const {
      return a.first == b.first && *a.second == *b.second;
    }
  };
  struct entry {
    transfer_key key;   // keeps the pointer in the map key alive
    tensor value;       // arrived, not yet received
    reply<tensor> waiting;
  };
  std::unordered_map<std::pair<std::int64_t, const placement::rendezvous_key*>, entry, key_hash, key_equal>
      entries_;
  // Recently aborted steps (bounded), so late messages for them are refused.
  std::set<std::int64_t> aborted_;
  std::deque<std::int64_t> aborted_order_;
  std::unordered_map<std::int64_t, status> abort_reason_;
};

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::transfer_key)
