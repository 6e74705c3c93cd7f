// CPU kernels: IdxReader, IdxReaderSaveState, IdxReaderRestoreState (schemas and
// semantics in graph/ops/io_ops.cc).
//
// A reader's state (its cursor and the examples it reads) is a resource in the device's
// resource manager under (container, shared_name or the node's name), shared by every
// step that runs the node and found by the save and restore ops; outside a device (a
// kernel run on its own) the kernel keeps a state of its own.
//
//  1. Both files are loaded once, by the first compute(), under the mutex (later callers
//     wait for it). A load error is kept and returned by every later compute(): files do
//     not heal, and reloading 50 MB per step would hide the problem.
//  2. The cursor (epoch, position, the epoch's permutation) changes only under the mutex.
//     A compute() takes the indices of its batch under the lock and copies the examples
//     after releasing it, so concurrent steps get disjoint batches and copy in parallel.
//  3. Epoch e's order is a Fisher-Yates shuffle driven by philox(seed, e): it depends
//     only on the seed and e, not on how the batches were split among steps. So the
//     cursor is all there is to save: (epoch, position) makes the same batches again.
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
#include "kernels/node_resource.h"

namespace troupe::kernels {

namespace {

// One reader's cursor and examples.
class idx_reader_state final : public resource {
 public:
  std::string_view kind() const override { return "reader"; }

