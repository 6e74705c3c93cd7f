#include "core/file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace troupe {

result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found_error("cannot open '", path, "': ", std::strerror(errno));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return data_loss_error("reading '", path, "' failed");
  return contents.str();
}

status write_file(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return not_found_error("cannot open '", path, "' for writing: ", std::strerror(errno));
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.close();
  if (!out) return data_loss_error("writing '", path, "' failed");
  return status();
}

}  // namespace troupe
