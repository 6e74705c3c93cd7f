#include "checkpoint/checkpoint.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/hdf5.h"
#include "checkpoint/manifest.pb.h"
#include "core/buffer.h"
#include "core/crc32c.h"
#include "graph/text_proto.h"

namespace troupe::checkpoint {

// A run of a checkpoint file a reader has read and checksummed.
struct file_piece {
  std::int64_t offset = 0;
  std::int64_t length = 0;
  std::uint32_t crc = 0;  // CRC-32C of its bytes
};

// What the reads of one restore have checksummed, so that the whole-file check reads only
// the rest of the file (every byte is read once).
struct read_log {
  std::mutex mutex;
  std::vector<file_piece> pieces;
};

namespace {

using hdf5::handle;

constexpr const char* k_format = "troupe-checkpoint";
constexpr std::int64_t k_format_version = 1;
constexpr const char* k_manifest = "manifest.json";
constexpr std::size_t k_chunk_bytes = 4 << 20;  // target size of a checksummed chunk

std::string file_name_of(std::int64_t step) { return str_cat("ckpt-", step, ".h5"); }

// A variable name is a path below variables/: non-empty parts separated by single '/'.
status check_name(const std::string& name, std::string_view kind) {
  if (name.empty()) return invalid_argument_error("a ", kind, " has an empty name");
  std::size_t begin = 0;
  while (begin <= name.size()) {
    const std::size_t end = std::min(name.find('/', begin), name.size());
    const std::string_view part(name.data() + begin, end - begin);
    if (part.empty() || part == "." || part == "..") {
      return invalid_argument_error(kind, " name '", name, "' is not a path of names separated by single '/'");
    }
    begin = end + 1;
  }
  return status();
}

// Where each variable's dataset goes: variables/<name>, except a variable whose name
// extends another variable's ("dense/kernel/Adam" beside "dense/kernel": an optimizer
// slot, the usual case), which goes to slots/<name>, since an HDF5 dataset cannot hold
// others. A name extending two others (a, a/b, a/b/c) has no place: an error.
result<std::vector<std::string>> dataset_paths(const std::vector<variable>& variables) {
  std::set<std::string> names;
  for (const variable& v : variables) names.insert(v.name);
  auto extended = [&](const std::string& name) {
    std::vector<std::string> prefixes;
    for (std::size_t slash = name.find('/'); slash != std::string::npos; slash = name.find('/', slash + 1)) {
      if (names.count(name.substr(0, slash)) > 0) prefixes.push_back(name.substr(0, slash));
    }
    return prefixes;
  };
  std::vector<std::string> paths;
  for (const variable& v : variables) {
    auto prefixes = extended(v.name);
    if (prefixes.size() > 1) {
      return invalid_argument_error("variable '", v.name, "' extends two saved variables, '", prefixes[0], "' and '",
                                    prefixes[1], "': a checkpoint has no place for it (variables/<name> holds ",
                                    "variables, slots/<name> those whose name extends one other)");
    }
    paths.push_back((prefixes.empty() ? "variables/" : "slots/") + v.name);
  }
  return paths;
}

std::vector<hsize_t> hsize_dims(const std::vector<std::int64_t>& dims) {
  return std::vector<hsize_t>(dims.begin(), dims.end());
}

// Chunk dimensions of about k_chunk_bytes: whole inner dimensions, part of one, ones before.
std::vector<hsize_t> chunk_dims(const tensor_shape& shape, std::size_t element_size) {
  const int rank = shape.rank();
  std::vector<hsize_t> chunk(static_cast<std::size_t>(rank), 1);
  const std::int64_t target = std::max<std::int64_t>(1, static_cast<std::int64_t>(k_chunk_bytes / element_size));
  std::int64_t inner = 1;
  for (int i = rank - 1; i >= 0; --i) {
    const std::int64_t d = shape.dim(i);
    if (inner * d <= target) {
      chunk[static_cast<std::size_t>(i)] = static_cast<hsize_t>(d);
      inner *= d;
    } else {
      chunk[static_cast<std::size_t>(i)] = static_cast<hsize_t>(std::max<std::int64_t>(1, target / inner));
      break;
    }
  }
  return chunk;
}

// The slices of `v` tile its shape: each inside it, of its dtype, none overlapping, and
// their elements add up to the whole.
status check_slices(const variable& v) {
  if (v.slices.empty()) return invalid_argument_error("variable '", v.name, "' has no slices to save");
  const int rank = v.shape.rank();
  std::int64_t covered = 0;
  for (std::size_t i = 0; i < v.slices.size(); ++i) {
    const slice& s = v.slices[i];
    if (!s.value.initialized() || s.value.type() != v.type) {
      return invalid_argument_error("variable '", v.name, "' slice ", i, " is not a ", dtype_name(v.type), " tensor");
    }
    if (static_cast<int>(s.start.size()) != rank || s.value.rank() != rank) {
      return invalid_argument_error("variable '", v.name, "' slice ", i, " has rank ", s.value.rank(), " (start ",
                                    s.start.size(), ") but the variable has rank ", rank);
    }
    for (int d = 0; d < rank; ++d) {
      const std::int64_t begin = s.start[static_cast<std::size_t>(d)];
      if (begin < 0 || begin + s.value.dim(d) > v.shape.dim(d)) {
        return invalid_argument_error("variable '", v.name, "' slice ", i, " at dimension ", d, " covers [", begin,
                                      ", ", begin + s.value.dim(d), ") outside its shape ", v.shape.to_string());
      }
    }
    for (std::size_t j = 0; j < i; ++j) {
      const slice& o = v.slices[j];
      bool overlap = s.value.num_elements() > 0 && o.value.num_elements() > 0;
      for (int d = 0; d < rank && overlap; ++d) {
        const std::int64_t a = s.start[static_cast<std::size_t>(d)], b = o.start[static_cast<std::size_t>(d)];
        overlap = a < b + o.value.dim(d) && b < a + s.value.dim(d);
      }
      if (overlap) return invalid_argument_error("variable '", v.name, "' slices ", j, " and ", i, " overlap");
    }
    covered += s.value.num_elements();
  }
  if (covered != v.shape.num_elements()) {
    return invalid_argument_error("variable '", v.name, "' slices cover ", covered, " of its ",
                                  v.shape.num_elements(), " elements");
  }
  return status();
}

// HDF5's Fletcher32 (the checksum its filter appends to each chunk; H5checksum.c): over
// big-endian 16-bit words w, sum1 += w and sum2 += sum1 word by word, both reduced every 360
// words; an odd last byte counts as a high byte. Here a block's two sums are computed at
// once (sum2 gains block * sum1 + the sum of (block - i) * w_i), which vectorizes; all of it
// modulo 2^32 as HDF5's 32-bit sums wrap, so the result is HDF5's bit for bit.
std::uint32_t fletcher32(const unsigned char* data, std::size_t bytes) {
  std::uint32_t sum1 = 0, sum2 = 0;
  std::size_t words = bytes / 2;
  while (words > 0) {
    const std::uint32_t block = static_cast<std::uint32_t>(std::min<std::size_t>(words, 360));
    std::uint32_t plain = 0, weighted = 0;
    for (std::uint32_t i = 0; i < block; ++i) {
      const std::uint32_t w = (static_cast<std::uint32_t>(data[2 * i]) << 8) | data[2 * i + 1];
      plain += w;
      weighted += (block - i) * w;
    }
    sum2 += block * sum1 + weighted;
    sum1 += plain;
    data += 2 * static_cast<std::size_t>(block);
    words -= block;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  if (bytes % 2) {
    sum1 += static_cast<std::uint32_t>(*data) << 8;
    sum2 += sum1;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return (sum2 << 16) | sum1;
}

// Copies the box `extent` at `from_start` of a row-major array of `from_dims` to
// `to_start` of one of `to_dims` (rank >= 1), a run of the last dimension at a time.
void copy_box(const unsigned char* from, const std::vector<std::int64_t>& from_dims,
              const std::vector<std::int64_t>& from_start, unsigned char* to, const std::vector<std::int64_t>& to_dims,
              const std::vector<std::int64_t>& to_start, const std::vector<std::int64_t>& extent,
              std::size_t element) {
  const std::size_t rank = extent.size();
  for (std::int64_t e : extent) {
    if (e <= 0) return;
  }
  std::vector<std::int64_t> index(rank, 0);
  const std::size_t run = static_cast<std::size_t>(extent[rank - 1]) * element;
  for (;;) {
    std::int64_t from_offset = 0, to_offset = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      from_offset = from_offset * from_dims[d] + from_start[d] + index[d];
      to_offset = to_offset * to_dims[d] + to_start[d] + index[d];
    }
    std::memcpy(to + static_cast<std::size_t>(to_offset) * element, from + static_cast<std::size_t>(from_offset) * element,
                run);
    std::size_t d = rank - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++index[d] < extent[d]) break;
      index[d] = 0;
    }
  }
}

// The part two boxes (start, extent) share, as starts within each and its extent; false
// when they share nothing.
bool overlap(const std::vector<std::int64_t>& a_start, const std::vector<std::int64_t>& a_extent,
             const std::vector<std::int64_t>& b_start, const std::vector<std::int64_t>& b_extent,
             std::vector<std::int64_t>* in_a, std::vector<std::int64_t>* in_b, std::vector<std::int64_t>* extent) {
  for (std::size_t d = 0; d < a_start.size(); ++d) {
    const std::int64_t begin = std::max(a_start[d], b_start[d]);
    const std::int64_t end = std::min(a_start[d] + a_extent[d], b_start[d] + b_extent[d]);
    if (begin >= end) return false;
    (*in_a)[d] = begin - a_start[d];
    (*in_b)[d] = begin - b_start[d];
    (*extent)[d] = end - begin;
  }
  return true;
}

// The file a checkpoint is written to while HDF5 builds it in memory: each chunk goes to
// its place in the file as soon as it is made (the disk writes while the next is built),
// the rest of the image (HDF5's metadata) once it is complete.
struct chunk_sink {
  writable_file* file = nullptr;  // null: the image alone
  std::vector<std::pair<std::int64_t, std::int64_t>> written;  // (offset, bytes) of each chunk
};

// Writes every chunk of a chunked dataset as HDF5's Fletcher32 filter would store it (the
// chunk's bytes, zero past the dataset's edge, then the checksum, little-endian), straight
// into the file (H5Dwrite_chunk): HDF5's own path through its chunk cache copied each chunk
// twice more and took about 3 s per GB. Tensors are little-endian, as the file types.
status write_chunks(hid_t dataset, const std::string& path, const tensor_shape& shape, std::size_t element,
                    const std::vector<hsize_t>& chunk, const std::vector<slice>& slices, chunk_sink& sink) {
  static_assert(std::endian::native == std::endian::little, "checkpoint files are written little-endian");
  const int rank = shape.rank();
  std::vector<std::int64_t> chunk_shape(chunk.begin(), chunk.end()), counts(static_cast<std::size_t>(rank));
  std::size_t chunk_bytes = element;
  for (int d = 0; d < rank; ++d) {
    chunk_bytes *= chunk[static_cast<std::size_t>(d)];
    counts[static_cast<std::size_t>(d)] = (shape.dim(d) + chunk_shape[static_cast<std::size_t>(d)] - 1) /
                                          chunk_shape[static_cast<std::size_t>(d)];
  }
  std::vector<unsigned char> buffer(chunk_bytes + 4);
  std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0), start(static_cast<std::size_t>(rank));
  std::vector<std::int64_t> from_start(static_cast<std::size_t>(rank)), to_start(static_cast<std::size_t>(rank)),
      extent(static_cast<std::size_t>(rank));
  for (;;) {
    bool partial = false;
    for (std::size_t d = 0; d < static_cast<std::size_t>(rank); ++d) {
      start[d] = index[d] * chunk_shape[d];
      partial = partial || start[d] + chunk_shape[d] > shape.dims()[d];
    }
    if (partial) std::memset(buffer.data(), 0, chunk_bytes);
    for (const slice& s : slices) {
      if (!overlap(s.start, s.value.shape().dims(), start, chunk_shape, &from_start, &to_start, &extent)) continue;
      copy_box(static_cast<const unsigned char*>(s.value.raw_data()), s.value.shape().dims(), from_start, buffer.data(),
               chunk_shape, to_start, extent, element);
    }
    const std::uint32_t sum = fletcher32(buffer.data(), chunk_bytes);
    std::memcpy(buffer.data() + chunk_bytes, &sum, 4);
    const auto offset = hsize_dims(start);
    TROUPE_RETURN_IF_ERROR(hdf5::check(H5Dwrite_chunk(dataset, H5P_DEFAULT, 0, offset.data(), buffer.size(), buffer.data()),
                                       code::data_loss, str_cat("writing a chunk of ", path)));
    if (sink.file != nullptr) {
      unsigned mask = 0;
      haddr_t address = HADDR_UNDEF;
      hsize_t stored = 0;
      if (H5Dget_chunk_info_by_coord(dataset, offset.data(), &mask, &address, &stored) < 0 || address == HADDR_UNDEF ||
          stored != buffer.size()) {
        return internal_error("finding the chunk of ", path, " just written: ", hdf5::last_error());
      }
      TROUPE_RETURN_IF_ERROR(sink.file->write_at(static_cast<std::int64_t>(address),
                                                 std::string_view(reinterpret_cast<const char*>(buffer.data()), buffer.size())));
      sink.written.emplace_back(static_cast<std::int64_t>(address), static_cast<std::int64_t>(buffer.size()));
    }
    int d = rank - 1;
    while (d >= 0 && ++index[static_cast<std::size_t>(d)] == counts[static_cast<std::size_t>(d)]) {
      index[static_cast<std::size_t>(d)] = 0;
      --d;
    }
    if (d < 0) return status();
  }
}

