#include "actors/accumulator.h"

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>

#include "actors/spawn.h"
#include "core/phantom.h"
#include "placement/device_name.h"

namespace troupe::actors {

namespace {

// The fixed order of a sum: by source (job, replica, task index, then the text) and, for
// one source, by arrival.
using source_key = std::tuple<std::string, int, int, std::string>;
source_key key_of(const std::string& source) {
  auto name = placement::parse_device_name(source);
  if (!name.ok()) return {"", -1, -1, source};
  return {name->job.value_or(""), name->replica.value_or(0), name->task.value_or(-1), source};
}

// One kept gradient.
struct entry {
  std::string source;
  source_key order;          // key_of(source), worked out once when it arrives
  std::uint64_t serial = 0;  // arrival order
  std::int64_t local_step = 0;
  tensor values;
  tensor indices;  // sparse only
};

struct parked_take {
  std::uint64_t request_id = 0;
  std::int32_t num_required = 1;
  reply<std::vector<tensor>> done;
};

template <class T>
void add_into(T* out, const T* in, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] += in[i];
}

template <class T>
void divide(T* data, std::int64_t n, std::int64_t by) {
  const T d = static_cast<T>(by);
  for (std::int64_t i = 0; i < n; ++i) data[i] /= d;
}

template <class F>
void by_type(dtype t, F&& f) {
  switch (t) {
    case dtype::float32: return f(float{});
    case dtype::float64: return f(double{});
    case dtype::int32: return f(std::int32_t{});
    case dtype::int64: return f(std::int64_t{});
    default: return;
  }
}

// The dense aggregate of `entries` (sorted).
tensor dense_sum(const std::vector<entry>& entries, accumulator_reduction reduction) {
  for (const entry& e : entries) {  // a shape-only simulation's gradients: their sum is one too
    if (is_phantom(e.values)) return phantom_tensor(e.values.type(), entries.front().values.shape());
  }
  tensor out = entries.front().values.deep_copy();
  by_type(out.type(), [&](auto zero) {
    using T = decltype(zero);
    T* o = out.flat<T>().data();
    const std::int64_t n = out.num_elements();
    for (std::size_t i = 1; i < entries.size(); ++i) add_into(o, entries[i].values.flat<T>().data(), n);
    if (reduction == accumulator_reduction::mean) divide(o, n, static_cast<std::int64_t>(entries.size()));
  });
  return out;
}

// The sparse aggregate of `entries` (sorted): each index once, ascending.
std::vector<tensor> sparse_sum(const std::vector<entry>& entries, accumulator_reduction reduction,
                               const tensor_shape& shape) {
  if (std::any_of(entries.begin(), entries.end(), [](const entry& e) { return is_phantom(e.indices); })) {
    // A shape-only simulation's indices: every row stands for one of its own.
    std::vector<std::int64_t> dims = entries.front().values.shape().dims();
    dims[0] = 0;
    for (const entry& e : entries) dims[0] += e.indices.num_elements();
    return {phantom_tensor(dtype::int64, tensor_shape({dims[0]})), phantom_tensor(entries.front().values.type(), tensor_shape(dims)),
            tensor::from_vector(shape.dims())};
  }
  std::map<std::int64_t, std::int64_t> row_of;
  for (const entry& e : entries) {
    for (std::int64_t id : e.indices.flat<std::int64_t>()) row_of.emplace(id, 0);
  }
  std::int64_t next = 0;
  std::vector<std::int64_t> ids;
  for (auto& [id, row] : row_of) row = next++, ids.push_back(id);
  std::vector<std::int64_t> dims = entries.front().values.shape().dims();
  dims[0] = next;
  if (std::any_of(entries.begin(), entries.end(), [](const entry& e) { return is_phantom(e.values); })) {
    return {tensor::from_vector(ids), phantom_tensor(entries.front().values.type(), tensor_shape(dims)),
            tensor::from_vector(shape.dims())};
  }
  tensor values = tensor::zeros(entries.front().values.type(), tensor_shape(dims));
  const std::int64_t width = next == 0 ? 0 : values.num_elements() / next;
  std::vector<std::int64_t> count(static_cast<std::size_t>(next), 0);
  by_type(values.type(), [&](auto zero) {
    using T = decltype(zero);
    T* o = values.flat<T>().data();
    for (const entry& e : entries) {
      const T* in = e.values.flat<T>().data();
      auto idx = e.indices.flat<std::int64_t>();
      for (std::size_t r = 0; r < idx.size(); ++r) {
        const std::int64_t row = row_of.at(idx[r]);
        add_into(o + row * width, in + static_cast<std::int64_t>(r) * width, width);
        ++count[static_cast<std::size_t>(row)];
      }
    }
    if (reduction == accumulator_reduction::mean) {
      for (std::int64_t row = 0; row < next; ++row) divide(o + row * width, width, count[static_cast<std::size_t>(row)]);
    }
  });
  return {tensor::from_vector(ids), std::move(values), tensor::from_vector(shape.dims())};
}

struct accumulator_state {
  accumulator_options options;
  std::string label;  // "accumulator 'name'"
  partial_shape shape;
  std::int64_t global_step = 0;
  std::uint64_t next_serial = 0;
  std::vector<entry> kept;
  std::deque<parked_take> takes;

