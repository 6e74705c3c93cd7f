// Files: whole-file reads and writes with status errors that name the path, and the seam
// through which durable writes go (file_system), as leveldb's Env: the real one below, a
// fault-injecting one in tests (and, later, in the fault injector and the simulator).
//
// Durable writes follow one protocol (write_durably): write a temporary file beside the
// target, fsync it, rename it over the target, fsync the directory. A crash at any instant
// leaves either the old file or the new one, never a torn one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace troupe {

result<std::string> read_file(const std::string& path);
status write_file(const std::string& path, const std::string& contents);

// A file being written, either by appends or by writes at offsets (not both). Every call
// names the path in its error.
class writable_file {
 public:
  virtual ~writable_file() = default;
  virtual status append(std::string_view bytes) = 0;
  // Writes `bytes` at `offset` (pwrite: the file grows as needed, a hole reads as zeros).
  virtual status write_at(std::int64_t offset, std::string_view bytes) = 0;
  virtual status sync() = 0;   // fsync: the bytes appended so far are on disk
  virtual status close() = 0;  // also when the destructor would (errors are lost there)
};

class file_system {
 public:
  virtual ~file_system() = default;
  // Creates (or truncates) `path` for writing.
  virtual result<std::unique_ptr<writable_file>> create(const std::string& path) = 0;
  // Atomically replaces `to` by `from` (POSIX rename).
  virtual status rename(const std::string& from, const std::string& to) = 0;
  virtual status remove(const std::string& path) = 0;
  // fsync of a directory: renames and removals in it are on disk.
  virtual status sync_dir(const std::string& dir) = 0;
  virtual status create_dir(const std::string& dir) = 0;  // with parents; ok when it exists
  // Names (not paths) of the entries of `dir`, sorted.
  virtual result<std::vector<std::string>> list_dir(const std::string& dir) = 0;
  virtual result<std::int64_t> file_size(const std::string& path) = 0;

  // The operating system's files.
  static file_system& real();
};

// Writes `contents` to `path` through `fs` as the header says: a temporary file beside it
// (".<name>.tmp-<pid>-<n>"), fsync, rename, fsync of the directory. On error the temporary
// file is removed (when `fs` still can) and `path` is unchanged.
status write_durably(file_system& fs, const std::string& path, std::string_view contents);

// "dir/name" -> "dir" ("." for a bare name); "dir/name" -> "name".
std::string dir_name(const std::string& path);
std::string base_name(const std::string& path);

}  // namespace troupe
