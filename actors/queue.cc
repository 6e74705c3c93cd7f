#include "actors/queue.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <deque>
#include <optional>

#include "actors/spawn.h"
#include "core/phantom.h"
#include "core/random.h"

namespace troupe::actors {

std::string_view queue_kind_name(queue_kind kind) {
  switch (kind) {
    case queue_kind::fifo: return "FIFOQueue";
    case queue_kind::random_shuffle: return "RandomShuffleQueue";
    case queue_kind::padding_fifo: return "PaddingFIFOQueue";
  }
  return "queue";
}

namespace {

std::string type_list(const std::vector<dtype>& types) {
  std::string out;
  for (dtype t : types) out += str_cat(out.empty() ? "" : ", ", dtype_name(t));
  return "[" + out + "]";
}

std::string shape_list(const std::vector<partial_shape>& shapes) {
  std::string out;
  for (const auto& s : shapes) out += str_cat(out.empty() ? "" : ", ", s.to_string());
  return "[" + out + "]";
}

}  // namespace

status validate_queue_options(const queue_options& o) {
  const std::string q = str_cat("queue '", o.name, "'");
  if (o.types.empty()) return invalid_argument_error(q, " has no component types; give at least one");
  for (std::size_t i = 0; i < o.types.size(); ++i) {
    if (dtype_size(o.types[i]) == 0) {
      return invalid_argument_error(q, " component ", i, " has dtype ", dtype_name(o.types[i]),
                                    "; queues hold fixed-size numeric dtypes only");
    }
  }
  const bool padding = o.kind == queue_kind::padding_fifo;
  if (padding && o.shapes.size() != o.types.size()) {
    return invalid_argument_error(q, " (", queue_kind_name(o.kind), ") has ", o.types.size(),
                                  " component type(s) but ", o.shapes.size(),
                                  " shape(s); a PaddingFIFOQueue needs one shape per component");
  }
  if (!o.shapes.empty() && o.shapes.size() != o.types.size()) {
    return invalid_argument_error(q, " has ", o.types.size(), " component type(s) but ",
                                  o.shapes.size(), " shape(s); give one shape per component or none");
  }
  for (std::size_t i = 0; i < o.shapes.size(); ++i) {
    if (!o.shapes[i].known_rank()) {
      return invalid_argument_error(q, " component ", i, " has a shape of unknown rank; queue shapes need a rank");
    }
    if (!padding && !o.shapes[i].fully_defined()) {
      return invalid_argument_error(q, " component ", i, " has shape ", o.shapes[i].to_string(),
                                    ", which is not fully defined; only a PaddingFIFOQueue allows "
                                    "unknown dimensions");
    }
    for (std::int64_t d : o.shapes[i].dims()) {
      if (d < -1) return invalid_argument_error(q, " component ", i, " has shape ", o.shapes[i].to_string());
    }
  }
  if (o.capacity == 0) {
    return invalid_argument_error(q, " has capacity 0; give a positive capacity, or a negative one for "
                                  "an unbounded queue");
  }
  if (o.kind == queue_kind::random_shuffle) {
    if (o.min_after_dequeue < 0) {
      return invalid_argument_error(q, " has min_after_dequeue ", o.min_after_dequeue, "; it must be >= 0");
    }
    if (o.capacity > 0 && o.min_after_dequeue >= o.capacity) {
      return invalid_argument_error(q, " has min_after_dequeue ", o.min_after_dequeue,
                                    " but capacity ", o.capacity, "; min_after_dequeue must be < capacity");
    }
  }
  return status();
}

namespace {

using timeout_atom = caf::atom_constant<caf::atom("qtimeout")>;

// Copies above this many bytes run on the compute pool (when the queue has one): below
// it (~13 us at 10 GB/s, under the executor's 20 us rule for inline work), a thread
// hand-off (~16 us) costs more than the copy.
constexpr std::size_t k_pool_copy_bytes = std::size_t{1} << 17;

// Elements [begin, begin + count) along dimension 0 of one enqueued batch. The queue holds
// runs, never copies: a single enqueue is a run of one over its tensors reshaped to
// [1, ...], an EnqueueMany (or part of one) a run over the batch.
struct run {
  std::vector<tensor> components;
  std::int64_t begin = 0;
  std::int64_t count = 0;
};

// Bytes of one element of `c` (a batch along dimension 0).
std::size_t element_bytes(const tensor& c) {
  std::size_t elements = 1;
  for (int d = 1; d < c.rank(); ++d) elements *= static_cast<std::size_t>(c.dim(d));
  return elements * dtype_size(c.type());
}

tensor_shape element_shape(const tensor& c) {
  return tensor_shape(std::vector<std::int64_t>(c.shape().dims().begin() + 1, c.shape().dims().end()));
}

// True when b continues a: the same batches, the next elements.
bool continues(const run& a, const run& b) {
  if (a.begin + a.count != b.begin) return false;
  for (std::size_t i = 0; i < a.components.size(); ++i) {
    if (!a.components[i].shares_buffer_with(b.components[i]) ||
        a.components[i].raw_data() != b.components[i].raw_data()) {
      return false;
    }
  }
  return true;
}

void append_run(std::vector<run>& runs, run r) {
  if (!runs.empty() && continues(runs.back(), r)) {
    runs.back().count += r.count;
  } else {
    runs.push_back(std::move(r));
  }
}

// What stacking needs to know about the queue; shared with copies on the pool.
struct queue_meta {
  std::string name;
  queue_kind kind;
  std::vector<dtype> types;
  std::vector<partial_shape> shapes;
};

// Copies one element of shape `src_dims` (row-major at `src`) into a slot of shape
// `dst_dims` (>= src_dims in every dimension, row-major at `dst`), leaving the rest of the
// slot untouched.
void copy_padded(const char* src, const std::vector<std::int64_t>& src_dims, char* dst,
                 const std::vector<std::int64_t>& dst_dims, std::size_t item) {
  const std::size_t rank = src_dims.size();
  if (rank == 0) {
    std::memcpy(dst, src, item);
    return;
  }
  for (std::int64_t d : src_dims) {
    if (d == 0) return;
  }
  // Strides (in items) of the destination; rows are the last dimension.
  std::vector<std::int64_t> dst_stride(rank, 1);
  for (std::size_t d = rank - 1; d > 0; --d) dst_stride[d - 1] = dst_stride[d] * dst_dims[d];
  const std::size_t row = static_cast<std::size_t>(src_dims[rank - 1]) * item;
  std::vector<std::int64_t> index(rank, 0);  // over the leading rank - 1 dimensions
  for (;;) {
    std::int64_t dst_offset = 0;
    for (std::size_t d = 0; d + 1 < rank; ++d) dst_offset += index[d] * dst_stride[d];
    std::memcpy(dst + static_cast<std::size_t>(dst_offset) * item, src, row);
    src += row;
    std::size_t d = rank - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++index[d] < src_dims[d]) break;
      index[d] = 0;
    }
  }
}

