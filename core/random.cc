#include "core/random.h"

#include <random>

namespace troupe {

std::uint64_t random_seed() {
  static thread_local std::mt19937_64 engine{std::random_device{}()};
  return engine();
}

}  // namespace troupe
