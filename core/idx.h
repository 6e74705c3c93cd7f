// IDX files: the format of MNIST and Fashion-MNIST, read into tensors.
//
// An IDX file (http://yann.lecun.com/exdb/mnist/) is a 4-byte magic number, one 4-byte
// size per dimension, then the elements in row-major order. Every multi-byte number is
// big-endian. The magic is 0x00 0x00, a type code, then the number of dimensions:
//
//   type code  0x08 uint8   0x09 int8   0x0B int16   0x0C int32   0x0D float   0x0E double
//
// Files are read whole, gzip-compressed (told apart by the gzip magic 1f 8b, as the
// distributed *.gz files are) or plain. The result is a tensor of the matching dtype
// whose shape is the header's dimensions:
//
//   auto images = read_idx("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
//   // uint8 [60000,28,28]
//   auto train = read_idx_examples(images_path, labels_path);  // counts checked
//
// Errors name the file and say what is wrong: not_found when it cannot be opened,
// data_loss for damaged contents (bad gzip data, truncated, a bad magic number or type
// code, a size that disagrees with the header, trailing bytes), invalid_argument when an
// images file and a labels file do not belong together, resource_exhausted when the
// tensor does not fit in the memory limit (core/memory.h). Nothing is allocated from the
// header's sizes before they have been checked against the bytes present.
//
// Thread safety: the functions keep no state and may be called from any thread.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "core/tensor.h"

namespace troupe {

// Reads one IDX file, gzip-compressed or not.
// The last four files read stay decoded in memory, keyed by path, size and modification
// time: reading one again (another run in the same process) shares that tensor, which
// nobody may write to.
result<tensor> read_idx(const std::string& path);

// Parses the bytes of an (uncompressed) IDX file. `what` names the source in errors.
result<tensor> parse_idx(std::string_view bytes, std::string_view what);

// Decompresses a gzip stream (one or more concatenated members, as gzip(1) writes them),
// checking each member's CRC and length. `what` names the source in errors.
result<std::string> gunzip(std::string_view compressed, std::string_view what);

// The IDX type code of a dtype, or 0 when IDX cannot hold it.
int idx_type_code(dtype type);

// Serializes a tensor as an uncompressed IDX file (big-endian). For tests and tools.
// REQUIRES: idx_type_code(t.type()) != 0 and 1 <= t.rank() <= 255.
std::string to_idx_bytes(const tensor& t);

// Examples stored as two IDX files: images [n, ...] and labels [n].
struct idx_examples {
  tensor images;
  tensor labels;
};

// Reads both files and checks that the labels are a vector and that both hold the same
// number of examples (an error names both files and both counts).
result<idx_examples> read_idx_examples(const std::string& images_path,
                                       const std::string& labels_path);

}  // namespace troupe
