// A free loopback port for tests and benchmarks that start servers at ports they must
// name in advance (cluster files): bound and released, below the ephemeral range (32768
// and up), so that outgoing connections and port-0 listeners of programs running beside
// them never take it between now and its use.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <random>

namespace troupe::testing {

inline int free_port() {
  static std::mt19937 pick(std::random_device{}());
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = std::uniform_int_distribution<int>(20000, 31999)(pick);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (free) return port;
  }
  return 0;
}

}  // namespace troupe::testing