// Whether the box (chunk_start, chunk_extent) lies inside the box (start, dims) and is one
// run of its row-major memory (ones, then any extent, then whole dimensions); its offset
// there in elements into *offset.
bool contiguous_inside(const std::vector<std::int64_t>& chunk_start, const std::vector<std::int64_t>& chunk_extent,
                       const std::vector<std::int64_t>& start, const std::vector<std::int64_t>& dims,
                       std::int64_t* offset) {
  bool varied = false;
  *offset = 0;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (chunk_start[d] < start[d] || chunk_start[d] + chunk_extent[d] > start[d] + dims[d]) return false;
    if (varied && chunk_extent[d] != dims[d]) return false;
    varied = varied || chunk_extent[d] > 1;
    *offset = *offset * dims[d] + (chunk_start[d] - start[d]);
  }
  return true;
}

// pread of exactly `bytes` at `at`.
bool read_exactly(int fd, void* to, std::size_t bytes, std::int64_t at) {
  auto* p = static_cast<char*>(to);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, bytes, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    at += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

// The box of one dataset a read fills: what its chunks' reads share.
struct box_target {
  std::string what;  // "variable 'w'": errors name it
  std::vector<std::int64_t> chunk_shape;
  std::vector<std::int64_t> start;  // of the box in the dataset
  std::vector<std::int64_t> dims;   // of the box
  std::size_t element = 0;
  unsigned char* out = nullptr;     // the box's memory, row-major
};

// One chunk to read from the file: at `address`, `bytes` of data and their Fletcher32.
struct chunk_read {
  const box_target* target = nullptr;
  std::int64_t address = 0;
  std::size_t bytes = 0;
  std::vector<std::int64_t> chunk_start;
  unsigned char* direct = nullptr;  // where in the box it goes whole; null: through a buffer
};

// Plans the reads of the box `target` from a dataset troupe wrote (chunked, Fletcher32 its
// only filter, every chunk stored whole) at the addresses HDF5's chunk index gives. False
// for anything else (another layout or filter, a chunk missing or stored otherwise): the
// caller reads through HDF5.
bool plan_chunk_reads(hid_t dataset, const tensor_shape& shape, box_target& target, std::vector<chunk_read>* reads) {
  const int rank = shape.rank();
  if (rank == 0) return false;
  handle create_props(H5Dget_create_plist(dataset));
  if (H5Pget_layout(create_props.get()) != H5D_CHUNKED || H5Pget_nfilters(create_props.get()) != 1) return false;
  unsigned flags = 0;
  std::size_t values = 0;
  unsigned filter_config = 0;
  if (H5Pget_filter2(create_props.get(), 0, &flags, &values, nullptr, 0, nullptr, &filter_config) != H5Z_FILTER_FLETCHER32) {
    return false;
  }
  std::vector<hsize_t> chunk(static_cast<std::size_t>(rank));
  if (H5Pget_chunk(create_props.get(), rank, chunk.data()) != rank) return false;
  target.chunk_shape.assign(chunk.begin(), chunk.end());
  std::size_t chunk_bytes = target.element;
  std::vector<std::int64_t> first(static_cast<std::size_t>(rank)), last(static_cast<std::size_t>(rank));
  for (std::size_t d = 0; d < static_cast<std::size_t>(rank); ++d) {
    if (target.chunk_shape[d] <= 0) return false;
    chunk_bytes *= chunk[d];
    first[d] = target.start[d] / target.chunk_shape[d];
    last[d] = (target.start[d] + target.dims[d] - 1) / target.chunk_shape[d];
  }
  const std::size_t planned = reads->size();
  std::vector<std::int64_t> index = first;
  for (;;) {
    chunk_read r;
    r.target = &target;
    r.bytes = chunk_bytes;
    r.chunk_start.resize(static_cast<std::size_t>(rank));
    for (std::size_t d = 0; d < static_cast<std::size_t>(rank); ++d) r.chunk_start[d] = index[d] * target.chunk_shape[d];
    const auto offset = hsize_dims(r.chunk_start);
    unsigned mask = 0;
    haddr_t address = HADDR_UNDEF;
    hsize_t stored = 0;
    if (H5Dget_chunk_info_by_coord(dataset, offset.data(), &mask, &address, &stored) < 0 || address == HADDR_UNDEF ||
        stored != chunk_bytes + 4 || mask != 0) {
      H5Eclear2(H5E_DEFAULT);
      reads->resize(planned);
      return false;
    }
    r.address = static_cast<std::int64_t>(address);
    std::int64_t at = 0;
    if (contiguous_inside(r.chunk_start, target.chunk_shape, target.start, target.dims, &at)) {
      r.direct = target.out + static_cast<std::size_t>(at) * target.element;
    }
    reads->push_back(std::move(r));
    int d = rank - 1;
    while (d >= 0 && ++index[static_cast<std::size_t>(d)] > last[static_cast<std::size_t>(d)]) {
      index[static_cast<std::size_t>(d)] = first[static_cast<std::size_t>(d)];
      --d;
    }
    if (d < 0) return true;
  }
}

// Reads one planned chunk and checks its Fletcher32; the CRC-32C of the file's bytes it
// read (the chunk and its checksum) into *piece. False: damaged (a checksum that does not
// match, or a file that ends inside the chunk).
bool read_chunk(int fd, const chunk_read& r, std::vector<unsigned char>& buffer, file_piece* piece) {
  unsigned char* data = r.direct;
  if (data == nullptr) {
    buffer.resize(r.bytes);
    data = buffer.data();
  } else {
    prefault(data, r.bytes);  // fresh memory mapped at once costs less than page by page
  }
  std::uint32_t sum = 0;
  if (!read_exactly(fd, data, r.bytes, r.address) ||
      !read_exactly(fd, &sum, 4, r.address + static_cast<std::int64_t>(r.bytes))) {
    return false;
  }
  const std::uint32_t expected = fletcher32(data, r.bytes);
  // HDF5 accepts the checksum in either byte order (files of its versions before 1.6.3).
  if (sum != expected && __builtin_bswap32(sum) != expected) return false;
  *piece = {r.address, static_cast<std::int64_t>(r.bytes) + 4, crc32c_extend(crc32c_extend(0, data, r.bytes), &sum, 4)};
  if (data == buffer.data()) {
    // Every chunk planned overlaps the box.
    const box_target& t = *r.target;
    const std::size_t rank = t.dims.size();
    std::vector<std::int64_t> from_start(rank), to_start(rank), extent(rank);
    overlap(r.chunk_start, t.chunk_shape, t.start, t.dims, &from_start, &to_start, &extent);
    copy_box(buffer.data(), t.chunk_shape, from_start, t.out, t.dims, to_start, extent, t.element);
  }
  return true;
}

// Runs planned chunk reads from the file `fd` (of `path`), on several threads when there is
// enough to read: each takes a run of the file in address order through a descriptor of
// its own (its own readahead). Records what each read in `log` (when given). A damaged
// chunk is DATA_LOSS naming its variable and the file.
status run_chunk_reads(const std::string& path, int fd, std::vector<chunk_read>& reads, read_log* log) {
  std::sort(reads.begin(), reads.end(), [](const chunk_read& a, const chunk_read& b) { return a.address < b.address; });
  std::size_t total = 0;
  for (const chunk_read& r : reads) total += r.bytes;
  constexpr std::size_t k_bytes_per_thread = 32 << 20;
  const std::size_t threads = std::clamp<std::size_t>(
      std::min<std::size_t>(std::max(1u, std::thread::hardware_concurrency()), 4), 1,
      std::max<std::size_t>(1, std::min(reads.size(), total / k_bytes_per_thread)));
  std::vector<std::size_t> bounds{0};  // reads [bounds[i], bounds[i+1]) for thread i
  for (std::size_t i = 0, done = 0; i < reads.size() && bounds.size() < threads; ++i) {
    done += reads[i].bytes;
    if (done >= total * bounds.size() / threads) bounds.push_back(i + 1);
  }
  bounds.push_back(reads.size());
  std::vector<std::size_t> damaged(bounds.size() - 1, reads.size());
  std::vector<std::vector<file_piece>> pieces(bounds.size() - 1);
  auto work = [&](std::size_t part) {
    // A descriptor of its own for each thread's readahead; HDF5's own for one thread.
    int own = -1;
    if (bounds.size() > 2) own = ::open(str_cat("/proc/self/fd/", fd).c_str(), O_RDONLY | O_CLOEXEC);
    const int use = own >= 0 ? own : fd;
    if (own >= 0) ::posix_fadvise(own, 0, 0, POSIX_FADV_SEQUENTIAL);
    std::vector<unsigned char> buffer;
    for (std::size_t i = bounds[part]; i < bounds[part + 1]; ++i) {
      file_piece piece;
      if (!read_chunk(use, reads[i], buffer, &piece)) {
        damaged[part] = i;
        break;
      }
      pieces[part].push_back(piece);
    }
    if (own >= 0) ::close(own);
  };
  std::vector<std::thread> helpers;
  for (std::size_t part = 1; part + 1 < bounds.size(); ++part) helpers.emplace_back(work, part);
  work(0);
  for (std::thread& t : helpers) t.join();
  if (log != nullptr) {
    std::lock_guard<std::mutex> lock(log->mutex);
    for (auto& part : pieces) log->pieces.insert(log->pieces.end(), part.begin(), part.end());
  }
  for (std::size_t i : damaged) {
    if (i < reads.size()) {
      return data_loss_error(reads[i].target->what, " in checkpoint '", path,
                             "' is damaged: a chunk's Fletcher32 checksum does not match");
    }
  }
  return status();
}

// Writes one dataset (`path`, e.g. "variables/dense/kernel") of `shape` from `slices`.
status write_dataset(hid_t file, const std::string& path, dtype type, const tensor_shape& shape,
                     const std::vector<slice>& slices, std::int64_t global_step, chunk_sink& sink) {
  auto type_or = hdf5::type_of(type);
  if (!type_or.ok()) return type_or.error();
  const handle h5type = std::move(*type_or);
  const int rank = shape.rank();
  const auto dims = hsize_dims(shape.dims());
  handle space(rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims.data(), nullptr));
  handle link_props(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(link_props.get(), 1);
  handle create_props(H5Pcreate(H5P_DATASET_CREATE));
  // Data of rank >= 1 is chunked and Fletcher32-checksummed; a scalar (or an empty array)
  // cannot be chunked and carries a CRC-32C attribute instead.
  const bool chunked = rank > 0 && shape.num_elements() > 0;
  std::vector<hsize_t> chunk;
  if (chunked) {
    chunk = chunk_dims(shape, dtype_size(type));
    H5Pset_chunk(create_props.get(), rank, chunk.data());
    H5Pset_fletcher32(create_props.get());
  }
  auto dataset_or = hdf5::check(H5Dcreate2(file, path.c_str(), h5type.get(), space.get(), link_props.get(),
                                           create_props.get(), H5P_DEFAULT),
                                code::invalid_argument, str_cat("creating dataset ", path));
  if (!dataset_or.ok()) return dataset_or.error();
  const handle dataset = std::move(*dataset_or);
  std::vector<std::int64_t> saved;
  for (const slice& s : slices) {
    saved.insert(saved.end(), s.start.begin(), s.start.end());
    saved.insert(saved.end(), s.value.shape().dims().begin(), s.value.shape().dims().end());
  }
  if (chunked) {
    TROUPE_RETURN_IF_ERROR(write_chunks(dataset.get(), path, shape, dtype_size(type), chunk, slices, sink));
  }
  // A scalar or an empty array: at most one slice holds an element.
  for (const slice& s : slices) {
    if (chunked || s.value.num_elements() == 0) continue;
    handle file_space(H5Dget_space(dataset.get()));
    handle memory_space;
    if (rank == 0) {
      memory_space = handle(H5Screate(H5S_SCALAR));
    } else {
      const auto start = hsize_dims(s.start);
      const auto count = hsize_dims(s.value.shape().dims());
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
      memory_space = handle(H5Screate_simple(rank, count.data(), nullptr));
    }
    TROUPE_RETURN_IF_ERROR(hdf5::check(H5Dwrite(dataset.get(), h5type.get(), memory_space.get(), file_space.get(),
                                                H5P_DEFAULT, s.value.raw_data()),
                                       code::data_loss, str_cat("writing dataset ", path)));
  }
  const hid_t d = dataset.get();
  TROUPE_RETURN_IF_ERROR(hdf5::write_string_attribute(d, "dtype", std::string(dtype_name(type))));
  TROUPE_RETURN_IF_ERROR(hdf5::write_int64_array_attribute(d, "shape", shape.dims()));
  TROUPE_RETURN_IF_ERROR(hdf5::write_int64_attribute(d, "global_step", global_step));
  TROUPE_RETURN_IF_ERROR(hdf5::write_int64_matrix_attribute(d, "saved_slices", saved,
                                                            static_cast<std::int64_t>(slices.size()), 2 * rank));
  if (!chunked) {
    const void* data = slices.size() == 1 ? slices[0].value.raw_data() : nullptr;
    const std::size_t bytes = static_cast<std::size_t>(shape.num_elements()) * dtype_size(type);
    TROUPE_RETURN_IF_ERROR(hdf5::write_uint32_attribute(d, "crc32c", crc32c_extend(0, data, data != nullptr ? bytes : 0)));
  }
  return status();
}

}  // namespace

