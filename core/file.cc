#include "core/file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
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

namespace {

// An errno as a status: a full disk and quotas are RESOURCE_EXHAUSTED, a missing path
// NOT_FOUND, permissions PERMISSION_DENIED, the rest DATA_LOSS (the write did not happen).
status errno_error(int error, std::string_view what, const std::string& path) {
  const std::string message = str_cat(what, " '", path, "': ", std::strerror(error));
  switch (error) {
    case ENOSPC:
    case EDQUOT: return resource_exhausted_error(message);
    case ENOENT:
    case ENOTDIR: return not_found_error(message);
    case EACCES:
    case EPERM:
    case EROFS: return permission_denied_error(message);
    default: return data_loss_error(message);
  }
}

class posix_file final : public writable_file {
 public:
  posix_file(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~posix_file() override {
    if (fd_ >= 0) ::close(fd_);
  }
  // Large appends go in pieces of 64 MB, each handed to the disk at once (sync_file_range
  // starts its writeback): the disk writes while the next piece is copied, and a later
  // sync() has little left to wait for.
  status append(std::string_view bytes) override {
    constexpr size_t k_piece = 64 << 20;
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd_, bytes.data(), std::min(bytes.size(), k_piece));
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno_error(errno, "writing", path_);
      }
      if (static_cast<size_t>(n) == k_piece) ::sync_file_range(fd_, written_, n, SYNC_FILE_RANGE_WRITE);
      written_ += n;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return status();
  }
  // Each write is handed to the disk at once, as append's pieces are.
  status write_at(std::int64_t offset, std::string_view bytes) override {
    const off_t begin = static_cast<off_t>(offset);
    while (!bytes.empty()) {
      const ssize_t n = ::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno_error(errno, "writing", path_);
      }
      offset += n;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    if (offset - begin >= (1 << 20)) ::sync_file_range(fd_, begin, static_cast<off_t>(offset) - begin, SYNC_FILE_RANGE_WRITE);
    return status();
  }
  status sync() override {
    if (::fdatasync(fd_) != 0) return errno_error(errno, "syncing", path_);
    return status();
  }
  status close() override {
    if (fd_ < 0) return status();
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return errno_error(errno, "closing", path_);
    return status();
  }

 private:
  int fd_;
  std::string path_;
  off_t written_ = 0;
};

class posix_file_system final : public file_system {
 public:
  result<std::unique_ptr<writable_file>> create(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return errno_error(errno, "cannot create", path);
    return std::unique_ptr<writable_file>(new posix_file(fd, path));
  }
  status rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return errno_error(errno, str_cat("renaming '", from, "' to"), to);
    return status();
  }
  status remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return errno_error(errno, "removing", path);
    return status();
  }
  status sync_dir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno_error(errno, "cannot open directory", dir);
    const int rc = ::fsync(fd);
    const int error = errno;
    ::close(fd);
    if (rc != 0) return errno_error(error, "syncing directory", dir);
    return status();
  }
  status create_dir(const std::string& dir) override {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) return errno_error(error.value(), "cannot create directory", dir);
    return status();
  }
  result<std::vector<std::string>> list_dir(const std::string& dir) override {
    DIR* handle = ::opendir(dir.c_str());
    if (handle == nullptr) return errno_error(errno, "cannot list directory", dir);
    std::vector<std::string> names;
    while (const dirent* entry = ::readdir(handle)) {
      const std::string_view name = entry->d_name;
      if (name != "." && name != "..") names.emplace_back(name);
    }
    ::closedir(handle);
    std::sort(names.begin(), names.end());
    return names;
  }
  result<std::int64_t> file_size(const std::string& path) override {
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) return errno_error(errno, "cannot stat", path);
    return static_cast<std::int64_t>(info.st_size);
  }
};

}  // namespace

file_system& file_system::real() {
  static posix_file_system fs;
  return fs;
}

std::string dir_name(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

status write_durably(file_system& fs, const std::string& path, std::string_view contents) {
  static std::atomic<std::uint64_t> counter{0};
  const std::string dir = dir_name(path);
  const std::string temporary =
      str_cat(dir, "/.", base_name(path), ".tmp-", static_cast<long>(::getpid()), "-", counter.fetch_add(1));
  auto written = [&]() -> status {
    auto file = fs.create(temporary);
    if (!file.ok()) return file.error();
    TROUPE_RETURN_IF_ERROR((*file)->append(contents));
    TROUPE_RETURN_IF_ERROR((*file)->sync());
    return (*file)->close();
  }();
  if (written.ok()) written = fs.rename(temporary, path);
  if (!written.ok()) {
    (void)fs.remove(temporary);
    return written;
  }
  return fs.sync_dir(dir);
}

}  // namespace troupe
