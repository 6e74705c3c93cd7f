// checkpoint: atomic, checksummed, reshardable checkpoints in HDF5 (doc/checkpoints.md).
//
//   auto dir = checkpoint::directory::open("/tmp/run/ckpt", {.keep = 3});
//   checkpoint::snapshot s{.global_step = 200};
//   s.variables.push_back({"dense/kernel", w.type(), w.shape(), {{{0, 0}, w}}});  // one slice
//   auto saved = dir->save(s);                        // committed when it returns ok
//   std::vector<std::string> warnings;
//   auto back = dir->restore_latest({{{"dense/kernel", dtype::float32, {500, 10}, {250, 0}, {250, 10}}}, {}},
//                                   &warnings);       // any slice (reshard), all or nothing
//   auto latest = dir->open_latest(&warnings);        // or open one and read as you like
//
// One file per checkpoint, DIR/ckpt-<step>.h5, that h5py reads as a person expects:
// `h5py.File(path)["variables/dense/kernel"][...]` is the whole value of the variable
// whatever the sharding it was saved from (each shard's slice is written into place), with
// attributes for dtype, shape, global step and the slices it was saved as. A variable whose
// name extends another's (the optimizer slot "dense/kernel/Adam" of "dense/kernel") is at
// `slots/<name>` instead, as an HDF5 dataset cannot contain others. Opaque state (input
// position, random states) goes under `state/<name>`.
//
// The commit protocol (what makes a save atomic): HDF5 builds the file in memory (it never
// writes files itself) while each chunk goes, through the file_system seam, to its place in
// a temporary file as soon as it is built; then HDF5's metadata; the file is fsynced and
// renamed to ckpt-<step>.h5; then DIR/manifest.json, the list of committed checkpoints, is
// rewritten by write_durably. Its rename is the commit point: a crash, a full disk or an
// I/O error before it leaves the previous manifest, which names only complete, fsynced
// files. Older checkpoints beyond `keep` are deleted after the commit.
//
// Checksums: files are in HDF5's 1.10 format, whose metadata HDF5 checksums; every dataset
// of rank >= 1 is chunked with HDF5's Fletcher32 checksum, which HDF5 (and h5py) verify on
// every read; scalars carry a CRC-32C attribute checked by troupe's reader, which reads
// nothing else (see reader::open). The manifest also records each file's size and CRC-32C,
// which restore_latest and open_latest check on a thread beside their reads (before HDF5
// opens a file of the older 1.8 format, which has no metadata checksums); they fall back
// past a damaged checkpoint with a warning that names its file.
//
// Memory: a directory keeps the buffer its last checkpoint was built in (about the size of
// the checkpoint) for the next save.
//
// Thread safety: a directory is used from one thread at a time. Every call does blocking
// file I/O: never call it on a CAF scheduler thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace troupe::checkpoint {

// A piece of a variable: the box [start, start + value.shape()) of its whole value.
struct slice {
  std::vector<std::int64_t> start;  // one entry per dimension (empty for a scalar)
  tensor value;
};

struct variable {
  std::string name;  // "dense/kernel": the dataset variables/dense/kernel
  dtype type = dtype::invalid;
  tensor_shape shape;         // the whole (logical) value's shape
  std::vector<slice> slices;  // together they cover `shape` exactly once
};

struct snapshot {
  std::int64_t global_step = 0;
  std::vector<variable> variables;
  // Opaque named tensors restored as they were: the input pipeline's position, random
  // states. Saved whole under state/<name>.
  std::vector<std::pair<std::string, tensor>> state;
};

struct options {
  int keep = 5;  // committed checkpoints kept; older ones are deleted after a commit
};

struct committed {
  std::int64_t step = 0;
  std::string path;  // the checkpoint file
  std::int64_t bytes = 0;
  std::int64_t unix_seconds = 0;
  std::uint32_t crc32c = 0;  // of the whole file
};

// What a checkpoint holds about one variable.
struct variable_info {
  std::string name;
  std::string dataset;  // its HDF5 path: variables/<name>, or slots/<name> (see above)
  dtype type = dtype::invalid;
  tensor_shape shape;
  // The slices it was saved as (start and extent per dimension): its partitioning then.
  std::vector<std::pair<std::vector<std::int64_t>, tensor_shape>> saved_slices;
};

// One checkpoint file, open for reading. Reads are checked against the file's checksums.
struct read_log;  // internal: what a reader has read and checksummed
struct slice_request;