// The memory HDF5 builds a checkpoint file in (its core driver, through file image
// callbacks): one mapping, grown with mremap and kept from one save to the next. HDF5
// never does file I/O when it writes a checkpoint: after a failed write HDF5 1.10 cannot
// close the file and crashes at exit, so a full disk must reach troupe's own writes
// instead. Keeping the mapping matters on machines where touching fresh memory is slow (a
// first save of 1 GB spends about 3 s in page faults on this project's machines; later
// saves of the same model none).
struct image_buffer {
  void* data = nullptr;
  std::size_t capacity = 0;
  ~image_buffer() {
    if (data != nullptr) ::munmap(data, capacity);
  }
  // Room for `bytes`; what the buffer held is kept (mremap moves the pages, no copy).
  void* reserve(std::size_t bytes) {
    if (bytes <= capacity) return data;
    void* grown = data == nullptr ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                                  : ::mremap(data, capacity, bytes, MREMAP_MAYMOVE);
    if (grown == MAP_FAILED) return nullptr;
    data = grown;
    capacity = bytes;
    return data;
  }
};

namespace {

void* image_malloc(std::size_t size, H5FD_file_image_op_t, void* udata) {
  return static_cast<image_buffer*>(udata)->reserve(size);
}
void* image_memcpy(void* destination, const void* source, std::size_t size, H5FD_file_image_op_t, void*) {
  return std::memcpy(destination, source, size);
}
void* image_realloc(void* ptr, std::size_t size, H5FD_file_image_op_t, void* udata) {
  auto* image = static_cast<image_buffer*>(udata);
  if (ptr != nullptr && ptr != image->data) return nullptr;  // not ours: refuse
  return image->reserve(size);
}
herr_t image_free(void*, H5FD_file_image_op_t, void*) { return 0; }  // kept for the next save
void* image_udata_copy(void* udata) { return udata; }
herr_t image_udata_free(void*) { return 0; }

// What build_image needs of `s`: names that are paths, each once, and slices that tile
// each variable.
status check_snapshot(const snapshot& s) {
  std::map<std::string, int> names;
  for (const variable& v : s.variables) {
    TROUPE_RETURN_IF_ERROR(check_name(v.name, "variable"));
    if (!names.emplace(v.name, 0).second) return invalid_argument_error("variable '", v.name, "' is saved twice");
    TROUPE_RETURN_IF_ERROR(check_slices(v));
  }
  for (const auto& [name, value] : s.state) {
    TROUPE_RETURN_IF_ERROR(check_name(name, "state"));
    if (!names.emplace("state/" + name, 0).second) return invalid_argument_error("state '", name, "' is saved twice");
    if (!value.initialized()) return invalid_argument_error("state '", name, "' has no value");
  }
  return status();
}

// `s` (checked) as an HDF5 file in `image`, its chunks also written to `sink` as they are made;
// returns its size in bytes.
result<std::size_t> build_image(const snapshot& s, image_buffer& image, chunk_sink& sink) {
  hdf5::quiet();
  auto paths_or = dataset_paths(s.variables);
  if (!paths_or.ok()) return paths_or.error();
  const std::vector<std::string>& paths = *paths_or;
  handle access(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fapl_core(access.get(), 64 << 20, 0);
  // The 1.10 file format: HDF5 checksums every piece of its metadata (superblock, object
  // headers, chunk indexes) and checks them as it reads, so damage there is an error.
  H5Pset_libver_bounds(access.get(), H5F_LIBVER_V110, H5F_LIBVER_V110);
  H5FD_file_image_callbacks_t callbacks = {image_malloc,     image_memcpy,     image_realloc, image_free,
                                           image_udata_copy, image_udata_free, &image};
  TROUPE_RETURN_IF_ERROR(hdf5::check(H5Pset_file_image_callbacks(access.get(), &callbacks), code::internal,
                                     "setting up a checkpoint image"));
  static std::atomic<std::uint64_t> counter{0};
  const std::string name = str_cat("troupe-checkpoint-image-", counter.fetch_add(1));
  auto file_or = hdf5::check(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get()), code::internal,
                             "creating a checkpoint in memory");
  if (!file_or.ok()) return file_or.error();
  handle file = std::move(*file_or);
  TROUPE_RETURN_IF_ERROR(hdf5::write_string_attribute(file.get(), "format", k_format));
  TROUPE_RETURN_IF_ERROR(hdf5::write_int64_attribute(file.get(), "format_version", k_format_version));
  TROUPE_RETURN_IF_ERROR(hdf5::write_int64_attribute(file.get(), "global_step", s.global_step));
  // Groups exist even when empty, so that h5py finds "variables", "slots" and "state".
  handle group_variables(H5Gcreate2(file.get(), "variables", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  handle group_slots(H5Gcreate2(file.get(), "slots", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  handle group_state(H5Gcreate2(file.get(), "state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  try {
    for (std::size_t i = 0; i < s.variables.size(); ++i) {
      const variable& v = s.variables[i];
      status written = write_dataset(file.get(), paths[i], v.type, v.shape, v.slices, s.global_step, sink);
      if (!written.ok()) return written.with_context(str_cat("variable '", v.name, "'"));
    }
    for (const auto& [state_name, value] : s.state) {
      status written = write_dataset(file.get(), "state/" + state_name, value.type(), value.shape(),
                                     {slice{std::vector<std::int64_t>(static_cast<std::size_t>(value.rank()), 0), value}},
                                     s.global_step, sink);
      if (!written.ok()) return written.with_context(str_cat("state '", state_name, "'"));
    }
    group_variables.reset();
    group_slots.reset();
    group_state.reset();
    // A flushed file is complete (the superblock has no open-file flag at this version):
    // its first `size` bytes are the file.
    TROUPE_RETURN_IF_ERROR(hdf5::check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), code::internal,
                                       "flushing the checkpoint image"));
    // The file's end (its end of allocation; the buffer beyond it is growth room).
    const ssize_t size = H5Fget_file_image(file.get(), nullptr, 0);
    if (size < 0) return internal_error("sizing the checkpoint image: ", hdf5::last_error());
    if (static_cast<std::size_t>(size) > image.capacity) return internal_error("the checkpoint image is larger than its buffer");
    return static_cast<std::size_t>(size);
  } catch (const std::bad_alloc&) {
    return resource_exhausted_error("no memory to build the checkpoint of step ", s.global_step);
  }
}

}  // namespace

namespace {

// Writes and fsyncs the file; its CRC-32C into *crc. Chunks reach the file while the
// image is built; then what lies between them, then the CRC is taken while the disk
// finishes, then fsync.
status write_file_of(const snapshot& s, const std::string& path, file_system& fs, image_buffer& image,
                     std::uint32_t* crc) {
  TROUPE_RETURN_IF_ERROR(check_snapshot(s).with_context(str_cat("checkpoint '", path, "'")));
  auto file = fs.create(path);
  if (!file.ok()) return file.error();
  chunk_sink sink{file->get(), {}};
  auto size = build_image(s, image, sink);
  if (!size.ok()) return size.error().with_context(str_cat("checkpoint '", path, "'"));
  const std::string_view bytes(static_cast<const char*>(image.data), *size);
  std::sort(sink.written.begin(), sink.written.end());
  std::int64_t done = 0;
  sink.written.emplace_back(static_cast<std::int64_t>(bytes.size()), 0);  // the end
  for (const auto& [offset, length] : sink.written) {
    if (offset < done || offset + length > static_cast<std::int64_t>(bytes.size())) {
      return internal_error("checkpoint '", path, "': a chunk at ", offset, " overlaps another or the file's end ",
                            bytes.size());
    }
    if (offset > done) {
      TROUPE_RETURN_IF_ERROR((*file)->write_at(done, bytes.substr(static_cast<std::size_t>(done),
                                                                  static_cast<std::size_t>(offset - done))));
    }
    done = offset + length;
  }
  *crc = crc32c_extend(0, bytes.data(), bytes.size());
  TROUPE_RETURN_IF_ERROR((*file)->sync());
  return (*file)->close();
}

// The file a manifest entry names has the size and CRC-32C the entry records. `pieces` are
// runs of it already read and checksummed (by the restore's chunk reads); only the rest
// is read here, and the CRC-32C of each run joins in order (crc32c_combine).
status check_whole_file(const committed& c, std::vector<file_piece> pieces) {
  const int fd = ::open(c.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return data_loss_error("checkpoint '", c.path, "' cannot be opened: ", std::strerror(errno));
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_at_end{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) return data_loss_error("checkpoint '", c.path, "' cannot be read: ", std::strerror(errno));
  const std::int64_t size = info.st_size;
  if (size != c.bytes) {
    return data_loss_error("checkpoint '", c.path, "' has ", size, " bytes, its manifest entry ", c.bytes, " (truncated?)");
  }
  std::sort(pieces.begin(), pieces.end(), [](const file_piece& a, const file_piece& b) { return a.offset < b.offset; });
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<char> buffer;
  std::uint32_t crc = 0;
  std::int64_t at = 0;
  auto read_up_to = [&](std::int64_t end) -> status {
    while (at < end) {
      buffer.resize(static_cast<std::size_t>(std::min<std::int64_t>(8 << 20, end - at)));
      const ssize_t n = ::pread(fd, buffer.data(), buffer.size(), at);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return data_loss_error("checkpoint '", c.path, "' cannot be read: ", std::strerror(errno));
      if (n == 0) return data_loss_error("checkpoint '", c.path, "' ends at ", at, ", not at ", c.bytes, " (truncated?)");
      crc = crc32c_extend(crc, buffer.data(), static_cast<std::size_t>(n));
      at += n;
    }
    return status();
  };
  for (const file_piece& p : pieces) {
    // A run read twice (a chunk two slices share) or overlapping what is counted is skipped:
    // the bytes after `at` are read as the gap before the next run.
    if (p.offset < at || p.offset + p.length > size) continue;
    TROUPE_RETURN_IF_ERROR(read_up_to(p.offset));
    crc = crc32c_combine(crc, p.crc, static_cast<std::uint64_t>(p.length));
    at = p.offset + p.length;
  }
  TROUPE_RETURN_IF_ERROR(read_up_to(size));
  if (crc != c.crc32c) {
    return data_loss_error("checkpoint '", c.path, "' does not match the CRC-32C of its manifest entry");
  }
  return status();
}

// The size check alone, before HDF5 opens the file (a truncated file must not reach it).
status check_committed_size(const committed& c) {
  auto size = file_system::real().file_size(c.path);
  if (!size.ok()) return data_loss_error("checkpoint '", c.path, "' cannot be read: ", size.error().message());
  if (*size != c.bytes) {
    return data_loss_error("checkpoint '", c.path, "' has ", *size, " bytes, its manifest entry ", c.bytes, " (truncated?)");
  }
  return status();
}

// Whether HDF5 checksums every piece of the file's metadata it reads (superblock version 2
// or later at offset 0: troupe's files since it writes the 1.10 format), so that it may read
// the file while the whole-file check is still going. Older files are checked first.
bool metadata_checksummed(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[9] = {};
  if (!in.read(head, sizeof head)) return false;
  return std::memcmp(head, "\x89HDF\r\n\x1a\n", 8) == 0 && static_cast<unsigned char>(head[8]) >= 2;
}

// Runs `read` (given a log for reader::open: reads of the file `c` names) and checks the
// whole file with what it read (before it, for a file whose metadata HDF5 does not
// checksum); the read's own error first, then the check's.
template <typename T, typename Read>
result<T> read_checked(const committed& c, Read&& read) {
  TROUPE_RETURN_IF_ERROR(check_committed_size(c));
  if (!metadata_checksummed(c.path)) {
    TROUPE_RETURN_IF_ERROR(check_whole_file(c, {}));
    return read(std::shared_ptr<read_log>());
  }
  auto log = std::make_shared<read_log>();
  result<T> out = read(log);
  // A read that found damage needs no more; any other outcome is checked (a damaged file
  // is DATA_LOSS, and the caller tries an older checkpoint, whatever else went wrong
  // reading it).
  if (!out.ok() && out.error().error_code() == code::data_loss) return out;
  std::vector<file_piece> pieces;
  {
    std::lock_guard<std::mutex> lock(log->mutex);
    pieces = std::move(log->pieces);
  }
  TROUPE_RETURN_IF_ERROR(check_whole_file(c, std::move(pieces)));
  return out;
}

}  // namespace

status write_checkpoint_file(const snapshot& s, const std::string& path, file_system& fs, image_buffer* reuse) {
  image_buffer local;
  std::uint32_t crc = 0;
  return write_file_of(s, path, fs, reuse != nullptr ? *reuse : local, &crc);
}

// --- reader ---------------------------------------------------------------------------

struct reader::impl {
  std::string path;
  handle file;
  int fd = -1;  // HDF5's own descriptor of the file, for direct chunk reads; -1: none
  std::shared_ptr<read_log> log;  // where direct reads record what they checksummed; may be null
  std::int64_t global_step = 0;
  std::vector<variable_info> variables;
  std::vector<std::string> state_names;

  status fail_context(const status& s) const { return s.with_context(str_cat("checkpoint '", path, "'")); }

  // The dataset of a variable ("variables/<name>") or state ("state/<name>").
  result<tensor> read_box(const std::string& dataset_path, const std::string& what, dtype type,
                          const tensor_shape& shape, const std::vector<std::int64_t>& start,
                          const tensor_shape& extent) const;
  // The box at `start` of out's shape into `out` (of the dataset's dtype).
  status read_into(const std::string& dataset_path, const std::string& what, const tensor_shape& shape,
                   const std::vector<std::int64_t>& start, tensor& out) const;

  struct box_request {
    std::string dataset_path;
    std::string what;
    tensor_shape shape;  // the dataset's
    std::vector<std::int64_t> start;
    tensor* out;  // of the box's extent and the dataset's dtype
  };
  // Every box, or the first error.
  status read_boxes(const std::vector<box_request>& boxes) const;
  status read_through_hdf5(const box_request& box) const;
};

namespace {

struct visit_state {
  std::vector<std::string> datasets;
};

herr_t collect_datasets(hid_t, const char* name, const H5O_info_t* info, void* data) {
  if (info->type == H5O_TYPE_DATASET) static_cast<visit_state*>(data)->datasets.emplace_back(name);
  return 0;
}

result<variable_info> describe(hid_t file, const std::string& dataset_path, const std::string& name) {
  auto dataset_or = hdf5::check(H5Dopen2(file, dataset_path.c_str(), H5P_DEFAULT), code::data_loss,
                                str_cat("opening ", dataset_path));
  if (!dataset_or.ok()) return dataset_or.error();
  const handle dataset = std::move(*dataset_or);
  variable_info info;
  info.name = name;
  // The dtype is the dataset's own HDF5 type (in its object header, under HDF5's
  // checksum), not the "dtype" attribute written for people: a variable-length string
  // lives in HDF5's global heap, which has no checksum.
  handle stored_type(H5Dget_type(dataset.get()));
  auto type = hdf5::dtype_of(stored_type.get());
  if (!type.ok()) return data_loss_error(dataset_path, ": its HDF5 type is no troupe dtype");
  info.type = *type;
  std::vector<hsize_t> dims;
  auto shape_values = hdf5::read_int64_attribute_values(dataset.get(), "shape", &dims);
  if (!shape_values.ok()) return shape_values.error().with_context(dataset_path);
  auto shape = tensor_shape::make(*shape_values);
  if (!shape.ok()) return data_loss_error(dataset_path, ": bad shape attribute: ", shape.error().message());
  info.shape = *shape;
  // The dataset itself must have that shape.
  handle space(H5Dget_space(dataset.get()));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> stored(static_cast<std::size_t>(std::max(rank, 0)));
  if (rank >= 0) H5Sget_simple_extent_dims(space.get(), stored.data(), nullptr);
  if (rank != info.shape.rank() || !std::equal(stored.begin(), stored.end(), info.shape.dims().begin(),
                                               [](hsize_t a, std::int64_t b) { return static_cast<std::int64_t>(a) == b; })) {
    return data_loss_error(dataset_path, ": the dataset's shape is not its shape attribute ", info.shape.to_string());
  }
  auto saved = hdf5::read_int64_attribute_values(dataset.get(), "saved_slices", &dims);
  if (saved.ok() && dims.size() == 2 && static_cast<int>(dims[1]) == 2 * rank) {
    for (hsize_t row = 0; row < dims[0]; ++row) {
      const auto* values = saved->data() + row * dims[1];
      std::vector<std::int64_t> start(values, values + rank);
      info.saved_slices.emplace_back(std::move(start), tensor_shape(std::vector<std::int64_t>(values + rank, values + 2 * rank)));
    }
  }
  return info;
}

}  // namespace

result<reader> reader::open(const std::string& path) { return open(path, nullptr); }

result<reader> reader::open(const std::string& path, std::shared_ptr<read_log> log) {
  hdf5::quiet();
  auto data_loss = [&](const std::string& why) { return data_loss_error("checkpoint '", path, "': ", why); };
  auto impl = std::make_unique<reader::impl>();
  impl->path = path;
  impl->log = std::move(log);
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    return data_loss(str_cat("not a readable HDF5 file (", hdf5::last_error(), ")"));
  }
  handle access(H5Pcreate(H5P_FILE_ACCESS));
  auto file = hdf5::check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.get()), code::data_loss, "opening");
  if (!file.ok()) return data_loss(file.error().message());
  impl->file = std::move(*file);
  // Chunk addresses are file offsets when the file has no user block.
  handle create_props(H5Fget_create_plist(impl->file.get()));
  hsize_t user_block = 1;
  void* vfd_handle = nullptr;
  if (H5Pget_userblock(create_props.get(), &user_block) >= 0 && user_block == 0 &&
      H5Fget_vfd_handle(impl->file.get(), H5P_DEFAULT, &vfd_handle) >= 0 && vfd_handle != nullptr) {
    impl->fd = *static_cast<int*>(vfd_handle);
  }
  // A troupe checkpoint has the attributes format and format_version. The format's text
  // is not read: as a variable-length string (what h5py users expect) it lives in HDF5's
  // global heap, which has no checksum, and damage there can crash HDF5; everything this
  // reader reads is under a checksum.
  if (!hdf5::has_attribute(impl->file.get(), "format")) {
    return data_loss("not a troupe checkpoint (no format attribute 'troupe-checkpoint')");
  }
  auto version = hdf5::read_int64_attribute(impl->file.get(), "format_version");
  if (!version.ok() || *version != k_format_version) {
    return data_loss(str_cat("format_version ", version.ok() ? std::to_string(*version) : "missing", " (this troupe reads ",
                             k_format_version, ")"));
  }
  auto step = hdf5::read_int64_attribute(impl->file.get(), "global_step");
  if (!step.ok()) return data_loss(step.error().message());
  impl->global_step = *step;
  for (const char* group : {"variables", "slots", "state"}) {
    if (H5Lexists(impl->file.get(), group, H5P_DEFAULT) <= 0) return data_loss(str_cat("no '", group, "' group"));
    handle g(H5Gopen2(impl->file.get(), group, H5P_DEFAULT));
    visit_state found;
    if (H5Ovisit(g.get(), H5_INDEX_NAME, H5_ITER_INC, collect_datasets, &found) < 0) {
      return data_loss(str_cat("listing '", group, "': ", hdf5::last_error()));
    }
    for (const std::string& name : found.datasets) {
      if (std::string_view(group) == "state") {
        impl->state_names.push_back(name);
        continue;
      }
      auto info = describe(impl->file.get(), str_cat(group, "/", name), name);
      if (!info.ok()) return data_loss(info.error().message());
      info->dataset = str_cat(group, "/", name);
      impl->variables.push_back(std::move(*info));
    }
  }
  std::sort(impl->variables.begin(), impl->variables.end(),
            [](const variable_info& a, const variable_info& b) { return a.name < b.name; });
  std::sort(impl->state_names.begin(), impl->state_names.end());
  return reader(std::move(impl));
}

reader::reader(std::unique_ptr<impl> impl) : impl_(std::move(impl)) {}
reader::~reader() = default;
reader::reader(reader&&) noexcept = default;
reader& reader::operator=(reader&&) noexcept = default;

const std::string& reader::path() const { return impl_->path; }
std::int64_t reader::global_step() const { return impl_->global_step; }
const std::vector<variable_info>& reader::variables() const { return impl_->variables; }
const std::vector<std::string>& reader::state_names() const { return impl_->state_names; }

const variable_info* reader::find(const std::string& name) const {
  auto it = std::lower_bound(impl_->variables.begin(), impl_->variables.end(), name,
                             [](const variable_info& v, const std::string& n) { return v.name < n; });
  return it != impl_->variables.end() && it->name == name ? &*it : nullptr;
}

namespace {

// A tensor of `type` and `extent` for what is read into it.
result<tensor> allocate_for(const std::string& what, dtype type, const tensor_shape& extent, const std::string& path) {
  try {
    return tensor(type, extent);
  } catch (const std::bad_alloc&) {
    return resource_exhausted_error("no memory to read ", what, " ", extent.to_string(), " from checkpoint '", path, "'");
  }
}

}  // namespace

result<tensor> reader::impl::read_box(const std::string& dataset_path, const std::string& what, dtype type,
                                      const tensor_shape& shape, const std::vector<std::int64_t>& start,
                                      const tensor_shape& extent) const {
  auto out = allocate_for(what, type, extent, path);
  if (!out.ok()) return out;
  TROUPE_RETURN_IF_ERROR(read_into(dataset_path, what, shape, start, *out));
  return out;
}

status reader::impl::read_into(const std::string& dataset_path, const std::string& what, const tensor_shape& shape,
                               const std::vector<std::int64_t>& start, tensor& out) const {
  std::vector<box_request> boxes{{dataset_path, what, shape, start, &out}};
  return read_boxes(boxes);
}

status reader::impl::read_boxes(const std::vector<box_request>& boxes) const {
  hdf5::quiet();
  for (const box_request& box : boxes) {
    const tensor_shape& extent = box.out->shape();
    const int rank = box.shape.rank();
    if (static_cast<int>(box.start.size()) != rank || extent.rank() != rank) {
      return invalid_argument_error(box.what, " has rank ", rank, " in checkpoint '", path, "', not ", extent.rank());
    }
    for (int d = 0; d < rank; ++d) {
      const std::int64_t begin = box.start[static_cast<std::size_t>(d)];
      if (begin < 0 || extent.dim(d) < 0 || begin + extent.dim(d) > box.shape.dim(d)) {
        return invalid_argument_error(box.what, ": slice [", begin, ", ", begin + extent.dim(d), ") at dimension ", d,
                                      " is outside its shape ", box.shape.to_string(), " in checkpoint '", path, "'");
      }
    }
  }
  // The chunks of every box read together (on several threads when there is enough), the
  // boxes of datasets stored otherwise through HDF5.
  std::deque<box_target> targets;  // chunk reads point at their target
  std::vector<chunk_read> reads;
  std::vector<const box_request*> through_hdf5;
  for (const box_request& box : boxes) {
    if (box.out->num_elements() == 0) continue;
    if (fd >= 0) {
      auto dataset = hdf5::check(H5Dopen2(file.get(), box.dataset_path.c_str(), H5P_DEFAULT), code::data_loss,
                                 str_cat("opening ", box.dataset_path));
      if (!dataset.ok()) return fail_context(dataset.error());
      targets.push_back({box.what, {}, box.start, box.out->shape().dims(), dtype_size(box.out->type()),
                         static_cast<unsigned char*>(box.out->raw_data())});
      if (plan_chunk_reads(dataset->get(), box.shape, targets.back(), &reads)) continue;
      targets.pop_back();
    }
    through_hdf5.push_back(&box);
  }
  TROUPE_RETURN_IF_ERROR(run_chunk_reads(path, fd, reads, log.get()));
  for (const box_request* box : through_hdf5) TROUPE_RETURN_IF_ERROR(read_through_hdf5(*box));
  return status();
}

status reader::impl::read_through_hdf5(const box_request& box) const {
  tensor& out = *box.out;
  auto type_or = hdf5::type_of(out.type());
  if (!type_or.ok()) return type_or.error();
  const handle h5type = std::move(*type_or);
  auto dataset_or = hdf5::check(H5Dopen2(file.get(), box.dataset_path.c_str(), H5P_DEFAULT), code::data_loss,
                                str_cat("opening ", box.dataset_path));
  if (!dataset_or.ok()) return fail_context(dataset_or.error());
  const handle dataset = std::move(*dataset_or);
  const int rank = box.shape.rank();
  handle file_space(H5Dget_space(dataset.get()));
  handle memory_space;
  if (rank == 0) {
    memory_space = handle(H5Screate(H5S_SCALAR));
  } else {
    const auto begin = hsize_dims(box.start);
    const auto count = hsize_dims(out.shape().dims());
    H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, begin.data(), nullptr, count.data(), nullptr);
    memory_space = handle(H5Screate_simple(rank, count.data(), nullptr));
  }
  if (H5Dread(dataset.get(), h5type.get(), memory_space.get(), file_space.get(), H5P_DEFAULT, out.raw_data()) < 0) {
    return data_loss_error(box.what, " in checkpoint '", path, "' is damaged: ", hdf5::last_error());
  }
  if (hdf5::has_attribute(dataset.get(), "crc32c")) {
    auto expected = hdf5::read_uint32_attribute(dataset.get(), "crc32c");
    if (!expected.ok() || *expected != crc32c_extend(0, out.raw_data(), out.byte_size())) {
      return data_loss_error(box.what, " in checkpoint '", path, "' is damaged: its CRC-32C does not match");
    }
  }
  return status();
}