  status check(const accumulator_apply& m) {
    if (m.gradient.type() != options.type) {
      return invalid_argument_error(label, " holds ", dtype_name(options.type), " gradients but was given ",
                                    dtype_name(m.gradient.type()));
    }
    if (!options.sparse) {
      if (!shape.is_compatible_with(m.gradient.shape())) {
        return invalid_argument_error(label, " holds gradients of shape ", shape.to_string(), " but was given one of shape ",
                                      m.gradient.shape().to_string());
      }
      shape = partial_shape(m.gradient.shape());
      return status();
    }
    const tensor& idx = m.indices;
    if (!idx.initialized() || idx.type() != dtype::int64 || idx.rank() != 1) {
      return invalid_argument_error(label, ": gradient_indices must be an int64 vector but is ",
                                    idx.initialized() ? idx.debug_string(4) : std::string("missing"));
    }
    if (m.gradient.rank() < 1 || m.gradient.dim(0) != idx.dim(0)) {
      return invalid_argument_error(label, ": gradient_values of shape ", m.gradient.shape().to_string(), " must have ",
                                    idx.dim(0), " rows, one per index");
    }
    std::vector<std::int64_t> dims = m.gradient.shape().dims();
    dims[0] = -1;
    if (m.dense_shape.initialized() && m.dense_shape.num_elements() > 0) {
      if (m.dense_shape.type() != dtype::int64 || m.dense_shape.rank() != 1 ||
          m.dense_shape.num_elements() != m.gradient.rank()) {
        return invalid_argument_error(label, ": gradient_shape ", m.dense_shape.debug_string(8),
                                      " must be an int64 vector of the values' rank ", m.gradient.rank());
      }
      dims[0] = m.dense_shape.flat<std::int64_t>()[0];
    }
    auto merged = shape.merge(partial_shape(dims));
    if (!merged.ok()) {
      return invalid_argument_error(label, " holds gradients of shape ", shape.to_string(),
                                    " but was given rows of shape ", m.gradient.shape().to_string());
    }
    shape = *merged;
    if (shape.known_rank() && shape.dim(0) >= 0 && !is_phantom(idx)) {
      for (std::int64_t id : idx.flat<std::int64_t>()) {
        if (id < 0 || id >= shape.dim(0)) {
          return invalid_argument_error(label, ": gradient index ", id, " is outside [0, ", shape.dim(0), ")");
        }
      }
    }
    return status();
  }
};

using accumulator_actor = caf::stateful_actor<accumulator_state>;

// Serves the parked takes that the kept gradients can answer, in arrival order.
void serve(accumulator_actor* self) {
  auto& st = self->state;
  while (!st.takes.empty() && static_cast<std::int64_t>(st.kept.size()) >= st.takes.front().num_required) {
    parked_take take = std::move(st.takes.front());
    st.takes.pop_front();
    std::vector<entry> kept = std::move(st.kept);
    st.kept.clear();
    // The first num_required by arrival make the aggregate; the rest came too late.
    for (std::size_t i = static_cast<std::size_t>(take.num_required); i < kept.size(); ++i) {
      if (auto* o = st.options.observer) o->gradient(st.options.name, kept[i].source, kept[i].local_step, st.global_step + 1, false);
    }
    kept.resize(static_cast<std::size_t>(take.num_required));
    std::sort(kept.begin(), kept.end(), [](const entry& a, const entry& b) {
      return std::tie(a.order, a.serial) < std::tie(b.order, b.serial);
    });
    if (auto* o = st.options.observer) {
      std::vector<std::string> sources;
      for (const entry& e : kept) sources.push_back(e.source);
      o->aggregated(st.options.name, st.global_step, sources);
    }
    ++st.global_step;
    const bool sparse = st.options.sparse;
    const accumulator_reduction reduction = st.options.reduction;
    tensor_shape shape;
    if (sparse) {
      std::vector<std::int64_t> dims = kept.front().values.shape().dims();
      if (st.shape.known_rank() && st.shape.dim(0) >= 0) dims[0] = st.shape.dim(0);
      else dims[0] = -1;
      shape = tensor_shape(std::move(dims));
    }
    auto work = [kept = std::move(kept), sparse, reduction, shape, done = std::move(take.done)]() mutable {
      std::vector<tensor> out;
      status s = kernels::catch_exceptions([&] {
        out = sparse ? sparse_sum(kept, reduction, shape) : std::vector<tensor>{dense_sum(kept, reduction)};
      });
      if (s.ok()) done(std::move(out));
      else done(std::move(s));
    };
    if (st.options.pool != nullptr) st.options.pool->schedule(std::move(work));
    else work();
  }
}

caf::behavior accumulator_behavior(accumulator_actor* self, accumulator_options options) {
  auto& st = self->state;
  st.label = str_cat("accumulator '", options.name, "'");
  st.shape = options.shape;
  st.options = std::move(options);
  if (st.options.owner) {
    self->monitor(st.options.owner);
    self->set_down_handler([self](caf::down_msg& msg) {
      self->quit(msg.reason ? msg.reason : caf::make_error(caf::exit_reason::user_shutdown));
    });
  }
  return {
      [self](accumulator_apply& m) {
        auto& st = self->state;
        status s = st.check(m);
        if (!s.ok()) return m.done(std::move(s));
        bool kept = m.local_step == st.global_step;
        if (kept && st.options.one_per_source && !m.source.empty()) {
          kept = std::none_of(st.kept.begin(), st.kept.end(), [&](const entry& e) { return e.source == m.source; });
        }
        if (auto* o = st.options.observer) o->gradient(st.options.name, m.source, m.local_step, st.global_step, kept);
        if (kept) {
          source_key order = key_of(m.source);
          st.kept.push_back(entry{std::move(m.source), std::move(order), st.next_serial++, m.local_step,
                                  std::move(m.gradient), std::move(m.indices)});
        }
        m.done(done_t{});
        serve(self);
      },
      [self](accumulator_take& m) {
        auto& st = self->state;
        if (m.num_required < 1) {
          return m.done(invalid_argument_error(st.label, ": num_required is ", m.num_required, " but must be >= 1"));
        }
        st.takes.push_back(parked_take{m.request_id, m.num_required, std::move(m.done)});
        serve(self);
      },
      [self](accumulator_set_step& m) {
        auto& st = self->state;
        st.global_step = m.step;
        st.kept.clear();
        for (auto& take : st.takes) {
          take.done(aborted_error(st.label, " was reset to global step ", m.step, " while a take waited"));
        }
        st.takes.clear();
        m.done(done_t{});
      },
      [self](accumulator_count& m) {
        m.done(std::vector<tensor>{tensor::scalar<std::int32_t>(static_cast<std::int32_t>(self->state.kept.size()))});
      },
      [self](accumulator_cancel& m) {
        auto& takes = self->state.takes;
        for (auto it = takes.begin(); it != takes.end(); ++it) {
          if (it->request_id != m.request_id) continue;
          it->done(cancelled_error("take from ", self->state.label, " was cancelled"));
          takes.erase(it);
          return;
        }
      },
  };
}

}  // namespace

