// CPU kernels: IdxReader (schema and semantics in graph/ops/io_ops.cc).
//
// The kernel is the reader's state, shared by every step that runs the node:
//
//  1. Both files are loaded once, by the first compute(), under the mutex (later callers
//     wait for it). A load error is kept and returned by every later compute(): files do
//     not heal, and reloading 50 MB per step would hide the problem.
//  2. The cursor (epoch, position, the epoch's permutation) changes only under the mutex.
//     A compute() takes the indices of its batch under the lock and copies the examples
//     after releasing it, so concurrent steps get disjoint batches and copy in parallel.
//  3. Epoch e's order is a Fisher-Yates shuffle driven by philox(seed, e): it depends
//     only on the seed and e, not on how the batches were split among steps.
//
// estimated_ns() stays "expensive" (the default) although a batch of 64 Fashion-MNIST images is
// a ~50 KB copy, cheaper than a thread hand-off: the first call reads and decompresses
// the files (~0.3 s) and any call may wait on the mutex, and the executor runs a cheap
// root node on the thread that starts the step, which must never block.
#include <cstring>
#include <mutex>
#include <vector>

#include "core/idx.h"
#include "core/random.h"
#include "kernels/kernel_registry.h"

namespace troupe::kernels {

namespace {

class idx_reader_kernel final : public op_kernel {
 public:
  explicit idx_reader_kernel(kernel_construction& c) : op_kernel(c) {
    if (!c.get_attr("images", &images_path_) || !c.get_attr("labels", &labels_path_) ||
        !c.get_attr("batch_size", &batch_size_) || !c.get_attr("num_epochs", &num_epochs_) ||
        !c.get_attr("shuffle", &shuffle_) || !c.get_attr("seed", &seed_)) {
      return;
    }
    if (images_path_.empty() || labels_path_.empty()) {
      c.fail(invalid_argument_error("IdxReader '", name(), "': attrs images and labels must ",
                                    "name files (images: '", images_path_, "', labels: '",
                                    labels_path_, "')"));
    } else if (batch_size_ < 1) {
      c.fail(invalid_argument_error("IdxReader '", name(), "': batch_size must be >= 1 but is ",
                                    batch_size_));
    } else if (num_epochs_ < 0) {
      c.fail(invalid_argument_error("IdxReader '", name(),
                                    "': num_epochs must be >= 0 (0: forever) but is ",
                                    num_epochs_));
    }
  }

  void compute(kernel_context& ctx) override {
    std::vector<std::int64_t> batch;
    tensor images, labels;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!loaded_) load();
      if (!load_status_.ok()) {
        ctx.fail(load_status_);
        return;
      }
      if (exhausted()) {
        ctx.fail(out_of_range_error("IdxReader '", name(), "': end of input after ",
                                    num_epochs_, num_epochs_ == 1 ? " epoch" : " epochs"));
        return;
      }
      take_batch(&batch);
      images = images_;
      labels = labels_;
    }
    auto k = static_cast<std::int64_t>(batch.size());
    tensor& image_batch = ctx.allocate_output(0, tensor_shape{k, images.dim(1), images.dim(2)});
    tensor& label_batch = ctx.allocate_output(1, tensor_shape{k});
    std::size_t row = static_cast<std::size_t>(images.dim(1) * images.dim(2));
    const std::uint8_t* from_images = images.data<std::uint8_t>();
    const std::uint8_t* from_labels = labels.data<std::uint8_t>();
    std::uint8_t* to_images = image_batch.data<std::uint8_t>();
    std::uint8_t* to_labels = label_batch.data<std::uint8_t>();
    for (std::size_t i = 0; i < batch.size(); ++i) {
      auto example = static_cast<std::size_t>(batch[i]);
      std::memcpy(to_images + i * row, from_images + example * row, row);
      to_labels[i] = from_labels[example];
    }
  }

