#include "core/idx.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <filesystem>
#include <list>
#include <mutex>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/file.h"
#include "core/memory.h"

namespace troupe {
namespace {

constexpr unsigned char k_gzip_magic0 = 0x1f;
constexpr unsigned char k_gzip_magic1 = 0x8b;
// The header of one gzip member is at least 10 bytes and its trailer 8.
constexpr std::size_t k_min_gzip_member = 18;

bool is_gzip(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == k_gzip_magic0 &&
         static_cast<unsigned char>(bytes[1]) == k_gzip_magic1;
}

std::uint32_t big_endian_u32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

dtype dtype_of_idx_code(int code) {
  switch (code) {
    case 0x08: return dtype::uint8;
    case 0x09: return dtype::int8;
    case 0x0B: return dtype::int16;
    case 0x0C: return dtype::int32;
    case 0x0D: return dtype::float32;
    case 0x0E: return dtype::float64;
    default: return dtype::invalid;
  }
}

// Copies `count` big-endian elements of `size` bytes into host order.
void copy_big_endian(const unsigned char* from, std::size_t count, std::size_t size, void* to) {
  if (size == 1 || std::endian::native == std::endian::big) {
    std::memcpy(to, from, count * size);
    return;
  }
  auto* out = static_cast<unsigned char*>(to);
  for (std::size_t i = 0; i < count; ++i) {
    for (std::size_t b = 0; b < size; ++b) out[i * size + b] = from[i * size + size - 1 - b];
  }
}

}  // namespace

int idx_type_code(dtype type) {
  switch (type) {
    case dtype::uint8: return 0x08;
    case dtype::int8: return 0x09;
    case dtype::int16: return 0x0B;
    case dtype::int32: return 0x0C;
    case dtype::float32: return 0x0D;
    case dtype::float64: return 0x0E;
    default: return 0;
  }
}

result<std::string> gunzip(std::string_view compressed, std::string_view what) {
  if (!is_gzip(compressed)) {
    return data_loss_error("'", what, "' is not gzip data (no gzip magic 1f 8b)");
  }
  std::string out;
  // The last member's trailer holds its uncompressed size mod 2^32: a good first guess.
  std::size_t guess = compressed.size() * 2;
  if (compressed.size() >= k_min_gzip_member) {
    auto* tail = reinterpret_cast<const unsigned char*>(compressed.data() + compressed.size() - 4);
    std::size_t isize = std::uint32_t{tail[0]} | (std::uint32_t{tail[1]} << 8) |
                        (std::uint32_t{tail[2]} << 16) | (std::uint32_t{tail[3]} << 24);
    // A damaged trailer must not make us allocate absurdly: deflate's best ratio is ~1032.
    if (isize >= compressed.size() / 2 && isize / 1032 <= compressed.size()) guess = isize;
  }
  out.resize(std::max<std::size_t>(guess, 1024));

  z_stream stream{};
  // 15 window bits + 16: expect a gzip header and trailer (and check both).
  if (inflateInit2(&stream, 15 + 16) != Z_OK) {
    return internal_error("zlib could not initialize to read '", what, "'");
  }
  std::size_t in_pos = 0;
  std::size_t out_pos = 0;
  status error;
  while (true) {
    if (out_pos == out.size()) out.resize(out.size() * 2);
    std::size_t in_chunk = std::min<std::size_t>(compressed.size() - in_pos, UINT_MAX);
    std::size_t out_chunk = std::min<std::size_t>(out.size() - out_pos, UINT_MAX);
    stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data() + in_pos));
    stream.avail_in = static_cast<uInt>(in_chunk);
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + out_pos);
    stream.avail_out = static_cast<uInt>(out_chunk);
    int rc = inflate(&stream, Z_NO_FLUSH);
    in_pos += in_chunk - stream.avail_in;
    out_pos += out_chunk - stream.avail_out;
    if (rc == Z_STREAM_END) {
      if (in_pos == compressed.size()) break;
      // Another member follows (gzip(1) concatenates them), or trailing garbage.
      if (!is_gzip(compressed.substr(in_pos))) {
        error = data_loss_error("'", what, "': ", compressed.size() - in_pos,
                                " unexpected bytes after the gzip data (at byte ", in_pos, ")");
        break;
      }
      inflateReset(&stream);
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && in_pos == compressed.size()) {
      error = data_loss_error("'", what, "' is truncated: the gzip data ends after ",
                              compressed.size(), " bytes (", out_pos,
                              " bytes decompressed) before the end of the stream");
      break;
    }
    error = data_loss_error("'", what, "' holds corrupt gzip data at byte ", in_pos, ": ",
                            stream.msg != nullptr ? stream.msg : zError(rc));
    break;
  }
  inflateEnd(&stream);
  if (!error.ok()) return error;
  out.resize(out_pos);
  return out;
}