result<tensor> reader::read(const std::string& name, const std::vector<std::int64_t>& start,
                            const tensor_shape& extent) const {
  const variable_info* info = find(name);
  if (info == nullptr) return not_found_error("checkpoint '", impl_->path, "' has no variable '", name, "'");
  return impl_->read_box(info->dataset, str_cat("variable '", name, "'"), info->type, info->shape, start, extent);
}

status reader::read_into(const std::string& name, const std::vector<std::int64_t>& start, tensor& out) const {
  const variable_info* info = find(name);
  if (info == nullptr) return not_found_error("checkpoint '", impl_->path, "' has no variable '", name, "'");
  if (out.type() != info->type) {
    return invalid_argument_error("variable '", name, "' is ", dtype_name(info->type), " in checkpoint '", impl_->path,
                                  "', not ", dtype_name(out.type()));
  }
  return impl_->read_into(info->dataset, str_cat("variable '", name, "'"), info->shape, start, out);
}

result<tensor> reader::read(const std::string& name) const {
  const variable_info* info = find(name);
  if (info == nullptr) return not_found_error("checkpoint '", impl_->path, "' has no variable '", name, "'");
  return read(name, std::vector<std::int64_t>(static_cast<std::size_t>(info->shape.rank()), 0), info->shape);
}

