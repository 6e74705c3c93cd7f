#include "actors/rendezvous.h"

#include <functional>

namespace troupe::actors {

namespace {

constexpr std::size_t k_remembered_aborts = 4096;

std::size_t hash_of(const placement::rendezvous_key& k) {
  std::hash<std::string> h;
  std::size_t seed = std::hash<std::uint64_t>()(k.send_device_incarnation);
  auto mix = [&](std::size_t v) { seed ^= v + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2); };
  mix(h(k.tensor_name));
  mix(h(k.recv_device));
  mix(h(k.send_device));
  return seed;
}

// The handler running on this thread, if it is a device actor's (active_scope).
thread_local rendezvous_table* active_table = nullptr;
thread_local const runtime_device* active_device = nullptr;

}  // namespace

transfer_key::transfer_key(placement::rendezvous_key key)
    : key_(std::move(key)), hash_(hash_of(key_)), printed_(key_.to_string()) {}

rendezvous_table::active_scope::active_scope(rendezvous_table& table, const runtime_device* device)
    : previous_table_(active_table), previous_device_(active_device) {
  active_table = &table;
  active_device = device;
}

rendezvous_table::active_scope::~active_scope() {
  active_table = previous_table_;
  active_device = previous_device_;
}

rendezvous_table* rendezvous_table::active(const runtime_device* device) {
  return device != nullptr && active_device == device ? active_table : nullptr;
}

void rendezvous_table::send(std::int64_t step, const transfer_key_ptr& key, tensor value) {
  if (is_aborted(step)) return;  // the step is gone; its Recvs were failed
  auto [it, inserted] = entries_.try_emplace({step, key.get()});
  entry& e = it->second;
  if (inserted) {
    e.key = key;
    e.value = std::move(value);
    return;
  }
  if (e.waiting) {
    auto r = std::move(e.waiting);
    entries_.erase(it);
    r(std::move(value));
    return;
  }
  // A second tensor for the same key and step: the partition is wrong. Keep the first.
}

void rendezvous_table::recv(std::int64_t step, const transfer_key_ptr& key, reply<tensor> r) {
  if (auto reason = abort_reason_.find(step); reason != abort_reason_.end()) {
    r(reason->second);
    return;
  }
  auto [it, inserted] = entries_.try_emplace({step, key.get()});
  entry& e = it->second;
  if (inserted) {
    e.key = key;
    e.waiting = std::move(r);
    return;
  }
  if (e.value.initialized()) {
    tensor value = std::move(e.value);
    entries_.erase(it);
    r(std::move(value));
    return;
  }
  r(internal_error("two Recvs wait for ", key->printed(), " in step ", step));
}

void rendezvous_table::cancel(std::int64_t step, const transfer_key_ptr& key) {
  auto it = entries_.find({step, key.get()});
  if (it == entries_.end() || !it->second.waiting) return;
  auto r = std::move(it->second.waiting);
  entries_.erase(it);
  r(cancelled_error("Recv of ", key->key().tensor_name, " from ", key->key().send_device,
                    " was cancelled (step ", step, " aborted)"));
}

void rendezvous_table::abort(std::int64_t step, const status& error) {
  if (abort_reason_.emplace(step, error).second) {
    aborted_order_.push_back(step);
    if (aborted_order_.size() > k_remembered_aborts) {
      abort_reason_.erase(aborted_order_.front());
      aborted_order_.pop_front();
    }
  }
  std::vector<reply<tensor>> to_fail;
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->first.first == step) {
      if (it->second.waiting) to_fail.push_back(std::move(it->second.waiting));
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& r : to_fail) r(error);
}

}  // namespace troupe::actors
