// IdxReader: reads the real Fashion-MNIST files; batches run through epochs and end with
// OUT_OF_RANGE; a shuffled epoch is a permutation that depends only on the seed and the
// epoch; concurrent steps get disjoint batches covering each epoch exactly once; damaged
// or mismatched files give errors naming the file. Synthetic files mark each example:
// every byte of image i and its label are i.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "core/file.h"
#include "core/idx.h"
#include "core/tensor.h"
#include "graph/attr.h"
#include "graph/op_registry.h"
#include "kernels/kernel_registry.h"
#include "kernels/kernel_runner.h"

namespace troupe {
namespace {

const std::string k_fashion_mnist = "/usr/share/datasets/fashion-mnist";

std::string temp_dir() {
  auto dir = std::filesystem::temp_directory_path() /
             ("troupe_io_kernels_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string write_temp(const std::string& name, const std::string& contents) {
  std::string path = temp_dir() + "/" + name;
  REQUIRE(write_file(path, contents).ok());
  return path;
}

struct synthetic_files {
  std::string images;
  std::string labels;
};

// n examples of rows x cols; every byte of image i and label i are i. REQUIRES: n <= 256.
synthetic_files write_synthetic(const std::string& stem, int n, int rows = 2, int cols = 3) {
  tensor images(dtype::uint8, {n, rows, cols});
  tensor labels(dtype::uint8, {n});
  for (int i = 0; i < n; ++i) {
    labels.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(i);
    for (int b = 0; b < rows * cols; ++b) {
      images.data<std::uint8_t>()[i * rows * cols + b] = static_cast<std::uint8_t>(i);
    }
  }
  return {write_temp(stem + "-images-idx3-ubyte", to_idx_bytes(images)),
          write_temp(stem + "-labels-idx1-ubyte", to_idx_bytes(labels))};
}

tf::NodeDef reader_node(const std::string& images, const std::string& labels,
                        std::int64_t batch_size, std::int64_t num_epochs, bool shuffle,
                        std::int64_t seed = 0) {
  tf::NodeDef node;
  node.set_name("reader");
  node.set_op("IdxReader");
  (*node.mutable_attr())["images"] = graph::attr_value(images);
  (*node.mutable_attr())["labels"] = graph::attr_value(labels);
  (*node.mutable_attr())["batch_size"] = graph::attr_value(batch_size);
  (*node.mutable_attr())["num_epochs"] = graph::attr_value(num_epochs);
  (*node.mutable_attr())["shuffle"] = graph::attr_value(shuffle);
  (*node.mutable_attr())["seed"] = graph::attr_value(seed);
  return node;
}

// A kernel built once and run many times, as an executor runs it across steps.
class reader_instance {
 public:
  explicit reader_instance(tf::NodeDef node) : node_(std::move(node)) {
    const graph::op_def* op = graph::op_registry::builtin().find(node_.op());
    REQUIRE(op != nullptr);
    REQUIRE(graph::add_defaults_and_validate_attrs(*op, &node_).ok());
    std::vector<dtype> input_types;
    REQUIRE(graph::input_output_types(*op, node_, &input_types, &output_types_).ok());
    auto kernel =
        kernels::kernel_registry::builtin().create("CPU", node_, *op, input_types, output_types_);
    if (!kernel.ok()) FAIL(kernel.error().to_string());
    kernel_ = std::move(*kernel);
  }

  // The batch's images and labels, or the error. Safe to call from many threads.
  result<std::vector<tensor>> run() {
    kernels::step_info step;
    step.pool = &kernels::default_compute_pool();
    std::vector<tensor> inputs;
    std::vector<tensor> outputs(2);
    kernels::kernel_context ctx(inputs, outputs, output_types_, step);
    kernel_->compute(ctx);
    if (!ctx.ok()) return ctx.get_status();
    return outputs;
  }

  // The labels of each batch until the reader reports the end of its input.
  std::vector<std::vector<int>> run_to_end(status* end) {
    std::vector<std::vector<int>> batches;
    while (true) {
      auto out = run();
      if (!out.ok()) {
        *end = out.error();
        return batches;
      }
      batches.push_back(labels_of(out->at(1)));
    }
  }

  static std::vector<int> labels_of(const tensor& t) {
    return std::vector<int>(t.flat<std::uint8_t>().begin(), t.flat<std::uint8_t>().end());
  }

  const kernels::op_kernel& kernel() const { return *kernel_; }

 private:
  tf::NodeDef node_;
  std::vector<dtype> output_types_;
  std::unique_ptr<kernels::op_kernel> kernel_;
};

// Every image byte of a batch equals the example's label (true of the synthetic files).
bool images_match_labels(const tensor& images, const tensor& labels) {
  std::int64_t row = images.dim(1) * images.dim(2);
  for (std::int64_t i = 0; i < labels.num_elements(); ++i) {
    for (std::int64_t b = 0; b < row; ++b) {
      if (images.data<std::uint8_t>()[i * row + b] != labels.data<std::uint8_t>()[i]) return false;
    }
  }
  return true;
}

std::vector<int> flatten(const std::vector<std::vector<int>>& batches) {
  std::vector<int> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

std::vector<int> iota(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

TEST_CASE("Fashion-MNIST: 60000 train and 10000 test images of 28x28, balanced classes", "[io]") {
  auto train = read_idx_examples(k_fashion_mnist + "/train-images-idx3-ubyte.gz",
                                 k_fashion_mnist + "/train-labels-idx1-ubyte.gz");
  if (!train.ok()) FAIL(train.error().to_string() << " (install dataset-fashion-mnist)");
  CHECK(train->images.type() == dtype::uint8);
  CHECK(train->images.shape() == tensor_shape{60000, 28, 28});
  CHECK(train->labels.shape() == tensor_shape{60000});
  std::map<int, int> train_counts;
  for (std::uint8_t label : train->labels.flat<std::uint8_t>()) ++train_counts[label];
  CHECK(train_counts.size() == 10);
  for (auto [label, count] : train_counts) {
    INFO("class " << label);
    CHECK(count == 6000);
  }

  auto test = read_idx_examples(k_fashion_mnist + "/t10k-images-idx3-ubyte.gz",
                                k_fashion_mnist + "/t10k-labels-idx1-ubyte.gz");
  REQUIRE(test.ok());
  CHECK(test->images.shape() == tensor_shape{10000, 28, 28});
  std::map<int, int> test_counts;
  for (std::uint8_t label : test->labels.flat<std::uint8_t>()) ++test_counts[label];
  CHECK(test_counts.size() == 10);
  CHECK(test_counts[0] == 1000);
  CHECK(test_counts[9] == 1000);

  // The reader's unshuffled batches are the file's examples in order.
  reader_instance reader(reader_node(k_fashion_mnist + "/t10k-images-idx3-ubyte.gz",
                                     k_fashion_mnist + "/t10k-labels-idx1-ubyte.gz", 64, 1, false));
  for (int b = 0; b < 3; ++b) {
    auto out = reader.run();
    REQUIRE(out.ok());
    REQUIRE(out->at(0).shape() == tensor_shape{64, 28, 28});
    REQUIRE(out->at(1).shape() == tensor_shape{64});
    CHECK(std::equal(out->at(0).flat<std::uint8_t>().begin(), out->at(0).flat<std::uint8_t>().end(),
                     test->images.data<std::uint8_t>() + b * 64 * 784));
    CHECK(std::equal(out->at(1).flat<std::uint8_t>().begin(), out->at(1).flat<std::uint8_t>().end(),
                     test->labels.data<std::uint8_t>() + b * 64));
  }
  // 10000 = 156 * 64 + 16: 153 more full batches, then a batch of 16, then the end.
  for (int b = 3; b < 156; ++b) REQUIRE(reader.run().ok());
  auto last = reader.run();
  REQUIRE(last.ok());
  CHECK(last->at(0).shape() == tensor_shape{16, 28, 28});
  auto end = reader.run();
  REQUIRE_FALSE(end.ok());
  CHECK(end.error().error_code() == code::out_of_range);
}

TEST_CASE("IdxReader is stateful; its shape is known when it runs forever", "[io]") {
  const graph::op_def* def = graph::op_registry::builtin().find("IdxReader");
  REQUIRE(def != nullptr);
  CHECK(def->is_stateful);
  for (std::int64_t epochs : {0, 2}) {
    tf::NodeDef node = reader_node("i", "l", 32, epochs, true);
    REQUIRE(graph::add_defaults_and_validate_attrs(*def, &node).ok());
    graph::shape_context ctx(node, *def, {}, {}, {}, 2);
    REQUIRE(def->shape(ctx).ok());
    std::int64_t k = epochs == 0 ? 32 : -1;
    CHECK(ctx.outputs()[0] == partial_shape{k, -1, -1});
    CHECK(ctx.outputs()[1] == partial_shape{k});
  }
  tf::NodeDef zero_batch = reader_node("i", "l", 0, 1, true);
  CHECK_FALSE(graph::add_defaults_and_validate_attrs(*def, &zero_batch).ok());
  tf::NodeDef defaults;
  defaults.set_op("IdxReader");
  (*defaults.mutable_attr())["images"] = graph::attr_value("i");
  (*defaults.mutable_attr())["labels"] = graph::attr_value("l");
  (*defaults.mutable_attr())["batch_size"] = graph::attr_value(8);
  REQUIRE(graph::add_defaults_and_validate_attrs(*def, &defaults).ok());
  bool shuffle = false;
  REQUIRE(graph::get_attr(defaults, "shuffle", &shuffle).ok());
  CHECK(shuffle);
}

TEST_CASE("Unshuffled batches run through epochs, the last one short, then OUT_OF_RANGE", "[io]") {
  auto files = write_synthetic("order", 10);
  reader_instance reader(reader_node(files.images, files.labels, 3, 2, false));
  CHECK(reader.kernel().estimated_ns({}) > kernels::op_kernel::k_inline_ns);
  status end;
  auto batches = reader.run_to_end(&end);
  // Epochs follow each other without a gap; 20 examples in batches of 3.
  std::vector<std::vector<int>> expected = {{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9, 0, 1},
                                            {2, 3, 4}, {5, 6, 7}, {8, 9}};
  CHECK(batches == expected);
  CHECK(end.error_code() == code::out_of_range);
  CHECK(end.message() == "IdxReader 'reader': end of input after 2 epochs");
  // It stays at the end.
  auto again = reader.run();
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().error_code() == code::out_of_range);

  // Images follow their labels, and shapes follow the files.
  reader_instance one(reader_node(files.images, files.labels, 4, 1, false));
  auto out = one.run();
  REQUIRE(out.ok());
  CHECK(out->at(0).shape() == tensor_shape{4, 2, 3});
  CHECK(images_match_labels(out->at(0), out->at(1)));

  // num_epochs = 0: forever, every batch full.
  reader_instance forever(reader_node(files.images, files.labels, 7, 0, true, 3));
  for (int i = 0; i < 50; ++i) {
    auto b = forever.run();
    REQUIRE(b.ok());
    CHECK(b->at(1).num_elements() == 7);
  }
  status one_epoch_end;
  reader_instance single(reader_node(files.images, files.labels, 10, 1, false));
  CHECK(single.run_to_end(&one_epoch_end).size() == 1);
  CHECK(one_epoch_end.message() == "IdxReader 'reader': end of input after 1 epoch");
}

TEST_CASE("Shuffled epochs are permutations, deterministic per seed and epoch", "[io]") {
  const int n = 100;
  auto files = write_synthetic("shuffle", n);
  auto epochs_of = [&](std::int64_t seed, std::int64_t batch_size) {
    reader_instance reader(reader_node(files.images, files.labels, batch_size, 3, true, seed));
    status end;
    std::vector<int> all = flatten(reader.run_to_end(&end));
    CHECK(end.error_code() == code::out_of_range);
    REQUIRE(all.size() == 3 * n);
    std::vector<std::vector<int>> epochs;
    for (int e = 0; e < 3; ++e) epochs.emplace_back(all.begin() + e * n, all.begin() + (e + 1) * n);
    return epochs;
  };
  auto a = epochs_of(42, 16);
  for (const auto& epoch : a) {
    std::vector<int> sorted = epoch;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == iota(n));  // each epoch is a permutation
    CHECK(epoch != iota(n));   // and actually shuffled
  }
  CHECK(a[0] != a[1]);  // each epoch has its own order
  CHECK(a[1] != a[2]);
  // The order depends only on the seed, not on how the epoch was cut into batches.
  CHECK(epochs_of(42, 16) == a);
  CHECK(epochs_of(42, 7) == a);
  CHECK(epochs_of(43, 16) != a);
  // Seed 0 is a seed like any other: reproducible.
  CHECK(epochs_of(0, 16) == epochs_of(0, 16));
}

TEST_CASE("Concurrent steps get disjoint batches covering each epoch exactly once", "[io]") {
  const int n = 250;
  const int epochs = 3;
  auto files = write_synthetic("concurrent", n);
  reader_instance reader(reader_node(files.images, files.labels, 7, epochs, true, 11));
  std::mutex mutex;
  std::vector<std::vector<int>> batches;
  std::vector<status> ends;
  bool images_ok = true;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      while (true) {
        auto out = reader.run();
        std::lock_guard<std::mutex> lock(mutex);
        if (!out.ok()) {
          ends.push_back(out.error());
          return;
        }
        images_ok = images_ok && images_match_labels(out->at(0), out->at(1));
        batches.push_back(reader_instance::labels_of(out->at(1)));
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(images_ok);
  REQUIRE(ends.size() == 8);
  for (const status& s : ends) CHECK(s.error_code() == code::out_of_range);
  // 750 examples in batches of 7: 107 full batches and one of 1.
  CHECK(batches.size() == 108);
  std::map<int, int> seen;
  for (int label : flatten(batches)) ++seen[label];
  CHECK(seen.size() == static_cast<std::size_t>(n));
  for (auto [label, count] : seen) {
    INFO("example " << label);
    CHECK(count == epochs);
  }

  // With one epoch, the batches are disjoint and cover it exactly once.
  reader_instance once(reader_node(files.images, files.labels, 9, 1, true, 5));
  std::vector<int> all;
  threads.clear();
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      while (true) {
        auto out = once.run();
        if (!out.ok()) return;
        auto labels = reader_instance::labels_of(out->at(1));
        std::lock_guard<std::mutex> lock(mutex);
        all.insert(all.end(), labels.begin(), labels.end());
      }
    });
  }
  for (auto& t : threads) t.join();
  std::sort(all.begin(), all.end());
  CHECK(all == iota(n));
}

TEST_CASE("IdxReader errors name the file: missing, damaged, mismatched, wrong type", "[io]") {
  auto good = write_synthetic("errors", 10);
  std::string good_images = *read_file(good.images);
  std::string gz_like = std::string("\x1f\x8b\x08\x00", 4) + "not really gzip";
  std::string bad_magic = good_images;
  bad_magic[1] = 0x42;
  struct bad_case {
    std::string name;
    std::string images;
    std::string labels;
    code expected_code;
    std::string expected;  // part of the message, after the file's name
  };
  std::string nine_labels =
      write_temp("nine-labels", to_idx_bytes(tensor::zeros(dtype::uint8, {9})));
  std::vector<bad_case> cases = {
      {"missing", temp_dir() + "/missing-images", good.labels, code::not_found, "cannot open"},
      {"truncated gzip", write_temp("truncated.gz", gz_like.substr(0, 10)), good.labels,
       code::data_loss, "is truncated"},
      {"wrong magic", write_temp("bad-magic", bad_magic), good.labels, code::data_loss,
       "bad magic number"},
      {"count mismatch", good.images, nine_labels, code::invalid_argument, "has 9 labels"},
      {"int32 images",
       write_temp("int32-images", to_idx_bytes(tensor::zeros(dtype::int32, {10, 2, 3}))),
       good.labels, code::invalid_argument, "but images must be uint8 [n, rows, cols]"},
      {"labels as images", good.images, good.images, code::invalid_argument,
       "should hold a vector of labels"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    reader_instance reader(reader_node(c.images, c.labels, 4, 1, true));
    for (int attempt = 0; attempt < 2; ++attempt) {  // the error is kept, not retried
      auto out = reader.run();
      REQUIRE_FALSE(out.ok());
      INFO(out.error().to_string());
      CHECK(out.error().error_code() == c.expected_code);
      CHECK(out.error().message().rfind("IdxReader 'reader': ", 0) == 0);
      CHECK(out.error().message().find(c.expected) != std::string::npos);
      bool names_a_file = out.error().message().find(c.images) != std::string::npos ||
                          out.error().message().find(c.labels) != std::string::npos;
      CHECK(names_a_file);
    }
  }
  // A truncated real gzip file (its data cut mid-stream).
  auto gz = read_file(k_fashion_mnist + "/t10k-labels-idx1-ubyte.gz");
  REQUIRE(gz.ok());
  std::string cut = write_temp("t10k-labels-cut.gz", gz->substr(0, gz->size() / 2));
  reader_instance reader(reader_node(k_fashion_mnist + "/t10k-images-idx3-ubyte.gz", cut, 4, 1, true));
  auto out = reader.run();
  REQUIRE_FALSE(out.ok());
  CHECK(out.error().message().find("'" + cut + "' is truncated") != std::string::npos);
  std::filesystem::remove_all(temp_dir());
}

}  // namespace troupe