result<tensor> reader::state(const std::string& name) const {
  if (!std::binary_search(impl_->state_names.begin(), impl_->state_names.end(), name)) {
    return not_found_error("checkpoint '", impl_->path, "' has no state '", name, "'");
  }
  auto info = describe(impl_->file.get(), "state/" + name, name);
  if (!info.ok()) return impl_->fail_context(info.error());
  return impl_->read_box("state/" + name, str_cat("state '", name, "'"), info->type, info->shape,
                         std::vector<std::int64_t>(static_cast<std::size_t>(info->shape.rank()), 0), info->shape);
}

status reader::verify() const {
  for (const variable_info& v : impl_->variables) {
    // Row blocks of about 64 MB, so that verifying needs no more memory than that.
    const int rank = v.shape.rank();
    std::int64_t rows = rank == 0 ? 1 : v.shape.dim(0);
    std::int64_t row_bytes = static_cast<std::int64_t>(dtype_size(v.type));
    for (int d = 1; d < rank; ++d) row_bytes *= v.shape.dim(d);
    const std::int64_t step = std::max<std::int64_t>(1, (64 << 20) / std::max<std::int64_t>(1, row_bytes));
    for (std::int64_t begin = 0; begin < rows; begin += step) {
      std::vector<std::int64_t> start(static_cast<std::size_t>(rank), 0);
      tensor_shape extent = v.shape;
      if (rank > 0) {
        start[0] = begin;
        extent.set_dim(0, std::min(step, rows - begin));
      }
      auto block = read(v.name, start, extent);
      if (!block.ok()) return block.error();
    }
  }
  for (const std::string& name : impl_->state_names) {
    auto value = state(name);
    if (!value.ok()) return value.error();
  }
  return status();
}

