#include "core/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>

namespace troupe {
namespace {

constexpr std::size_t k_token_bytes = 2 * sizeof(std::uint64_t);
constexpr std::size_t k_largest = std::size_t{1} << 40;

}  // namespace

std::unique_ptr<shared_region> shared_region::create(const char* name, std::size_t bytes) {
  if (bytes < k_token_bytes || bytes > k_largest) return nullptr;
  std::unique_ptr<shared_region> r(new shared_region());
  r->fd_ = ::memfd_create(name, MFD_CLOEXEC);
  if (r->fd_ < 0 || ::ftruncate(r->fd_, static_cast<off_t>(bytes)) != 0) return nullptr;
  void* at = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, r->fd_, 0);
  if (at == MAP_FAILED) return nullptr;
  r->base_ = static_cast<char*>(at);
  r->bytes_ = bytes;
  std::random_device random;
  for (std::uint64_t& t : r->token_) t = (std::uint64_t{random()} << 32) ^ random();
  std::memcpy(r->base_, r->token_, k_token_bytes);
  return r;
}

std::unique_ptr<shared_region> shared_region::open(std::uint32_t pid, int fd, const std::uint64_t token[2],
                                                   std::size_t bytes, bool writable) {
  if (pid == 0 || fd < 0 || bytes < k_token_bytes || bytes > k_largest) return nullptr;
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int file = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (file < 0) return nullptr;
  struct stat st {};
  void* at = MAP_FAILED;
  if (::fstat(file, &st) == 0 && static_cast<std::size_t>(st.st_size) == bytes) {
    at = ::mmap(nullptr, bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED | MAP_NORESERVE, file, 0);
  }
  ::close(file);  // the mapping keeps the memory
  if (at == MAP_FAILED) return nullptr;
  std::unique_ptr<shared_region> r(new shared_region());
  r->base_ = static_cast<char*>(at);
  r->bytes_ = bytes;
  std::memcpy(r->token_, r->base_, k_token_bytes);
  if (r->token_[0] != token[0] || r->token_[1] != token[1]) return nullptr;
  return r;
}

shared_region::~shared_region() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace troupe