  std::mutex mutex;
  // Guarded by mutex.
  bool loaded = false;
  status load_status;
  tensor images;  // uint8 [n, rows, cols]
  tensor labels;  // uint8 [n]
  std::int64_t epoch = 0;
  std::int64_t position = 0;          // in order
  std::vector<std::uint32_t> order;   // epoch's permutation of [0, n); empty until loaded
};

// The reader state of c's node (kernels/node_resource.h): a reader not yet run is at its
// start, whoever asks first.
std::shared_ptr<idx_reader_state> reader_state_of(kernel_construction& c, bool require_shared_name) {
  return node_resource<idx_reader_state>(c, require_shared_name, "reader",
                                         [] { return std::make_shared<idx_reader_state>(); });
}

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
    } else {
      state_ = reader_state_of(c, /*require_shared_name=*/false);
    }
  }

  void compute(kernel_context& ctx) override {
    std::vector<std::int64_t> batch;
    tensor images, labels;
    idx_reader_state& st = *state_;
    {
      std::lock_guard<std::mutex> lock(st.mutex);
      if (!st.loaded) load(st);
      if (!st.load_status.ok()) {
        ctx.fail(st.load_status);
        return;
      }
      if (st.order.empty()) {  // restored before it was loaded (or loaded by another node)
        if (status s = check_cursor(st); !s.ok()) {
          ctx.fail(std::move(s));
          return;
        }
        if (!exhausted(st)) start_epoch(st);
      }
      if (exhausted(st)) {
        ctx.fail(out_of_range_error("IdxReader '", name(), "': end of input after ",
                                    num_epochs_, num_epochs_ == 1 ? " epoch" : " epochs"));
        return;
      }
      take_batch(st, &batch);
      images = st.images;
      labels = st.labels;
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
  // REQUIRES: st.mutex held.
  void load(idx_reader_state& st) {
    st.loaded = true;
    auto examples = read_idx_examples(images_path_, labels_path_);
    if (!examples.ok()) {
      st.load_status = examples.error().with_context(str_cat("IdxReader '", name(), "'"));
      return;
    }
    const tensor& images = examples->images;
    const tensor& labels = examples->labels;
    if (images.type() != dtype::uint8 || images.rank() != 3) {
      st.load_status = invalid_argument_error(
          "IdxReader '", name(), "': '", images_path_, "' holds ", dtype_name(images.type()), " ",
          images.shape().to_string(), " but images must be uint8 [n, rows, cols]");
    } else if (labels.type() != dtype::uint8) {
      st.load_status = invalid_argument_error("IdxReader '", name(), "': '", labels_path_,
                                              "' holds ", dtype_name(labels.type()),
                                              " labels but labels must be uint8");
    } else if (labels.dim(0) == 0) {
      st.load_status = invalid_argument_error("IdxReader '", name(), "': '", images_path_,
                                              "' and '", labels_path_, "' hold no examples");
    } else if (labels.dim(0) > std::int64_t{1} << 31) {
      st.load_status = invalid_argument_error("IdxReader '", name(), "': '", labels_path_,
                                              "' holds ", labels.dim(0),
                                              " examples, more than the 2^31 supported");
    }
    if (!st.load_status.ok()) return;
    st.images = examples->images;
    st.labels = examples->labels;
  }

  // A restored cursor must point into the files. REQUIRES: st.mutex held, loaded.
  status check_cursor(const idx_reader_state& st) const {
    if (st.position < st.labels.dim(0)) return status();
    return invalid_argument_error("IdxReader '", name(), "': its restored position ", st.position, " (epoch ",
                                  st.epoch, ") is past the ", st.labels.dim(0), " examples of '", labels_path_,
                                  "': the state was saved from other files");
  }

  bool exhausted(const idx_reader_state& st) const { return num_epochs_ > 0 && st.epoch >= num_epochs_; }

  // The order of st.epoch's examples (the position is left as it is). REQUIRES: st.mutex
  // held, files loaded.
  void start_epoch(idx_reader_state& st) const {
    auto n = static_cast<std::size_t>(st.labels.dim(0));
    auto& order = st.order;
    order.resize(n);
    for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint32_t>(i);
    if (!shuffle_) return;
    philox generator(static_cast<std::uint64_t>(seed_), static_cast<std::uint64_t>(st.epoch));
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
      std::swap(order[i], order[j]);
    }
  }

  // Appends the next batch's example indices, crossing into later epochs as needed; it
  // is short only when the final epoch ends. REQUIRES: st.mutex held, !exhausted(st).
  void take_batch(idx_reader_state& st, std::vector<std::int64_t>* batch) const {
    auto n = static_cast<std::int64_t>(st.order.size());
    batch->reserve(static_cast<std::size_t>(batch_size_));
    while (static_cast<std::int64_t>(batch->size()) < batch_size_ && !exhausted(st)) {
      std::int64_t take =
          std::min(batch_size_ - static_cast<std::int64_t>(batch->size()), n - st.position);
      for (std::int64_t i = 0; i < take; ++i) {
        batch->push_back(st.order[static_cast<std::size_t>(st.position + i)]);
      }
      st.position += take;
      if (st.position == n) {
        ++st.epoch;
        st.position = 0;
        if (!exhausted(st)) start_epoch(st);
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

  std::shared_ptr<idx_reader_state> state_;
};

// IdxReaderSaveState: the cursor, int64 [epoch, position].
class idx_reader_save_kernel final : public op_kernel {
 public:
  explicit idx_reader_save_kernel(kernel_construction& c) : op_kernel(c) {
    state_ = reader_state_of(c, /*require_shared_name=*/true);
  }
  void compute(kernel_context& ctx) override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    ctx.set_output(0, tensor::from_vector<std::int64_t>({state_->epoch, state_->position}));
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }

 private:
  std::shared_ptr<idx_reader_state> state_;
};

// IdxReaderRestoreState: sets the cursor; the epoch's order is drawn again when the reader
// next runs.
class idx_reader_restore_kernel final : public op_kernel {
 public:
  explicit idx_reader_restore_kernel(kernel_construction& c) : op_kernel(c) {
    state_ = reader_state_of(c, /*require_shared_name=*/true);
  }
  void compute(kernel_context& ctx) override {
    const tensor& cursor = ctx.input(0);
    if (cursor.type() != dtype::int64 || cursor.rank() != 1 || cursor.num_elements() != 2) {
      ctx.fail_invalid_argument("the state must be int64 [epoch, position] but is ", cursor.debug_string(4));
      return;
    }
    const std::int64_t epoch = cursor.flat<std::int64_t>()[0], position = cursor.flat<std::int64_t>()[1];
    if (epoch < 0 || position < 0) {
      ctx.fail_invalid_argument("the state [epoch ", epoch, ", position ", position, "] must not be negative");
      return;
    }
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->epoch = epoch;
    state_->position = position;
    state_->order.clear();  // drawn again (and the position checked) by the reader's next run
  }
  double estimated_ns(std::span<const tensor>) const override { return 0; }

 private:
  std::shared_ptr<idx_reader_state> state_;
};

}  // namespace

void register_io_kernels(kernel_registry& registry) {
  registry.add("IdxReader", "CPU", {}, make_kernel<idx_reader_kernel>);
  registry.add("IdxReaderSaveState", "CPU", {}, make_kernel<idx_reader_save_kernel>);
  registry.add("IdxReaderRestoreState", "CPU", {}, make_kernel<idx_reader_restore_kernel>);
}

}  // namespace troupe::kernels