// The element of `r` (count 1) as tensors of the element shape.
std::vector<tensor> unstack_one(const run& r) {
  std::vector<tensor> out;
  out.reserve(r.components.size());
  for (const tensor& c : r.components) {
    tensor_shape shape = element_shape(c);
    if (c.dim(0) == 1) {
      out.push_back(c.reshaped(std::move(shape)));
      continue;
    }
    if (is_phantom(c)) {  // a shape-only simulation's: its element is one too
      out.push_back(phantom_tensor(c.type(), std::move(shape)));
      continue;
    }
    tensor t(c.type(), std::move(shape));
    const std::size_t bytes = element_bytes(c);
    std::memcpy(t.raw_data(), static_cast<const char*>(c.raw_data()) + static_cast<std::size_t>(r.begin) * bytes, bytes);
    out.push_back(std::move(t));
  }
  return out;
}

// The n elements of `runs`, stacked along a new dimension 0 per component (padded to the
// largest element for a PaddingFIFOQueue).
std::vector<tensor> stack(const queue_meta& meta, const std::vector<run>& runs, std::int64_t n) {
  std::vector<tensor> out;
  out.reserve(meta.types.size());
  for (std::size_t i = 0; i < meta.types.size(); ++i) {
    if (runs.size() == 1 && runs[0].begin == 0 && runs[0].count == runs[0].components[i].dim(0)) {
      out.push_back(runs[0].components[i]);  // one whole enqueued batch: no copy
      continue;
    }
    // The element shape of the output: the queue's, with unknown dimensions (padding)
    // set to the largest in the batch (0 for an empty batch).
    std::vector<std::int64_t> dims;
    if (!meta.shapes.empty()) {
      dims = meta.shapes[i].dims();
      for (std::int64_t& d : dims) d = std::max<std::int64_t>(d, 0);
    } else {
      dims = element_shape(runs.front().components[i]).dims();  // n > 0 (checked on arrival)
    }
    bool pad = false;
    for (const run& r : runs) {
      const tensor& c = r.components[i];
      for (std::size_t d = 0; d < dims.size(); ++d) {
        if (c.dim(static_cast<int>(d) + 1) != dims[d]) pad = true;
        dims[d] = std::max(dims[d], c.dim(static_cast<int>(d) + 1));
      }
    }
    std::vector<std::int64_t> out_dims{n};
    out_dims.insert(out_dims.end(), dims.begin(), dims.end());
    if (std::any_of(runs.begin(), runs.end(), [&](const run& r) { return is_phantom(r.components[i]); })) {
      out.push_back(phantom_tensor(meta.types[i], tensor_shape(out_dims)));  // a shape-only simulation's
      continue;
    }
    tensor t(meta.types[i], tensor_shape(out_dims));
    const std::size_t item = dtype_size(meta.types[i]);
    std::size_t slot = item;
    for (std::int64_t d : dims) slot *= static_cast<std::size_t>(d);
    char* dst = static_cast<char*>(t.raw_data());
    if (pad) std::memset(dst, 0, t.byte_size());
    for (const run& r : runs) {
      const tensor& c = r.components[i];
      const std::size_t bytes = element_bytes(c);
      const char* src = static_cast<const char*>(c.raw_data()) + static_cast<std::size_t>(r.begin) * bytes;
      if (bytes == slot) {
        std::memcpy(dst, src, static_cast<std::size_t>(r.count) * bytes);
        dst += static_cast<std::size_t>(r.count) * slot;
        continue;
      }
      const std::vector<std::int64_t> src_dims = element_shape(c).dims();
      for (std::int64_t e = 0; e < r.count; ++e) {
        copy_padded(src, src_dims, dst, dims, item);
        src += bytes;
        dst += slot;
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

// The bytes stack() would copy (0 when it returns the enqueued tensors).
std::size_t copy_bytes(const std::vector<run>& runs) {
  if (runs.size() == 1 && runs[0].begin == 0 && runs[0].count == runs[0].components[0].dim(0)) return 0;
  std::size_t bytes = 0;
  for (const run& r : runs) {
    for (const tensor& c : r.components) bytes += static_cast<std::size_t>(r.count) * element_bytes(c);
  }
  return bytes;
}

struct parked_enqueue {
  std::uint64_t serial = 0;  // the actor's own id (timers); request_id is the caller's
  std::uint64_t request_id = 0;
  bool is_close = false;
  std::vector<tensor> components;
  std::int64_t next = 0;   // elements already in the queue
  std::int64_t total = 0;  // elements to enqueue
  std::int64_t timeout_ms = -1;
  status_reply done;
};

struct parked_dequeue {
  std::uint64_t serial = 0;
  std::uint64_t request_id = 0;
  dequeue_mode mode = dequeue_mode::one;
  std::int64_t n = 1;
  std::vector<run> taken;  // elements taken so far, in order
  std::int64_t num_taken = 0;
  std::int64_t timeout_ms = -1;
  element_reply done;
};

struct queue_state {
  std::shared_ptr<const queue_meta> meta;
  std::int64_t capacity = -1;
  std::int64_t min_after_dequeue = 0;
  compute_pool* pool = nullptr;
  philox rng;
  philox::block random_block{};
  int random_used = 4;

  std::deque<run> fifo;          // FIFO and PaddingFIFO: runs in order
  std::vector<run> shuffled;     // RandomShuffle: runs of one element, in no order
  std::int64_t size = 0;
  bool closed = false;
  std::deque<parked_enqueue> enqueues;  // enqueues and closes, in arrival order
  std::deque<parked_dequeue> dequeues;
  std::uint64_t next_serial = 1;

  static inline const char* name = "troupe-queue";

  queue_state() = default;
  queue_state(const queue_state&) = delete;
  queue_state& operator=(const queue_state&) = delete;

  // The actor is ending (CAF destroys the state at exit): nothing parked will be served.
  ~queue_state() {
    if (meta == nullptr) return;
    for (auto& e : enqueues) {
      e.done(unavailable_error(q(), " stopped while ", e.is_close ? "a close" : "an enqueue",
                               " was waiting"));
    }
    for (auto& d : dequeues) {
      d.done(unavailable_error(q(), " stopped while a dequeue was waiting (requested ", d.n, ")"));
    }
  }

  std::string q() const { return str_cat("queue '", meta->name, "'"); }
  bool is_shuffle() const { return meta->kind == queue_kind::random_shuffle; }
  bool fully_defined() const {
    return !meta->shapes.empty() &&
           std::all_of(meta->shapes.begin(), meta->shapes.end(), [](const partial_shape& s) { return s.fully_defined(); });
  }

  std::uint32_t next_random() {
    if (random_used == 4) {
      random_block = rng.next();
      random_used = 0;
    }
    return random_block[static_cast<std::size_t>(random_used++)];
  }
  // Uniform in [0, n).
  std::int64_t uniform(std::int64_t n) {
    std::uint64_t hi = next_random();
    std::uint64_t x = (hi << 32) | next_random();
    return static_cast<std::int64_t>(x % static_cast<std::uint64_t>(n));
  }

  // ---- Storage.
  void push(run r) {
    size += r.count;
    if (is_shuffle()) {
      for (std::int64_t e = 0; e < r.count; ++e) shuffled.push_back(run{r.components, r.begin + e, 1});
      return;
    }
    if (!fifo.empty() && continues(fifo.back(), r)) {
      fifo.back().count += r.count;
    } else {
      fifo.push_back(std::move(r));
    }
  }
  // Moves k <= size elements into `out`: the oldest (FIFO), or uniformly random ones.
  void take(std::int64_t k, std::vector<run>& out) {
    size -= k;
    if (is_shuffle()) {
      for (; k > 0; --k) {
        auto i = static_cast<std::size_t>(uniform(static_cast<std::int64_t>(shuffled.size())));
        std::swap(shuffled[i], shuffled.back());
        out.push_back(std::move(shuffled.back()));
        shuffled.pop_back();
      }
      return;
    }
    while (k > 0) {
      run& front = fifo.front();
      std::int64_t m = std::min(k, front.count);
      append_run(out, run{front.components, front.begin, m});
      front.begin += m;
      front.count -= m;
      k -= m;
      if (front.count == 0) fifo.pop_front();
    }
  }
  // Gives back elements taken by a dequeue that failed: to the front, in order.
  void restore(std::vector<run>& taken) {
    for (auto it = taken.rbegin(); it != taken.rend(); ++it) {
      size += it->count;
      if (is_shuffle()) {
        for (std::int64_t e = 0; e < it->count; ++e) shuffled.push_back(run{it->components, it->begin + e, 1});
      } else {
        fifo.push_front(std::move(*it));
      }
    }
    taken.clear();
  }

  // ---- Checks on arrival.
  status check_element(const std::vector<tensor>& components, bool many, std::int64_t* count) const {
    const auto& types = meta->types;
    if (components.size() != types.size()) {
      return invalid_argument_error(q(), " has ", types.size(), " component(s) ", type_list(types),
                                    " but ", components.size(), " tensor(s) were enqueued");
    }
    *count = 1;
    for (std::size_t i = 0; i < components.size(); ++i) {
      const tensor& c = components[i];
      if (!c.initialized()) return invalid_argument_error(q(), ": enqueued component ", i, " is an uninitialized tensor");
      if (c.type() != types[i]) {
        return invalid_argument_error(q(), ": enqueued component ", i, " has dtype ", dtype_name(c.type()),
                                      " but the queue's component ", i, " has dtype ", dtype_name(types[i]));
      }
      if (many) {
        if (c.rank() == 0) {
          return invalid_argument_error(q(), ": EnqueueMany component ", i,
                                        " is a scalar; it needs a leading dimension of elements");
        }
        if (i == 0) {
          *count = c.dim(0);
        } else if (c.dim(0) != *count) {
          return invalid_argument_error(q(), ": EnqueueMany components disagree on the number of elements: "
                                        "component 0 has ", *count, ", component ", i, " has ", c.dim(0));
        }
      }
      if (meta->shapes.empty()) continue;
      tensor_shape element = many ? element_shape(c) : c.shape();
      if (!meta->shapes[i].is_compatible_with(element)) {
        return invalid_argument_error(q(), ": enqueued component ", i, " has shape ", c.shape().to_string(),
                                      many ? str_cat(" (elements of shape ", element.to_string(), ")") : "",
                                      " but the queue's component ", i, " has shape ",
                                      meta->shapes[i].to_string());
      }
    }
    return status();
  }

  // ---- Serving: called after every change; answers whatever can be answered now.
  void pump() {
    bool progress = true;
    while (progress) {
      progress = serve_enqueues();
      progress = serve_dequeues() || progress;
    }
  }

  bool serve_enqueues() {
    bool progress = false;
    while (!enqueues.empty()) {
      parked_enqueue& e = enqueues.front();
      if (e.is_close) {
        if (closed) {
          e.done(cancelled_error(q(), " is already closed"));
        } else {
          closed = true;
          e.done(done_t{});
        }
      } else if (closed) {
        e.done(cancelled_error(q(), " is closed"));
      } else {
        std::int64_t k = e.total - e.next;
        if (capacity > 0) k = std::min(k, capacity - size);
        if (k <= 0) break;
        push(run{e.components, e.next, k});
        e.next += k;
        progress = true;
        if (e.next < e.total) break;
        e.done(done_t{});
      }
      enqueues.pop_front();
      progress = true;
    }
    return progress;
  }

  bool serve_dequeues() {
    bool progress = false;
    while (!dequeues.empty()) {
      parked_dequeue& d = dequeues.front();
      const std::int64_t kept = is_shuffle() && !closed ? min_after_dequeue : 0;
      const std::int64_t k = std::min(d.n - d.num_taken, std::max<std::int64_t>(size - kept, 0));
      if (k > 0) {
        take(k, d.taken);
        d.num_taken += k;
        progress = true;
      }
      if (d.num_taken < d.n) {
        if (!closed) break;
        // Closed, and the queue is empty now.
        if (d.mode == dequeue_mode::up_to && d.num_taken > 0) {
          d.n = d.num_taken;
        } else {
          restore(d.taken);
          d.done(out_of_range_error(q(), " is closed and has insufficient elements (requested ", d.n,
                                    ", current size ", size, ")"));
          dequeues.pop_front();
          progress = true;
          continue;
        }
      }
      answer(d);
      dequeues.pop_front();
      progress = true;
    }
    return progress;
  }

  // Builds d's outputs from what it took and replies (on the pool when the copy is large).
  // An allocation over the memory limit fails the dequeue (its elements are gone with it,
  // as with any failed dequeue that had taken them).
  void answer(parked_dequeue& d) {
    auto build = [](const queue_meta& m, const std::vector<run>& taken, std::int64_t n, dequeue_mode mode,
                    const element_reply& done) {
      std::vector<tensor> out;
      status thrown = kernels::catch_exceptions(
          [&] { out = mode == dequeue_mode::one ? unstack_one(taken.front()) : stack(m, taken, n); });
      if (thrown.ok()) done(std::move(out));
      else done(thrown);
    };
    if (d.mode != dequeue_mode::one && pool != nullptr && copy_bytes(d.taken) >= k_pool_copy_bytes) {
      pool->schedule([build, m = meta, taken = std::move(d.taken), n = d.n, mode = d.mode, done = std::move(d.done)] {
        build(*m, taken, n, mode, done);
      });
      return;
    }
    build(*meta, d.taken, d.n, d.mode, d.done);
  }

  // ---- Cancellation and timeouts.
  template <class Match>
  bool fail_parked(Match match, const std::function<status(const parked_enqueue&)>& enqueue_error,
                   const std::function<status(const parked_dequeue&)>& dequeue_error) {
    for (auto it = enqueues.begin(); it != enqueues.end(); ++it) {
      if (match(it->serial, it->request_id)) {
        it->done(enqueue_error(*it));
        enqueues.erase(it);
        return true;
      }
    }
    for (auto it = dequeues.begin(); it != dequeues.end(); ++it) {
      if (match(it->serial, it->request_id)) {
        restore(it->taken);
        it->done(dequeue_error(*it));
        dequeues.erase(it);
        return true;
      }
    }
    return false;
  }
};

using queue_actor = caf::stateful_actor<queue_state>;

void arm_timeout(queue_actor* self, std::uint64_t serial, std::int64_t timeout_ms) {
  if (timeout_ms > 0) {
    self->delayed_send(self, std::chrono::milliseconds(timeout_ms), timeout_atom::value, serial);
  }
}

caf::behavior queue_behavior(queue_actor* self, queue_options options) {
  auto& st = self->state;
  st.meta = std::make_shared<const queue_meta>(
      queue_meta{options.name, options.kind, options.types, options.shapes});
  st.capacity = options.capacity;
  st.min_after_dequeue = options.kind == queue_kind::random_shuffle ? options.min_after_dequeue : 0;
  st.pool = options.pool;
  if (options.kind == queue_kind::random_shuffle) {
    std::uint64_t seed = options.seed, seed2 = options.seed2;
    if (seed == 0 && seed2 == 0) {
      seed = random_seed();
      seed2 = random_seed();
    }
    st.rng = philox(seed, seed2);
  }
  if (options.owner) {
    self->monitor(options.owner);
    self->set_down_handler([self](caf::down_msg& msg) {
      self->quit(msg.reason ? msg.reason : caf::make_error(caf::exit_reason::user_shutdown));
    });
  }
  return {
      [self](queue_enqueue& m) {
        auto& st = self->state;
        std::int64_t count = 0;
        status s = st.check_element(m.components, m.many, &count);
        if (!s.ok()) {
          m.done(std::move(s));
          return;
        }
        if (st.closed) {
          m.done(cancelled_error(st.q(), " is closed"));
          return;
        }
        if (count == 0) {  // an empty EnqueueMany (TensorFlow answers it at once)
          m.done(done_t{});
          return;
        }
        if (!m.many) {
          for (tensor& c : m.components) {
            std::vector<std::int64_t> dims{1};
            dims.insert(dims.end(), c.shape().dims().begin(), c.shape().dims().end());
            c = c.reshaped(tensor_shape(std::move(dims)));
          }
        }
        const std::uint64_t serial = st.next_serial++;
        st.enqueues.push_back(parked_enqueue{serial, m.request_id, false, std::move(m.components), 0,
                                             count, m.timeout_ms, std::move(m.done)});
        st.pump();
        if (!st.enqueues.empty() && st.enqueues.back().serial == serial) {
          arm_timeout(self, serial, m.timeout_ms);
        }
      },
      [self](queue_dequeue& m) {
        auto& st = self->state;
        if (m.mode == dequeue_mode::one) m.n = 1;
        if (m.n < 0) {
          m.done(invalid_argument_error(st.q(), ": cannot dequeue ", m.n, " elements; n must be >= 0"));
          return;
        }
        if (m.mode != dequeue_mode::one && st.meta->shapes.empty()) {
          m.done(invalid_argument_error(
              st.q(), " (", queue_kind_name(st.meta->kind), ") has no component shapes, so it cannot ",
              m.mode == dequeue_mode::many ? "DequeueMany" : "DequeueUpTo",
              "; give the queue `shapes` (or use a PaddingFIFOQueue for elements of varying shape)"));
          return;
        }
        if (m.n == 0) {
          m.done(stack(*st.meta, {}, 0));
          return;
        }
        const std::uint64_t serial = st.next_serial++;
        st.dequeues.push_back(parked_dequeue{serial, m.request_id, m.mode, m.n, {}, 0, m.timeout_ms,
                                             std::move(m.done)});
        st.pump();
        if (!st.dequeues.empty() && st.dequeues.back().serial == serial) {
          arm_timeout(self, serial, m.timeout_ms);
        }
      },
      [self](queue_close& m) {
        auto& st = self->state;
        if (!m.cancel_pending_enqueues) {
          st.enqueues.push_back(parked_enqueue{st.next_serial++, m.request_id, true, {}, 0, 0, -1,
                                               std::move(m.done)});
          st.pump();
          return;
        }
        st.closed = true;
        for (auto& e : st.enqueues) {
          if (e.is_close) {
            e.done(done_t{});
          } else {
            e.done(cancelled_error("enqueue into ", st.q(), " was cancelled: the queue was closed with "
                                   "cancel_pending_enqueues (", e.next, " of ", e.total,
                                   " element(s) were enqueued)"));
          }
        }
        st.enqueues.clear();
        m.done(done_t{});
        st.pump();
      },
      [self](queue_size_query& m) { m.done(self->state.size); },
      [self](queue_save_state& m) {
        auto& st = self->state;
        if (!st.fully_defined()) {
          m.done(failed_precondition_error(st.q(), " has component shapes ", shape_list(st.meta->shapes),
                                           ", not all fully defined: its elements cannot be saved"));
          return;
        }
        std::vector<run> runs;
        if (st.is_shuffle()) {
          runs = st.shuffled;
        } else {
          runs.assign(st.fifo.begin(), st.fifo.end());
        }
        tensor random_state(dtype::int64, {st.is_shuffle() ? 11 : 0});
        if (st.is_shuffle()) {
          auto words = random_state.flat<std::int64_t>();
          const philox::words rng = st.rng.state();
          std::copy(rng.begin(), rng.end(), words.begin());
          std::copy(st.random_block.begin(), st.random_block.end(), words.begin() + 6);
          words[10] = st.random_used;
        }
        auto build = [](const queue_meta& meta, const std::vector<run>& runs, std::int64_t n, tensor random_state,
                        const element_reply& done) {
          std::vector<tensor> out;
          status thrown = kernels::catch_exceptions([&] { out = stack(meta, runs, n); });
          if (!thrown.ok()) return done(thrown);
          out.push_back(std::move(random_state));
          done(std::move(out));
        };
        if (st.pool != nullptr && copy_bytes(runs) >= k_pool_copy_bytes) {
          st.pool->schedule([build, meta = st.meta, runs = std::move(runs), n = st.size,
                             random_state = std::move(random_state), done = std::move(m.done)] {
            build(*meta, runs, n, random_state, done);
          });
          return;
        }
        build(*st.meta, runs, st.size, std::move(random_state), m.done);
      },
      [self](queue_restore_state& m) {
        auto& st = self->state;
        if (!st.enqueues.empty() || !st.dequeues.empty()) {
          m.done(failed_precondition_error(st.q(), " has ", st.enqueues.size(), " enqueue(s) and ",
                                           st.dequeues.size(), " dequeue(s) waiting: restore it between steps"));
          return;
        }
        std::int64_t count = 0;
        status s = st.check_element(m.components, /*many=*/true, &count);
        if (s.ok() && st.capacity > 0 && count > st.capacity) {
          s = invalid_argument_error(st.q(), ": ", count, " elements restored into a capacity of ", st.capacity);
        }
        const std::int64_t words = st.is_shuffle() ? 11 : 0;
        if (s.ok() && (m.random_state.type() != dtype::int64 || m.random_state.num_elements() != words ||
                       !std::all_of(m.random_state.flat<std::int64_t>().begin(), m.random_state.flat<std::int64_t>().end(),
                                    [](std::int64_t w) { return w >= 0 && w <= 0xffffffffLL; }) ||
                       (st.is_shuffle() && m.random_state.flat<std::int64_t>()[10] > 4))) {
          s = invalid_argument_error(st.q(), ": the generator state must be int64 [", words,
                                     "] of 32-bit words as saved, not ", m.random_state.debug_string(4));
        }
        if (!s.ok()) {
          m.done(std::move(s));
          return;
        }
        st.fifo.clear();
        st.shuffled.clear();
        st.size = 0;
        if (count > 0) st.push(run{std::move(m.components), 0, count});
        if (st.is_shuffle()) {
          auto w = m.random_state.flat<std::int64_t>();
          philox::words rng;
          for (std::size_t i = 0; i < 6; ++i) rng[i] = static_cast<std::uint32_t>(w[i]);
          st.rng = philox::from_state(rng);
          for (std::size_t i = 0; i < 4; ++i) st.random_block[i] = static_cast<std::uint32_t>(w[6 + i]);
          st.random_used = static_cast<int>(w[10]);
        }
        m.done(done_t{});
        st.pump();
      },
      [self](const queue_cancel& m) {
        auto& st = self->state;
        if (m.request_id == 0) return;
        bool found = st.fail_parked(
            [&](std::uint64_t, std::uint64_t id) { return id == m.request_id; },
            [&](const parked_enqueue& e) {
              return cancelled_error(e.is_close ? "close of " : "enqueue into ", st.q(), " was cancelled");
            },
            [&](const parked_dequeue& d) {
              return cancelled_error("dequeue from ", st.q(), " was cancelled (requested ", d.n, ")");
            });
        if (found) st.pump();
      },
      [self](timeout_atom, std::uint64_t serial) {
        auto& st = self->state;
        bool found = st.fail_parked(
            [&](std::uint64_t s, std::uint64_t) { return s == serial; },
            [&](const parked_enqueue& e) {
              return deadline_exceeded_error("enqueue into ", st.q(), " timed out after ", e.timeout_ms,
                                             " ms (", e.next, " of ", e.total, " element(s) enqueued, capacity ",
                                             st.capacity, ")");
            },
            [&](const parked_dequeue& d) {
              return deadline_exceeded_error("dequeue from ", st.q(), " timed out after ", d.timeout_ms,
                                             " ms (requested ", d.n, ", current size ", st.size, ")");
            });
        if (found) st.pump();
      },
  };
}

}  // namespace

caf::actor spawn_queue(caf::actor_system& system, queue_options options) {
  return spawn_unpinned(system, queue_behavior, std::move(options));
}

// ---- queue_resource

queue_resource::queue_resource(caf::actor actor, queue_options options)
    : actor_resource(kind_name, options.name, std::move(actor)), options_(std::move(options)) {
  options_.owner = caf::actor();  // the actor holds it; a strong handle here would be a cycle
}

status queue_resource::matches(const queue_options& other) const {
  const queue_options& o = options_;
  const std::string& q = label();
  if (other.kind != o.kind) {
    return invalid_argument_error("shared ", q, " is a ", queue_kind_name(o.kind), ", not a ",
                                  queue_kind_name(other.kind));
  }
  if (other.types != o.types) {
    return invalid_argument_error("shared ", q, " has component types ", type_list(o.types),
                                  " but the requested ones are ", type_list(other.types));
  }
  if (other.shapes != o.shapes) {
    return invalid_argument_error("shared ", q, " has component shapes ", shape_list(o.shapes),
                                  " but the requested ones are ", shape_list(other.shapes));
  }
  const auto bound = [](std::int64_t c) { return c < 0 ? std::int64_t{-1} : c; };
  if (bound(other.capacity) != bound(o.capacity)) {
    return invalid_argument_error("shared ", q, " has capacity ", bound(o.capacity),
                                  " but the requested capacity is ", bound(other.capacity));
  }
  if (o.kind == queue_kind::random_shuffle &&
      (other.min_after_dequeue != o.min_after_dequeue || other.seed != o.seed || other.seed2 != o.seed2)) {
    return invalid_argument_error("shared ", q, " has min_after_dequeue ", o.min_after_dequeue, ", seed ",
                                  o.seed, ", seed2 ", o.seed2, " but the requested ones are ",
                                  other.min_after_dequeue, ", ", other.seed, ", ", other.seed2);
  }
  return status();
}

std::uint64_t queue_resource::enqueue(std::vector<tensor> element, status_reply done, std::int64_t timeout_ms) {
  const std::uint64_t id = next_request_id();
  caf::anon_send(actor(), queue_enqueue{id, std::move(element), false, timeout_ms, std::move(done)});
  return id;
}

std::uint64_t queue_resource::enqueue_many(std::vector<tensor> batch, status_reply done, std::int64_t timeout_ms) {
  const std::uint64_t id = next_request_id();
  caf::anon_send(actor(), queue_enqueue{id, std::move(batch), true, timeout_ms, std::move(done)});
  return id;
}

std::uint64_t queue_resource::dequeue(element_reply done, std::int64_t timeout_ms) {
  const std::uint64_t id = next_request_id();
  caf::anon_send(actor(), queue_dequeue{id, dequeue_mode::one, 1, timeout_ms, std::move(done)});
  return id;
}

std::uint64_t queue_resource::dequeue_many(std::int64_t n, element_reply done, std::int64_t timeout_ms) {
  const std::uint64_t id = next_request_id();
  caf::anon_send(actor(), queue_dequeue{id, dequeue_mode::many, n, timeout_ms, std::move(done)});
  return id;
}

std::uint64_t queue_resource::dequeue_up_to(std::int64_t n, element_reply done, std::int64_t timeout_ms) {
  const std::uint64_t id = next_request_id();
  caf::anon_send(actor(), queue_dequeue{id, dequeue_mode::up_to, n, timeout_ms, std::move(done)});
  return id;
}

std::uint64_t queue_resource::close(bool cancel_pending_enqueues, status_reply done) {
  const std::uint64_t id = next_request_id();
  caf::anon_send(actor(), queue_close{id, cancel_pending_enqueues, std::move(done)});
  return id;
}

void queue_resource::size(reply<std::int64_t> done) const {
  caf::anon_send(actor(), queue_size_query{std::move(done)});
}

void queue_resource::cancel(std::uint64_t request_id) const {
  caf::anon_send(actor(), queue_cancel{request_id});
}

void queue_resource::save_state(element_reply done) const {
  caf::anon_send(actor(), queue_save_state{std::move(done)});
}

void queue_resource::restore_state(std::vector<tensor> components, tensor random_state, status_reply done) const {
  caf::anon_send(actor(), queue_restore_state{std::move(components), std::move(random_state), std::move(done)});
}

result<std::shared_ptr<queue_resource>> make_queue(caf::actor_system& system, queue_options options) {
  TROUPE_RETURN_IF_ERROR(validate_queue_options(options));
  caf::actor actor = spawn_queue(system, options);
  return std::make_shared<queue_resource>(std::move(actor), std::move(options));
}

}  // namespace troupe::actors