status validate_accumulator_options(const accumulator_options& o) {
  const dtype t = o.type;
  if (t != dtype::float32 && t != dtype::float64 && t != dtype::int32 && t != dtype::int64) {
    return unimplemented_error("accumulator '", o.name, "': dtype ", dtype_name(t),
                               " is not supported (float32, float64, int32, int64 are)");
  }
  if (o.sparse && o.shape.known_rank() && o.shape.rank() < 1) {
    return invalid_argument_error("accumulator '", o.name, "': a sparse accumulator's shape ", o.shape.to_string(),
                                  " needs rank >= 1");
  }
  return status();
}

caf::actor spawn_accumulator(caf::actor_system& system, accumulator_options options) {
  return spawn_unpinned(system, accumulator_behavior, std::move(options));
}

status accumulator_resource::matches(const accumulator_options& other) const {
  const auto& o = options_;
  if (o.type != other.type || o.sparse != other.sparse || o.reduction != other.reduction ||
      o.one_per_source != other.one_per_source || !(o.shape == other.shape)) {
    return invalid_argument_error(label(), " already exists as a ", o.sparse ? "sparse " : "", dtype_name(o.type),
                                  " accumulator of shape ", o.shape.to_string(), " (",
                                  o.reduction == accumulator_reduction::mean ? "MEAN" : "SUM",
                                  "); another node describes it differently");
  }
  return status();
}

result<std::shared_ptr<accumulator_resource>> make_accumulator(caf::actor_system& system,
                                                               accumulator_options options) {
  TROUPE_RETURN_IF_ERROR(validate_accumulator_options(options));
  caf::actor a = spawn_accumulator(system, options);
  return std::make_shared<accumulator_resource>(std::move(a), std::move(options));
}

}  // namespace troupe::actors
