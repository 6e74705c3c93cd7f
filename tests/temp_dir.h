// A fresh folder under the system's temporary directory for one test, removed with
// everything in it when the object goes.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace troupe::testing {

struct temp_dir {
  std::string path;
  explicit temp_dir(const std::string& prefix = "troupe-test") {
    static int counter = 0;
    path = (std::filesystem::temp_directory_path() /
            (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++)))
               .string();
    std::filesystem::remove_all(path);
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

}  // namespace troupe::testing