 private:
  // REQUIRES: mutex_ held.
  void load() {
    loaded_ = true;
    auto examples = read_idx_examples(images_path_, labels_path_);
    if (!examples.ok()) {
      load_status_ = examples.error().with_context(str_cat("IdxReader '", name(), "'"));
      return;
    }
    const tensor& images = examples->images;
    const tensor& labels = examples->labels;
    if (images.type() != dtype::uint8 || images.rank() != 3) {
      load_status_ = invalid_argument_error(
          "IdxReader '", name(), "': '", images_path_, "' holds ", dtype_name(images.type()), " ",
          images.shape().to_string(), " but images must be uint8 [n, rows, cols]");
    } else if (labels.type() != dtype::uint8) {
      load_status_ = invalid_argument_error("IdxReader '", name(), "': '", labels_path_,
                                            "' holds ", dtype_name(labels.type()),
                                            " labels but labels must be uint8");
    } else if (labels.dim(0) == 0) {
      load_status_ = invalid_argument_error("IdxReader '", name(), "': '", images_path_,
                                            "' and '", labels_path_, "' hold no examples");
    } else if (labels.dim(0) > std::int64_t{1} << 31) {
      load_status_ = invalid_argument_error("IdxReader '", name(), "': '", labels_path_,
                                            "' holds ", labels.dim(0),
                                            " examples, more than the 2^31 supported");
    }
    if (!load_status_.ok()) return;
    images_ = examples->images;
    labels_ = examples->labels;
    start_epoch();
  }

  bool exhausted() const { return num_epochs_ > 0 && epoch_ >= num_epochs_; }

  // The order of epoch_'s examples. REQUIRES: mutex_ held, files loaded.
  void start_epoch() {
    position_ = 0;
    auto n = static_cast<std::size_t>(labels_.dim(0));
    order_.resize(n);
    for (std::size_t i = 0; i < n; ++i) order_[i] = static_cast<std::uint32_t>(i);
    if (!shuffle_) return;
    philox generator(static_cast<std::uint64_t>(seed_), static_cast<std::uint64_t>(epoch_));
    philox::block bits{};
    int used = 2;  // 64-bit draws taken from `bits`
    for (std::size_t i = n - 1; i > 0; --i) {
      if (used == 2) {
        bits = generator.next();
        used = 0;
      }
      std::uint64_t r = (std::uint64_t{bits[2 * used]} << 32) | bits[2 * used + 1];
      ++used;
      // Lemire's multiply-shift maps r to [0, i]; its bias, below (i+1) / 2^64, is
      // far under anything a shuffle of 2^31 examples could show.
      auto j = static_cast<std::size_t>((static_cast<unsigned __int128>(r) * (i + 1)) >> 64);
      std::swap(order_[i], order_[j]);
    }
  }

  // Appends the next batch's example indices, crossing into later epochs as needed; it
  // is short only when the final epoch ends. REQUIRES: mutex_ held, !exhausted().
  void take_batch(std::vector<std::int64_t>* batch) {
    auto n = static_cast<std::int64_t>(order_.size());
    batch->reserve(static_cast<std::size_t>(batch_size_));
    while (static_cast<std::int64_t>(batch->size()) < batch_size_ && !exhausted()) {
      std::int64_t take =
          std::min(batch_size_ - static_cast<std::int64_t>(batch->size()), n - position_);
      for (std::int64_t i = 0; i < take; ++i) {
        batch->push_back(order_[static_cast<std::size_t>(position_ + i)]);
      }
      position_ += take;
      if (position_ == n) {
        ++epoch_;
        if (!exhausted()) start_epoch();
      }
    }
  }

  // Attributes, fixed at construction.
  std::string images_path_;
  std::string labels_path_;
  std::int64_t batch_size_ = 0;
  std::int64_t num_epochs_ = 0;
  bool shuffle_ = true;
  std::int64_t seed_ = 0;

  std::mutex mutex_;
  // Guarded by mutex_.
  bool loaded_ = false;
  status load_status_;
  tensor images_;  // uint8 [n, rows, cols]
  tensor labels_;  // uint8 [n]
  std::int64_t epoch_ = 0;
  std::int64_t position_ = 0;          // in order_
  std::vector<std::uint32_t> order_;   // epoch_'s permutation of [0, n)
};

}  // namespace

void register_io_kernels(kernel_registry& registry) {
  registry.add("IdxReader", "CPU", {}, make_kernel<idx_reader_kernel>);
}

}  // namespace troupe::kernels