result<std::vector<tensor>> read_all(const reader& from, const std::vector<slice_request>& requests) {
  // Every request checked and its memory taken before the first read.
  std::vector<tensor> out;
  out.reserve(requests.size());
  std::vector<reader::impl::box_request> boxes;
  for (const slice_request& r : requests) {
    const variable_info* info = from.find(r.name);
    if (info == nullptr) return not_found_error("checkpoint '", from.path(), "' has no variable '", r.name, "'");
    if (info->type != r.type || info->shape != r.shape) {
      return invalid_argument_error("variable '", r.name, "' is ", dtype_name(r.type), " ", r.shape.to_string(),
                                    " but checkpoint '", from.path(), "' holds ", dtype_name(info->type), " ",
                                    info->shape.to_string());
    }
    auto value = allocate_for(str_cat("variable '", r.name, "'"), r.type, r.extent, from.path());
    if (!value.ok()) return value.error();
    out.push_back(std::move(*value));
  }
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const slice_request& r = requests[i];
    boxes.push_back({from.find(r.name)->dataset, str_cat("variable '", r.name, "'"), r.shape, r.start, &out[i]});
  }
  TROUPE_RETURN_IF_ERROR(from.impl_->read_boxes(boxes));
  return out;
}

// --- directory ------------------------------------------------------------------------

