#include "actors/rendezvous.h"

#include <algorithm>
#include <functional>
#include <mutex>

#include "core/env.h"

namespace troupe::actors {

namespace {

constexpr std::size_t k_remembered_closed = 4096;

std::size_t hash_of(const placement::rendezvous_key& k) {
  std::hash<std::string> h;
  std::size_t seed = std::hash<std::uint64_t>()(k.send_device_incarnation);
  auto mix = [&](std::size_t v) { seed ^= v + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2); };
  mix(h(k.tensor_name));
  mix(h(k.recv_device));
  mix(h(k.send_device));
  mix(std::hash<std::uint64_t>()(k.recv_device_incarnation));
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

void rendezvous_table::remember_closed(std::int64_t step, const status& reason) {
  if (closed_.emplace(step, reason).second) {
    closed_order_.push_back(step);
    if (closed_order_.size() > k_remembered_closed) {
      closed_.erase(closed_order_.front());
      closed_order_.pop_front();
    }
  }
}

void rendezvous_table::count_entry(std::int64_t step, int delta) {
  for (std::size_t i = 0; i < per_step_.size(); ++i) {
    if (per_step_[i].first != step) continue;
    if ((per_step_[i].second += delta) == 0) {
      per_step_[i] = per_step_.back();
      per_step_.pop_back();
    }
    return;
  }
  per_step_.emplace_back(step, delta);
}

bool rendezvous_table::has_entries(std::int64_t step) const {
  return std::any_of(per_step_.begin(), per_step_.end(), [step](const auto& c) { return c.first == step; });
}

rendezvous_table::entry_map::iterator rendezvous_table::erase(entry_map::iterator it) {
  count_entry(it->first.first, -1);
  return entries_.erase(it);
}

tensor rendezvous_table::take(entry& e) {
  bytes_ -= static_cast<std::int64_t>(e.value.byte_size());
  return std::move(e.value);
}

status rendezvous_table::send(std::int64_t step, const transfer_key_ptr& key, tensor value, std::string_view device) {
  reply<tensor> waiting;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shut_ || closed_.count(step) > 0) return status();  // the step is gone; its Recvs were failed
    auto [it, inserted] = entries_.try_emplace({step, key.get()});
    entry& e = it->second;
    if (inserted) count_entry(step, 1);
    if (!inserted && e.waiting) {
      waiting = std::move(e.waiting);
      erase(it);
    } else if (!inserted) {
      return internal_error("a second tensor arrived for ", key->printed(), " in step ", step,
                            ": each transfer of a step carries one tensor");
    } else {
      const auto bytes = static_cast<std::int64_t>(value.byte_size());
      if (bytes > limit_bytes_ - bytes_) {
        erase(it);
        return resource_exhausted_error("the rendezvous of ",
                                        device.empty() ? std::string("a device") : std::string(device), " would hold ",
                                        bytes_ + bytes, " bytes of tensors that no Recv has asked for yet, "
                                        "over its bound of ", limit_bytes_, " bytes (", key->printed(), " in step ",
                                        step, ")");
      }
      e.key = key;
      e.value = std::move(value);
      e.arrived = env::now();
      bytes_ += bytes;
      return status();
    }
  }
  waiting(std::move(value));  // outside the lock: the reply may come back to the table
  return status();
}

void rendezvous_table::recv(std::int64_t step, const transfer_key_ptr& key, reply<tensor> r) {
  result<tensor> answer = internal_error("two Recvs wait for ", key->printed(), " in step ", step);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shut_) {
      answer = shut_reason_;
    } else if (auto reason = closed_.find(step); reason != closed_.end()) {
      answer = reason->second.ok() ? ended_error(step) : reason->second;
    } else {
      auto [it, inserted] = entries_.try_emplace({step, key.get()});
      entry& e = it->second;
      if (inserted) {
        count_entry(step, 1);
        e.key = key;
        e.waiting = std::move(r);
        return;
      }
      if (e.value.initialized()) {
        answer = take(e);
        erase(it);
      }
    }
  }
  r(std::move(answer));  // outside the lock: the reply may come back to the table
}

void rendezvous_table::cancel(std::int64_t step, const transfer_key_ptr& key) {
  reply<tensor> r;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find({step, key.get()});
    if (it == entries_.end() || !it->second.waiting) return;
    r = std::move(it->second.waiting);
    erase(it);
  }
  r(cancelled_error("Recv of ", key->key().tensor_name, " from ", key->key().send_device,
                    " was cancelled (step ", step, " aborted)"));
}

void rendezvous_table::abort_locked(std::int64_t step, const status& error, dropped& out) {
  remember_closed(step, error);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->first.first == step) {
      take_out(it->second, out);
      it = erase(it);
    } else {
      ++it;
    }
  }
}

void rendezvous_table::take_out(entry& e, dropped& out) {
  if (e.waiting) out.to_fail.push_back(std::move(e.waiting));
  else out.tensors.push_back(take(e));
}

void rendezvous_table::abort(std::int64_t step, const status& error) {
  dropped out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    abort_locked(step, error, out);
  }
  for (auto& r : out.to_fail) r(error);
}

void rendezvous_table::shut(const status& reason) {
  dropped out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shut_) return;
    shut_ = true;
    shut_reason_ = reason;
    for (auto& [key, e] : entries_) take_out(e, out);
    entries_.clear();
    per_step_.clear();
  }
  for (auto& r : out.to_fail) r(reason);
}

status rendezvous_table::ended_error(std::int64_t step) {
  return aborted_error("step ", step, " has ended on this device");
}

void rendezvous_table::close(std::int64_t step) {
  dropped out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // The usual case, nothing left: remembered as ended (ok), the error built only if a
    // late Recv asks.
    if (!has_entries(step)) return remember_closed(step, status());
    abort_locked(step, ended_error(step), out);
  }
  const status error = ended_error(step);
  for (auto& r : out.to_fail) r(error);
}

int rendezvous_table::sweep(clock::time_point cutoff, const std::function<bool(std::int64_t)>& is_running) {
  dropped out;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    entry& e = it->second;
    if (!e.waiting && e.arrived < cutoff && !is_running(it->first.first)) {
      out.tensors.push_back(take(e));
      it = erase(it);
    } else {
      ++it;
    }
  }
  return static_cast<int>(out.tensors.size());
}

bool rendezvous_table::arm_sweep() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (sweep_armed_ || entries_.empty()) return false;
  sweep_armed_ = true;
  return true;
}

bool rendezvous_table::keep_sweeping() {
  std::lock_guard<std::mutex> lock(mutex_);
  sweep_armed_ = !entries_.empty();
  return sweep_armed_;
}

bool rendezvous_table::is_aborted(std::int64_t step) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return shut_ || closed_.count(step) > 0;
}

std::pair<std::size_t, std::int64_t> rendezvous_table::waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {entries_.size(), bytes_};
}

std::size_t rendezvous_table::num_waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

std::int64_t rendezvous_table::bytes_waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

}  // namespace troupe::actors