result<tensor> parse_idx(std::string_view bytes, std::string_view what) {
  auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 4) {
    return data_loss_error("'", what, "' is truncated: ", bytes.size(),
                           " bytes, too short for an IDX magic number (4 bytes)");
  }
  if (data[0] != 0 || data[1] != 0) {
    return data_loss_error("'", what, "' is not an IDX file: bad magic number 0x", std::hex,
                           big_endian_u32(data), std::dec, " (an IDX file starts with two zero bytes,",
                           " a type code and the number of dimensions)");
  }
  int code = data[2];
  dtype type = dtype_of_idx_code(code);
  if (type == dtype::invalid) {
    return data_loss_error("'", what, "' has unknown IDX type code 0x", std::hex, code, std::dec,
                           " (valid: 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float,",
                           " 0x0E double)");
  }
  int rank = data[3];
  if (rank == 0) return data_loss_error("'", what, "' has an IDX header with 0 dimensions");
  std::size_t header = 4 + 4 * static_cast<std::size_t>(rank);
  if (bytes.size() < header) {
    return data_loss_error("'", what, "' is truncated: its header declares ", rank,
                           " dimensions (", header, " bytes) but the file has ", bytes.size(),
                           " bytes");
  }
  std::vector<std::int64_t> dims;
  std::size_t element_size = dtype_size(type);
  // The payload size, computed without overflow: any product beyond the bytes present
  // is reported as truncation.
  std::size_t payload = bytes.size() - header;
  std::size_t count = 1;
  bool too_big = false;
  for (int i = 0; i < rank; ++i) {
    std::uint32_t d = big_endian_u32(data + 4 + 4 * i);
    dims.push_back(d);
    if (d != 0 && count > payload / d) too_big = true;
    else count *= d;
  }
  tensor_shape shape(dims);
  if (too_big || count > payload / element_size) {
    return data_loss_error("'", what, "' is truncated: its header declares ",
                           dtype_name(type), " ", shape.to_string(), " but only ", payload,
                           " bytes of data follow the header");
  }
  if (count * element_size != payload) {
    return data_loss_error("'", what, "' has ", payload - count * element_size,
                           " unexpected bytes after the data its header declares (",
                           dtype_name(type), " ", shape.to_string(), ")");
  }
  tensor t;
  try {
    t = tensor(type, shape);
  } catch (const allocation_error& e) {  // over the memory limit (core/memory.h)
    return e.to_status().with_context(str_cat("'", what, "'"));
  }
  copy_big_endian(data + header, count, element_size, t.raw_data());
  return t;
}

std::string to_idx_bytes(const tensor& t) {
  std::string out;
  out.push_back(0);
  out.push_back(0);
  out.push_back(static_cast<char>(idx_type_code(t.type())));
  out.push_back(static_cast<char>(t.rank()));
  for (int i = 0; i < t.rank(); ++i) {
    auto d = static_cast<std::uint32_t>(t.dim(i));
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(d >> shift));
  }
  std::size_t header = out.size();
  out.resize(header + t.byte_size());
  // Byte order reversal is its own inverse.
  copy_big_endian(static_cast<const unsigned char*>(t.raw_data()),
                  static_cast<std::size_t>(t.num_elements()), dtype_size(t.type()),
                  out.data() + header);
  return out;
}

namespace {

// The last files read, by path, size and modification time: a process that runs many
// scenarios (tests, the fault matrix, a simulation's seeds) decompresses a dataset once.
// The tensors are shared and never written to.
struct idx_cache {
  struct entry {
    std::string path;
    std::uintmax_t size = 0;
    std::filesystem::file_time_type modified;
    tensor value;
  };
  static constexpr std::size_t k_entries = 4;
  std::mutex mutex;
  std::list<entry> entries;  // most recently used first
};

idx_cache& cache() {
  static idx_cache* c = new idx_cache;  // never destroyed: used until the process ends
  return *c;
}

result<tensor> read_idx_uncached(const std::string& path);

}  // namespace

result<tensor> read_idx(const std::string& path) {
  std::error_code size_error, time_error;
  const auto size = std::filesystem::file_size(path, size_error);
  const auto modified = std::filesystem::last_write_time(path, time_error);
  if (size_error || time_error) return read_idx_uncached(path);  // its error names the file
  idx_cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    for (auto it = c.entries.begin(); it != c.entries.end(); ++it) {
      if (it->path == path && it->size == size && it->modified == modified) {
        c.entries.splice(c.entries.begin(), c.entries, it);
        return it->value;
      }
    }
  }
  auto t = read_idx_uncached(path);
  if (!t.ok()) return t;
  std::lock_guard<std::mutex> lock(c.mutex);
  c.entries.push_front({path, size, modified, *t});
  if (c.entries.size() > idx_cache::k_entries) c.entries.pop_back();
  return t;
}

namespace {

result<tensor> read_idx_uncached(const std::string& path) {
  auto contents = read_file(path);
  if (!contents.ok()) return contents.error();
  if (!is_gzip(*contents)) return parse_idx(*contents, path);
  auto plain = gunzip(*contents, path);
  if (!plain.ok()) return plain.error();
  *contents = std::string();  // free the compressed bytes before the tensor is allocated
  return parse_idx(*plain, path);
}

}  // namespace

result<idx_examples> read_idx_examples(const std::string& images_path,
                                       const std::string& labels_path) {
  auto images = read_idx(images_path);
  if (!images.ok()) return images.error();
  auto labels = read_idx(labels_path);
  if (!labels.ok()) return labels.error();
  if (labels->rank() != 1) {
    return invalid_argument_error("'", labels_path, "' should hold a vector of labels but holds ",
                                  dtype_name(labels->type()), " ", labels->shape().to_string());
  }
  if (labels->dim(0) != images->dim(0)) {
    return invalid_argument_error("'", labels_path, "' has ", labels->dim(0), " labels but '",
                                  images_path, "' has ", images->dim(0),
                                  " examples: the files do not belong together");
  }
  return idx_examples{std::move(*images), std::move(*labels)};
}

}  // namespace troupe
