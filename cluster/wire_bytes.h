// wire_bytes: the bodies of what crosses between processes, built and read field by field
// (native little-endian integers, u32-length-prefixed strings): the tensor links' frames
// (cluster/transport.cc) and the steps sent over them (cluster/remote_task.cc). Internal
// to cluster/.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace troupe::cluster {

// A body being built.
struct body_writer {
  std::string bytes;
  template <typename T>
  void put(T value) {
    bytes.append(reinterpret_cast<const char*>(&value), sizeof value);
  }
  void put_string(const std::string& s) {
    put(static_cast<std::uint32_t>(s.size()));
    bytes += s;
  }
};

// A body being read; every read checks the length (a short body is a broken one: `ok`
// turns false and stays so).
struct body_reader {
  std::string_view bytes;
  bool ok = true;
  template <typename T>
  T get() {
    T value{};
    if (bytes.size() < sizeof value) {
      ok = false;
      return value;
    }
    std::memcpy(&value, bytes.data(), sizeof value);
    bytes.remove_prefix(sizeof value);
    return value;
  }
  std::string get_string() {
    const auto n = get<std::uint32_t>();
    if (!ok || bytes.size() < n) {
      ok = false;
      return {};
    }
    std::string s(bytes.substr(0, n));
    bytes.remove_prefix(n);
    return s;
  }
};

}  // namespace troupe::cluster
