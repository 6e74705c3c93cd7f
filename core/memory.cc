#include "core/memory.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace troupe {

account_ref::account_ref(memory_account* a) : account_(a) {}
account_ref::account_ref(const account_ref& other) : account_(other.account_) {
  if (account_ != nullptr) account_->ref();
}
account_ref& account_ref::operator=(const account_ref& other) {
  if (other.account_ != nullptr) other.account_->ref();
  if (account_ != nullptr) account_->unref();
  account_ = other.account_;
  return *this;
}
account_ref::~account_ref() {
  if (account_ != nullptr) account_->unref();
}

std::int64_t default_memory_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return std::int64_t{8} << 30;
  return static_cast<std::int64_t>(static_cast<double>(pages) * static_cast<double>(page_size) * 0.8);
}

result<std::int64_t> parse_memory_size(const std::string& text, const std::string& what) {
  auto bad = [&] {
    return invalid_argument_error(what, "='", text,
                                  "' is not a memory size: expected bytes with an optional K, M, G or T suffix "
                                  "(8G, 512M) or a percentage of physical memory (50%)");
  };
  if (text.empty()) return bad();
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || !std::isfinite(value) || value <= 0) return bad();
  std::string suffix(end);
  double bytes = value;
  if (suffix == "%") {
    if (value > 100) return bad();
    bytes = value / 0.8 / 100 * static_cast<double>(default_memory_limit());
  } else if (suffix.size() == 1 || (suffix.size() == 2 && (suffix[1] == 'B' || suffix[1] == 'b'))) {
    const char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0])));
    const std::string units = "KMGT";
    const auto power = units.find(unit);
    if (power == std::string::npos) return bad();
    bytes = value * std::pow(1024.0, static_cast<double>(power + 1));
  } else if (!suffix.empty()) {
    return bad();
  }
  if (bytes < 1 || bytes > 9.0e18) return bad();
  return static_cast<std::int64_t>(bytes);
}

result<std::int64_t> memory_limit_from_environment() {
  const char* v = std::getenv("TROUPE_MEMORY_LIMIT");
  if (v == nullptr || v[0] == '\0') return default_memory_limit();
  return parse_memory_size(v, "TROUPE_MEMORY_LIMIT");
}

std::string describe_bytes(std::int64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 6) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return str_cat(bytes, " bytes");
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f %s", value, units[unit]);
  return str_cat(buffer, " (", bytes, " bytes)");
}

memory_account& memory_account::process() {
  static memory_account* account = [] {
    auto limit = memory_limit_from_environment();
    return new memory_account("this process", limit.ok() ? *limit : default_memory_limit(), nullptr);
  }();
  return *account;
}

account_ref memory_account::create(std::string name, std::int64_t limit, memory_account* parent) {
  return account_ref(new memory_account(std::move(name), limit, parent));
}

bool memory_account::try_charge(std::int64_t bytes) {
  std::int64_t used = in_use_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_ - used) return false;
  } while (!in_use_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  std::int64_t peak = peak_.load(std::memory_order_relaxed);
  while (used + bytes > peak && !peak_.compare_exchange_weak(peak, used + bytes, std::memory_order_relaxed)) {
  }
  return true;
}

void memory_account::charge(std::int64_t bytes) {
  auto refuse = [&](const memory_account& full) {
    throw allocation_error(str_cat("cannot allocate ", describe_bytes(bytes)),
                           str_cat("over the memory limit of ", full.name_, " (", describe_bytes(full.limit_),
                                   ", of which ", describe_bytes(full.in_use()),
                                   " in use; set TROUPE_MEMORY_LIMIT or the cluster's memory_limit)"));
  };
  if (!try_charge(bytes)) refuse(*this);
  if (parent_ != nullptr && !parent_->try_charge(bytes)) {
    release_own(bytes);
    refuse(*parent_);
  }
}

void memory_account::release(std::int64_t bytes) {
  release_own(bytes);
  if (parent_ != nullptr) parent_->release_own(bytes);
}

void memory_account::unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

namespace {
thread_local memory_account* current = nullptr;
}  // namespace

memory_account& current_account() { return current != nullptr ? *current : memory_account::process(); }

account_scope::account_scope(memory_account* account) : previous_(current) {
  if (account != nullptr) current = account;
}
account_scope::~account_scope() { current = previous_; }

}  // namespace troupe