class reader {
 public:
  // Errors (DATA_LOSS) name the file: missing, truncated, not HDF5, not a troupe checkpoint.
  // Reads only what a checksum covers (HDF5's over its metadata in the 1.10 format that
  // troupe writes, Fletcher32 over chunks, CRC-32C over scalars; not the text attributes,
  // kept for people in HDF5's unchecksummed global heap), so that a damaged file is an
  // error, not a crash. Files of older troupes (the HDF5 1.8 format) have no metadata
  // checksums: directory checks their whole-file CRC-32C before opening them.
  static result<reader> open(const std::string& path);
  // The same, recording in `log` the runs of the file its chunk reads checksum (a
  // directory's whole-file check then reads only the rest).
  static result<reader> open(const std::string& path, std::shared_ptr<read_log> log);
  ~reader();
  reader(reader&&) noexcept;
  reader& operator=(reader&&) noexcept;

  const std::string& path() const;
  std::int64_t global_step() const;
  const std::vector<variable_info>& variables() const;  // sorted by name
  const variable_info* find(const std::string& name) const;
  const std::vector<std::string>& state_names() const;

  // The box [start, start + extent) of variable `name`: restore onto any sharding.
  result<tensor> read(const std::string& name, const std::vector<std::int64_t>& start,
                      const tensor_shape& extent) const;
  result<tensor> read(const std::string& name) const;  // the whole value
  // The box at `start` of out's shape into `out`, which has the variable's dtype.
  status read_into(const std::string& name, const std::vector<std::int64_t>& start, tensor& out) const;
  result<tensor> state(const std::string& name) const;
  // Reads every dataset: every checksum of the file.
  status verify() const;

 private:
  struct impl;
  friend result<std::vector<tensor>> read_all(const reader& from, const std::vector<slice_request>& requests);
  explicit reader(std::unique_ptr<impl> impl);
  std::unique_ptr<impl> impl_;
};

// A request to restore one slice of one variable, as the variable is now (its dtype and
// whole shape must match the checkpoint's).
struct slice_request {
  std::string name;
  dtype type = dtype::invalid;
  tensor_shape shape;               // the variable's whole shape
  std::vector<std::int64_t> start;  // the slice this shard holds
  tensor_shape extent;
};

// Reads every request, or none: the first missing variable, dtype or shape mismatch or
// damaged data is an error naming the variable and the file, and nothing is returned, so
// that a failed restore changes no variable.
result<std::vector<tensor>> read_all(const reader& from, const std::vector<slice_request>& requests);

// The memory a checkpoint file is built in before it is written (kept by a directory
// from one save to the next).
struct image_buffer;

// What a restore asks for: slices of variables, and state tensors by name.
struct restore_request {
  std::vector<slice_request> variables;
  std::vector<std::string> state;
  // A state the checkpoint lacks comes back as an uninitialized tensor instead of an
  // error (state that may start afresh: an input pipeline the checkpoint did not have).
  bool missing_state_ok = false;
};

// What it got, in the order asked.
struct restored {
  std::int64_t global_step = 0;
  std::string path;  // the checkpoint file read
  std::vector<tensor> variables;
  std::vector<tensor> state;
};

class directory {
 public:
  ~directory();
  directory(directory&&) noexcept;
  directory& operator=(directory&&) noexcept;

  // Creates `path` when it does not exist. File operations go through `fs`.
  static result<directory> open(const std::string& path, options opts = {},
                                file_system& fs = file_system::real());

  const std::string& path() const { return path_; }

  // Writes and commits `s` as ckpt-<global_step>.h5 (replacing a committed checkpoint of
  // the same step). On error nothing committed changes and the error says what failed.
  result<committed> save(const snapshot& s);

  // The committed checkpoints, newest first (from the manifest; empty when none).
  result<std::vector<committed>> list() const;

  // The newest committed checkpoint that opens and verifies; each damaged one skipped adds
  // a warning naming its file. NOT_FOUND when none is committed, DATA_LOSS when every one
  // is damaged.
  result<reader> open_latest(std::vector<std::string>* warnings) const;

  // Reads `request` from the newest committed checkpoint that has it undamaged (every
  // chunk read is checked, and the whole file's CRC-32C). A damaged checkpoint (DATA_LOSS) is
  // skipped with a warning naming it; a request the newest readable one cannot satisfy
  // (a missing variable, another dtype or shape) is an error naming the variable and the
  // file. All or nothing: on error no tensor is returned.
  result<restored> restore_latest(const restore_request& request, std::vector<std::string>* warnings) const;

 private:
  directory(std::string path, options opts, file_system* fs);
  status write_manifest(const std::vector<committed>& entries);

  std::string path_;
  options opts_;
  file_system* fs_;
  std::unique_ptr<image_buffer> image_;  // kept between saves (see checkpoint.cc)
};

// Writes an HDF5 checkpoint file holding `s` at `path` through `fs` and fsyncs it (what
// save does before it renames and commits it). Checks that the slices of each variable
// tile its shape; errors name the variable. `reuse`: memory kept from an earlier call.
status write_checkpoint_file(const snapshot& s, const std::string& path, file_system& fs = file_system::real(),
                             image_buffer* reuse = nullptr);

}  // namespace troupe::checkpoint