directory::directory(std::string path, options opts, file_system* fs) : path_(std::move(path)), opts_(opts), fs_(fs) {}
directory::~directory() = default;
directory::directory(directory&&) noexcept = default;
directory& directory::operator=(directory&&) noexcept = default;

result<directory> directory::open(const std::string& path, options opts, file_system& fs) {
  if (path.empty()) return invalid_argument_error("a checkpoint directory needs a path");
  if (opts.keep < 1) return invalid_argument_error("checkpoint keep must be at least 1, not ", opts.keep);
  TROUPE_RETURN_IF_ERROR(fs.create_dir(path));
  return directory(path, opts, &fs);
}

result<std::vector<committed>> directory::list() const {
  const std::string manifest_path = path_ + "/" + k_manifest;
  auto listing = fs_->list_dir(path_);
  if (!listing.ok()) return listing.error();
  if (!std::binary_search(listing->begin(), listing->end(), std::string(k_manifest))) return std::vector<committed>();
  auto text = read_file(manifest_path);
  if (!text.ok()) return text.error();
  proto::manifest manifest;
  const auto parsed = google::protobuf::util::JsonStringToMessage(*text, &manifest);
  if (!parsed.ok() || manifest.format() != "troupe-checkpoints") {
    return data_loss_error("checkpoint manifest '", manifest_path, "' is damaged",
                           parsed.ok() ? std::string(" (no format \"troupe-checkpoints\")") : str_cat(": ", parsed.ToString()));
  }
  std::vector<committed> out;
  for (const auto& entry : manifest.checkpoints()) {
    // Only the data file of the entry's own step, in this directory: a name beside it
    // (the manifest itself, "..") would be deleted once the entry is beyond `keep`.
    if (entry.step() < 0 || entry.file() != file_name_of(entry.step())) {
      return data_loss_error("checkpoint manifest '", manifest_path, "' names a file '", entry.file(), "' for step ",
                             entry.step(), ", not that step's data file in its directory (",
                             entry.step() < 0 ? std::string("a step is >= 0") : file_name_of(entry.step()), ")");
    }
    out.push_back({entry.step(), path_ + "/" + entry.file(), entry.bytes(), entry.unix_seconds(), entry.crc32c()});
  }
  return out;
}

