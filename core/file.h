// Whole-file reads and writes with status errors that name the path.
#pragma once

#include <string>

#include "core/status.h"

namespace troupe {

result<std::string> read_file(const std::string& path);
status write_file(const std::string& path, const std::string& contents);

}  // namespace troupe
