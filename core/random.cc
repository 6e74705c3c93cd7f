#include "core/random.h"

#include "core/env.h"

namespace troupe {

std::uint64_t random_seed() { return env::random_seed(); }

}  // namespace troupe