status directory::write_manifest(const std::vector<committed>& entries) {
  proto::manifest manifest;
  manifest.set_format("troupe-checkpoints");
  manifest.set_version(1);
  for (const committed& c : entries) {
    auto* entry = manifest.add_checkpoints();
    entry->set_step(c.step);
    entry->set_file(base_name(c.path));
    entry->set_bytes(c.bytes);
    entry->set_unix_seconds(c.unix_seconds);
    entry->set_crc32c(c.crc32c);
  }
  auto text = graph::to_json(manifest, "the checkpoint manifest");
  if (!text.ok()) return text.error();
  return write_durably(*fs_, path_ + "/" + k_manifest, *text);
}

result<committed> directory::save(const snapshot& s) {
  if (s.global_step < 0) return invalid_argument_error("a checkpoint's global step must be >= 0, not ", s.global_step);
  auto previous = list();
  if (!previous.ok()) return previous.error();
  committed entry;
  entry.step = s.global_step;
  entry.path = path_ + "/" + file_name_of(s.global_step);
  // 1. The data file, durably in place under its final name (not yet committed: the
  //    manifest does not name it, or names the older file of the same step, now replaced
  //    atomically by a complete one): written as a temporary, fsynced, renamed.
  static std::atomic<std::uint64_t> counter{0};
  const std::string temporary = str_cat(path_, "/.", file_name_of(s.global_step), ".tmp-",
                                        static_cast<long>(::getpid()), "-", counter.fetch_add(1));
  if (image_ == nullptr) image_ = std::make_unique<image_buffer>();
  status written = write_file_of(s, temporary, *fs_, *image_, &entry.crc32c);
  auto size = written.ok() ? fs_->file_size(temporary) : result<std::int64_t>(written);
  if (size.ok()) written = fs_->rename(temporary, entry.path);
  if (size.ok() && written.ok()) written = fs_->sync_dir(path_);
  if (!size.ok() || !written.ok()) {
    (void)fs_->remove(temporary);
    return (size.ok() ? written : size.error()).with_context(str_cat("saving checkpoint of step ", s.global_step));
  }
  entry.bytes = *size;
  entry.unix_seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch()).count();
  // 2. The commit: the manifest names it.
  std::vector<committed> entries = {entry};
  for (const committed& c : *previous) {
    if (c.step != entry.step) entries.push_back(c);
  }
  std::vector<committed> dropped;
  if (static_cast<int>(entries.size()) > opts_.keep) {
    dropped.assign(entries.begin() + opts_.keep, entries.end());
    entries.resize(static_cast<std::size_t>(opts_.keep));
  }
  TROUPE_RETURN_IF_ERROR(write_manifest(entries).with_context(str_cat("committing checkpoint of step ", s.global_step)));
  // 3. After the commit: older checkpoints beyond `keep`, and files a crash left behind
  //    (temporaries, data files no manifest names). Failures here lose nothing.
  for (const committed& c : dropped) (void)fs_->remove(c.path);
  auto listing = fs_->list_dir(path_);
  if (listing.ok()) {
    for (const std::string& name : *listing) {
      const bool temporary = name.rfind(".", 0) == 0 && name.find(".tmp-") != std::string::npos;
      const bool data = name.rfind("ckpt-", 0) == 0 && name.size() > 3 && name.compare(name.size() - 3, 3, ".h5") == 0;
      const bool named = std::any_of(entries.begin(), entries.end(), [&](const committed& c) { return base_name(c.path) == name; });
      if (temporary || (data && !named)) (void)fs_->remove(path_ + "/" + name);
    }
  }
  return entry;
}

result<reader> directory::open_latest(std::vector<std::string>* warnings) const {
  auto entries = list();
  if (!entries.ok()) return entries.error();
  if (entries->empty()) return not_found_error("no committed checkpoint in '", path_, "'");
  for (const committed& c : *entries) {
    auto opened = read_checked<reader>(c, [&](std::shared_ptr<read_log> log) -> result<reader> {
      auto r = reader::open(c.path, std::move(log));
      if (!r.ok()) return r;
      TROUPE_RETURN_IF_ERROR(r->verify());
      return r;
    });
    if (opened.ok()) return opened;
    if (warnings != nullptr) {
      warnings->push_back(
          str_cat("checkpoint '", c.path, "' (step ", c.step, ") is damaged, skipped: ", opened.error().message()));
    }
  }
  return data_loss_error("every committed checkpoint in '", path_, "' is damaged (", entries->size(), ")");
}

result<restored> directory::restore_latest(const restore_request& request, std::vector<std::string>* warnings) const {
  auto entries = list();
  if (!entries.ok()) return entries.error();
  if (entries->empty()) return not_found_error("no committed checkpoint in '", path_, "'");
  for (const committed& c : *entries) {
    auto attempt = read_checked<restored>(c, [&](std::shared_ptr<read_log> log) -> result<restored> {
      auto opened = reader::open(c.path, std::move(log));
      if (!opened.ok()) return opened.error();
      restored out;
      out.global_step = opened->global_step();
      out.path = c.path;
      auto values = read_all(*opened, request.variables);
      if (!values.ok()) return values.error();
      out.variables = std::move(*values);
      for (const std::string& name : request.state) {
        auto value = opened->state(name);
        if (!value.ok() && request.missing_state_ok && value.error().error_code() == code::not_found) {
          out.state.emplace_back();
          continue;
        }
        if (!value.ok()) return value.error();
        out.state.push_back(std::move(*value));
      }
      return out;
    });
    if (attempt.ok() || attempt.error().error_code() != code::data_loss) return attempt;
    if (warnings != nullptr) {
      warnings->push_back(str_cat("checkpoint '", c.path, "' (step ", c.step, ") is damaged, skipped: ",
                                  attempt.error().message()));
    }
  }
  return data_loss_error("every committed checkpoint in '", path_, "' is damaged (", entries->size(), ")");
}

}  // namespace troupe::checkpoint
