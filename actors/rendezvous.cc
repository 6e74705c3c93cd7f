#include "actors/rendezvous.h"

#include <functional>

namespace troupe::actors {

namespace {
constexpr std::size_t k_remembered_aborts = 4096;
}

std::size_t rendezvous_table::key_hash::operator()(
    const std::pair<std::int64_t, const placement::rendezvous_key*>& k) const {
  std::hash<std::string> h;
  std::size_t seed = std::hash<std::int64_t>()(k.first);
  auto mix = [&](std::size_t v) { seed ^= v + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2); };
  mix(h(k.second->tensor_name));
  mix(h(k.second->recv_device));
  mix(h(k.second->send_device));
  mix(std::hash<std::uint64_t>()(k.second->send_device_incarnation));
  return seed;
}

void rendezvous_table::send(std::int64_t step, const transfer_key& key, tensor value) {
  if (aborted_.count(step) > 0) return;  // the step is gone; its Recvs were failed
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

void rendezvous_table::recv(std::int64_t step, const transfer_key& key, reply<tensor> r) {
  if (aborted_.count(step) > 0) {
    auto reason = abort_reason_.find(step);
    r(reason != abort_reason_.end() ? reason->second : aborted_error("step ", step, " was aborted"));
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
  r(internal_error("two Recvs wait for ", key->to_string(), " in step ", step));
}

void rendezvous_table::cancel(std::int64_t step, const transfer_key& key) {
  auto it = entries_.find({step, key.get()});
  if (it == entries_.end() || !it->second.waiting) return;
  auto r = std::move(it->second.waiting);
  entries_.erase(it);
  r(cancelled_error("Recv of ", key->tensor_name, " from ", key->send_device, " was cancelled (step ", step,
                    " aborted)"));
}

void rendezvous_table::abort(std::int64_t step, const status& error) {
  if (aborted_.insert(step).second) {
    aborted_order_.push_back(step);
    abort_reason_.emplace(step, error);
    if (aborted_order_.size() > k_remembered_aborts) {
      aborted_.erase(aborted_order_.front());
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
