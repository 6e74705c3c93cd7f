#include "actors/executor.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <thread>
#include <utility>

#include "core/cpu_time.h"
#include "core/env.h"
#include "core/phantom.h"

namespace troupe::actors {

struct executable::plan {
  struct edge {
    int output;      // which output of the producer
    int consumer;    // plan node index (-1: a fetch only)
    int slot;        // absolute index into the step's input array
  };
  // A node's edges, control successors, fetched outputs and used outputs are ranges of
  // the plan's shared arrays (one allocation each for the whole plan, not per node).
  struct range {
    int begin = 0, end = 0;
  };
  struct node {
    std::unique_ptr<kernels::op_kernel> kernel;
    const graph::node* graph_node = nullptr;
    int input_offset = 0;
    int num_inputs = 0;
    int output_offset = 0;
    int num_outputs = 0;
    int initial_pending = 0;
    range out_edges;      // in edges, sorted by output so each output's last edge moves
    range control_out;    // in control_out
    range fetch_outputs;  // in fetch_outputs
    range used_outputs;   // in used_outputs: outputs some edge or fetch reads, ascending
    bool async = false;
    bool estimate_on_inputs = false;  // else fixed_ns is the kernel's estimate
    double fixed_ns = 0;
    // On a device with an accelerator: where the kernel reads each input (empty when
    // every input is `any`), so that host tensors are copied in and device tensors never
    // reach a kernel that reads the host's memory.
    std::vector<kernels::op_kernel::memory> input_memory;
  };
  std::vector<node> nodes;
  std::vector<edge> edges;
  std::vector<int> control_out;
  std::vector<std::pair<int, int>> fetch_outputs;  // (output, fetch index)
  std::vector<int> used_outputs;

  template <class T>
  static std::span<const T> of(const std::vector<T>& all, range r) {
    return std::span<const T>(all.data() + r.begin, static_cast<std::size_t>(r.end - r.begin));
  }
  std::vector<int> roots;
  int total_inputs = 0;
  int total_outputs = 0;
  std::vector<std::vector<int>> feed_slots;  // feed index -> input slots it fills
  std::vector<int> fetch_from_feed;          // fetch index -> feed index, or -1
};

struct executable::step {
  const executable* exec;
  compute_pool* pool;
  memory_account* memory = nullptr;  // the device's, current around each kernel
  kernels::step_info info;
  std::vector<tensor> inputs;
  std::vector<tensor> outputs;
  std::unique_ptr<std::atomic<int>[]> pending;
  std::vector<tensor> fetches;
  std::atomic<int> outstanding{0};
  std::atomic<bool> aborted{false};
  std::mutex error_mutex;
  status error;
  done_callback done;
  kernels::cancellation_manager cancellation;     // this step's waiting kernels
  kernels::cancellation_manager* abort = nullptr;  // the caller's, when given
  kernels::cancellation_manager::token abort_token = 0;

  // Records the first error and cancels whatever is still waiting.
  void fail(status s) {
    {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (error.ok()) error = std::move(s);
      aborted.store(true, std::memory_order_release);
    }
    cancellation.start_cancel();
  }
};

executable::~executable() = default;

int executable::num_nodes() const { return static_cast<int>(plan_->nodes.size()); }

result<std::shared_ptr<const executable>> executable::create(
    const executable_spec& spec, const kernels::kernel_registry& registry) {
  auto exec = std::shared_ptr<executable>(new executable());
  exec->spec_ = spec;
  exec->plan_ = std::make_unique<plan>();
  plan& p = *exec->plan_;
  const graph::graph& g = *spec.graph;

  std::map<graph::endpoint, int> fed;
  for (std::size_t i = 0; i < spec.feeds.size(); ++i) {
    if (!fed.emplace(spec.feeds[i], static_cast<int>(i)).second) {
      const auto& n = g.get(spec.feeds[i].node);
      return invalid_argument_error("tensor '", n.name(), ":", spec.feeds[i].index, "' is fed twice");
    }
  }
  // Plan nodes in topological order; everything below is linear in nodes and edges.
  std::vector<int> index_of(static_cast<std::size_t>(g.num_nodes()), -1);
  for (int id : spec.nodes) {
    if (id < 0 || id >= g.num_nodes()) return internal_error("the step names node id ", id, ", not in the graph");
    index_of[static_cast<std::size_t>(id)] = 0;
  }
  p.nodes.reserve(spec.nodes.size());
  for (int id : g.topological_order()) {
    if (index_of[static_cast<std::size_t>(id)] < 0) continue;
    index_of[static_cast<std::size_t>(id)] = static_cast<int>(p.nodes.size());
    p.nodes.emplace_back();
    p.nodes.back().graph_node = &g.get(id);
  }
  p.feed_slots.resize(spec.feeds.size());
  for (auto& pn : p.nodes) {
    const graph::node& n = *pn.graph_node;
    if (n.op_name() == "Placeholder") {
      return invalid_argument_error("placeholder '", n.name(), "' must be fed: a fetch or target of "
                                    "this step depends on it");
    }
    auto kernel = registry.create(spec.device_type, n.def, *n.op, n.input_types.to_vector(), n.output_types.to_vector(),
                                  spec.device);
    if (!kernel.ok()) return kernel.error();
    pn.kernel = std::move(*kernel);
    pn.async = pn.kernel->is_async();
    if (spec.device != nullptr && spec.device->accelerator() != nullptr) {
      for (int i = 0; i < static_cast<int>(n.inputs.size()); ++i) pn.input_memory.push_back(pn.kernel->input_memory(i));
      if (std::all_of(pn.input_memory.begin(), pn.input_memory.end(),
                      [](auto m) { return m == kernels::op_kernel::memory::any; })) {
        pn.input_memory.clear();
      }
    }
    pn.estimate_on_inputs = pn.kernel->estimate_depends_on_inputs();
    if (!pn.estimate_on_inputs) pn.fixed_ns = pn.kernel->estimated_ns({});
    pn.input_offset = p.total_inputs;
    pn.num_inputs = static_cast<int>(n.inputs.size());
    p.total_inputs += pn.num_inputs;
    pn.num_outputs = n.num_outputs();
    // Only asynchronous nodes keep their outputs in the step (they finish later); a
    // synchronous node's outputs live on the stack of the call that runs it.
    if (pn.async) {
      pn.output_offset = p.total_outputs;
      p.total_outputs += pn.num_outputs;
    }
  }
  // Edges, grouped by producer in three passes (count, place, sort each producer's few
  // by output): linear in nodes and edges, one allocation per kind.
  std::vector<int> edge_count(p.nodes.size() + 1, 0), control_count(p.nodes.size() + 1, 0);
  for (std::size_t c = 0; c < p.nodes.size(); ++c) {
    const graph::node& n = *p.nodes[c].graph_node;
    for (const graph::endpoint& src : n.inputs) {
      if (fed.count(src) > 0) continue;
      const int producer = index_of[static_cast<std::size_t>(src.node)];
      if (producer < 0) {
        return internal_error("node '", n.name(), "' needs '", g.get(src.node).name(),
                              "', which is neither fed nor in the step");
      }
      ++edge_count[static_cast<std::size_t>(producer) + 1];
    }
    for (int ctl : n.control_inputs) {
      const int producer = index_of[static_cast<std::size_t>(ctl)];
      if (producer >= 0) ++control_count[static_cast<std::size_t>(producer) + 1];
    }
  }
  for (std::size_t i = 0; i < p.nodes.size(); ++i) {
    edge_count[i + 1] += edge_count[i];
    control_count[i + 1] += control_count[i];
    p.nodes[i].out_edges = {edge_count[i], edge_count[i]};
    p.nodes[i].control_out = {control_count[i], control_count[i]};
  }
  p.edges.resize(static_cast<std::size_t>(edge_count.back()));
  p.control_out.resize(static_cast<std::size_t>(control_count.back()));
  for (std::size_t c = 0; c < p.nodes.size(); ++c) {
    auto& consumer = p.nodes[c];
    const graph::node& n = *consumer.graph_node;
    for (int i = 0; i < consumer.num_inputs; ++i) {
      const graph::endpoint& src = n.inputs[static_cast<std::size_t>(i)];
      int slot = consumer.input_offset + i;
      if (auto f = fed.find(src); f != fed.end()) {
        p.feed_slots[static_cast<std::size_t>(f->second)].push_back(slot);
        continue;
      }
      auto& producer = p.nodes[static_cast<std::size_t>(index_of[static_cast<std::size_t>(src.node)])];
      p.edges[static_cast<std::size_t>(producer.out_edges.end++)] = {src.index, static_cast<int>(c), slot};
      ++consumer.initial_pending;
    }
    for (int ctl : n.control_inputs) {
      int producer = index_of[static_cast<std::size_t>(ctl)];
      if (producer < 0) continue;  // a control input on a pruned (fed-only) node
      p.control_out[static_cast<std::size_t>(p.nodes[static_cast<std::size_t>(producer)].control_out.end++)] =
          static_cast<int>(c);
      ++consumer.initial_pending;
    }
  }
  p.fetch_from_feed.assign(spec.fetches.size(), -1);
  std::map<int, std::vector<std::pair<int, int>>> fetches_of;
  for (std::size_t f = 0; f < spec.fetches.size(); ++f) {
    const auto& e = spec.fetches[f];
    if (auto it = fed.find(e); it != fed.end()) {
      p.fetch_from_feed[f] = it->second;
      continue;
    }
    int producer = index_of[static_cast<std::size_t>(e.node)];
    if (producer < 0) {
      return internal_error("fetch '", g.get(e.node).name(), "' is not produced by the step");
    }
    fetches_of[producer].push_back({e.index, static_cast<int>(f)});
  }
  std::vector<int> used;
  for (std::size_t i = 0; i < p.nodes.size(); ++i) {
    auto& pn = p.nodes[i];
    std::stable_sort(p.edges.begin() + pn.out_edges.begin, p.edges.begin() + pn.out_edges.end,
                     [](const plan::edge& a, const plan::edge& b) { return a.output < b.output; });
    pn.fetch_outputs.begin = static_cast<int>(p.fetch_outputs.size());
    if (auto it = fetches_of.find(static_cast<int>(i)); it != fetches_of.end()) {
      p.fetch_outputs.insert(p.fetch_outputs.end(), it->second.begin(), it->second.end());
    }
    pn.fetch_outputs.end = static_cast<int>(p.fetch_outputs.size());
    used.clear();
    for (const auto& e : plan::of(p.edges, pn.out_edges)) used.push_back(e.output);
    for (auto [output, fetch] : plan::of(p.fetch_outputs, pn.fetch_outputs)) used.push_back(output);
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    pn.used_outputs.begin = static_cast<int>(p.used_outputs.size());
    p.used_outputs.insert(p.used_outputs.end(), used.begin(), used.end());
    pn.used_outputs.end = static_cast<int>(p.used_outputs.size());
    if (pn.initial_pending == 0) p.roots.push_back(static_cast<int>(i));
  }
  return std::shared_ptr<const executable>(std::move(exec));
}

status executable::check_feeds(const std::vector<tensor>& feeds) const {
  if (feeds.size() != spec_.feeds.size()) {
    return invalid_argument_error("the step expects ", spec_.feeds.size(), " feeds but got ", feeds.size());
  }
  for (std::size_t i = 0; i < feeds.size(); ++i) {
    const auto& e = spec_.feeds[i];
    const graph::node& n = spec_.graph->get(e.node);
    dtype want = n.output_types[static_cast<std::size_t>(e.index)];
    const partial_shape& shape = n.output_shapes[static_cast<std::size_t>(e.index)];
    std::string name = e.index == 0 ? n.name() : str_cat(n.name(), ":", e.index);
    if (!feeds[i].initialized()) return invalid_argument_error("feed '", name, "' is an empty tensor");
    if (feeds[i].type() != want) {
      return invalid_argument_error("feed '", name, "' is ", dtype_name(feeds[i].type()),
                                    " but the graph expects ", dtype_name(want));
    }
    if (!shape.is_compatible_with(feeds[i].shape())) {
      return invalid_argument_error("feed '", name, "' has shape ", feeds[i].shape().to_string(),
                                    " but the graph expects ", shape.to_string());
    }
  }
  return status();
}

// How much estimated work one call of process() runs inline off the compute pool (on an
// actor's thread) before it hands the rest to the pool: each node counts its estimate
// (at most op_kernel::k_inline_ns, or it would not be inline) plus the executor's own
// cost per node, so an actor's thread spends about a millisecond per message at most,
// however long a chain of cheap nodes is. Estimates, not clocks: the same graph makes the
// same choices on every run.
constexpr double k_inline_budget_off_pool_ns = 1e6;
constexpr double k_executor_ns_per_node = 200;

// Shape-only simulation (executable_spec::shape_only). Ops that only pass tensors on or
// read their shapes run as they are, on phantoms too.
bool passes_phantoms(std::string_view op) {
  static const std::set<std::string, std::less<>> ops = {"Identity", "IdentityN", "StopGradient", "PreventGradient",
                                                         "Snapshot", "Shape", "ShapeN", "Size", "Rank", "NoOp", "_Send"};
  return ops.count(op) > 0;
}

// Whether node `n` runs its kernel under a shape-only simulation: when it only passes
// tensors on, or when its inputs are all real and its outputs small (shapes, steps,
// labels: what the runtime and its callers read) or handles.
bool computes_when_shape_only(const graph::node& n, std::span<const tensor> inputs) {
  if (passes_phantoms(n.op_name())) return true;
  if (any_phantom(inputs)) return false;
  for (std::size_t i = 0; i < n.output_shapes.size() && i < n.output_types.size(); ++i) {
    const partial_shape& shape = n.output_shapes[i];
    if (phantom_stands_for(n.output_types[i]) && shape.fully_defined() &&
        static_cast<std::size_t>(shape.num_elements()) * dtype_size(n.output_types[i]) > k_readable_phantom_bytes) {
      return false;
    }
  }
  return true;
}

// The phantoms standing for node `n`'s outputs on these inputs: shapes the graph knows,
// else its shape function's on the inputs' shapes (and the values of its real inputs).
status shape_only_outputs(const graph::node& n, std::span<const tensor> inputs, std::span<tensor> outputs) {
  std::vector<partial_shape> shapes(n.output_shapes.begin(), n.output_shapes.end());
  shapes.resize(outputs.size());
  const bool known = std::all_of(shapes.begin(), shapes.end(), [](const partial_shape& p) { return p.fully_defined(); });
  if (!known && n.op != nullptr && n.op->shape) {
    std::vector<partial_shape> in;
    std::vector<const tensor*> values;
    for (const tensor& t : inputs) {
      in.emplace_back(t.shape());
      values.push_back(is_phantom(t) || !t.on_host() ? nullptr : &t);
    }
    graph::shape_context ctx(n.def, *n.op, std::move(in), std::move(values), n.input_types.to_vector(),
                             static_cast<int>(outputs.size()));
    TROUPE_RETURN_IF_ERROR(n.op->shape(ctx));
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      auto merged = shapes[i].merge(ctx.outputs()[i]);
      if (merged.ok()) shapes[i] = *merged;
    }
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const dtype type = n.output_types[i];
    if (!shapes[i].fully_defined() || !phantom_stands_for(type)) {
      return unimplemented_error("shape-only simulation: node '", n.name(), "' (", n.op_name(), ") output ", i,
                                 !phantom_stands_for(type) ? str_cat(" is a ", dtype_name(type), ", which no phantom stands for")
                                                    : str_cat(" has shape ", shapes[i].to_string(),
                                                              ", which its inputs' shapes do not determine"),
                                 "; run this graph with simulation.execute_kernels: true");
    }
    outputs[i] = phantom_tensor(type, shapes[i].to_shape());
  }
  return status();
}

// True on a thread inside run_and_wait(): it blocks for the step anyway and is no actor's
// thread, so like a compute thread it runs its inline work without a budget.
thread_local bool t_caller_waits = false;

struct executor_access {
  using plan = executable::plan;
  using step = executable::step;

  static void finish_step(const std::shared_ptr<step>& s) {
    const plan& p = *s->exec->plan_;
    if (s->abort != nullptr) s->abort->deregister(s->abort_token);
    if (!s->aborted.load(std::memory_order_acquire)) {
      for (std::size_t f = 0; f < p.fetch_from_feed.size(); ++f) {
        if (!s->fetches[f].initialized()) {
          s->fail(internal_error("fetch ", f, " was not produced"));
          break;
        }
      }
    }
    auto done = std::move(s->done);
    if (s->aborted.load(std::memory_order_acquire)) {
      done(s->error);
      return;
    }
    kernels::accelerator* acc = s->exec->spec_.device != nullptr ? s->exec->spec_.device->accelerator() : nullptr;
    std::vector<std::size_t> on_device;
    for (std::size_t f = 0; f < s->fetches.size(); ++f) {
      if (!s->fetches[f].on_host()) on_device.push_back(f);
    }
    if (acc == nullptr) {
      done(std::move(s->fetches));
      return;
    }
    if (on_device.empty()) {
      // The step is done when the work it queued on the device has run (and its errors,
      // which the device reports late, are the step's).
      acc->when_done([done = std::move(done), fetches = std::move(s->fetches)](status st) mutable {
        if (st.ok()) done(std::move(fetches));
        else done(st);
      });
      return;
    }
    // Fetches leave the device in host memory: copied out after the step's device work
    // (and each copy reports the device's errors).
    struct copies {
      std::vector<tensor> fetches;
      executable::done_callback done;
      std::atomic<int> left;
      std::mutex mutex;
      status error;
    };
    auto c = std::make_shared<copies>();
    c->fetches = std::move(s->fetches);
    c->done = std::move(done);
    c->left.store(static_cast<int>(on_device.size()));
    for (std::size_t f : on_device) {
      acc->to_host(c->fetches[f], [c, f](result<tensor> r) {
        if (r.ok()) {
          c->fetches[f] = std::move(*r);
        } else {
          std::lock_guard<std::mutex> lock(c->mutex);
          if (c->error.ok()) c->error = r.error().with_context(str_cat("copying fetch ", f, " to the host"));
        }
        if (c->left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
        if (c->error.ok()) c->done(std::move(c->fetches));
        else c->done(c->error);
      });
    }
  }

  // Copies host inputs of node `n` to its device where the kernel reads device memory;
  // an error for a device tensor at an input the kernel reads on the host.
  static status place_inputs(const std::shared_ptr<step>& s, const plan::node& n) {
    kernels::accelerator* acc = s->exec->spec_.device->accelerator();
    for (int i = 0; i < n.num_inputs; ++i) {
      tensor& t = s->inputs[static_cast<std::size_t>(n.input_offset + i)];
      const auto want = n.input_memory[static_cast<std::size_t>(i)];
      if (!t.initialized() || want == kernels::op_kernel::memory::any) continue;
      if (want == kernels::op_kernel::memory::device && t.on_host()) {
        result<tensor> copy = internal_error("not copied");
        status thrown = kernels::catch_exceptions([&] { copy = acc->to_device(t); });  // allocation_error
        status copied = thrown.ok() ? copy.to_status() : thrown;
        if (!copied.ok()) return copied.with_context(str_cat("copying input ", i, " to ", s->exec->spec_.device->name()));
        t = std::move(*copy);
      } else if (want == kernels::op_kernel::memory::host && !t.on_host()) {
        return internal_error("input ", i, " is in the memory of ", s->exec->spec_.device->name(),
                              " but the kernel reads it on the host (its producer should run on a CPU)");
      }
    }
    return status();
  }

  // The estimated time of node `index`, whose inputs are all present.
  static double estimate(const std::shared_ptr<step>& s, const plan::node& n) {
    if (!n.estimate_on_inputs) return n.fixed_ns;
    return n.kernel->estimated_ns(
        std::span<const tensor>(s->inputs.data() + n.input_offset, static_cast<std::size_t>(n.num_inputs)));
  }
  // Whether node `index`, whose inputs are all present, is cheaper than a hand-off.
  static bool is_cheap(const std::shared_ptr<step>& s, int index) {
    return estimate(s, s->exec->plan_->nodes[static_cast<std::size_t>(index)]) <= kernels::op_kernel::k_inline_ns;
  }

  // Called when node `index` has finished computing (ctx status in `st`) into `outputs`.
  static void complete(const std::shared_ptr<step>& s, int index, const status& st, tensor* outputs,
                       std::vector<int>& inline_ready) {
    const plan& p = *s->exec->plan_;
    const plan::node& n = p.nodes[static_cast<std::size_t>(index)];
    for (int i = 0; i < n.num_inputs; ++i) s->inputs[static_cast<std::size_t>(n.input_offset + i)] = tensor();
    if (!st.ok()) {
      const std::string& name = n.graph_node->name();
      s->fail(st.message().find("'" + name + "'") == std::string::npos
                  ? st.with_context(str_cat("node '", name, "' (", n.graph_node->op_name(), ")"))
                  : st);
    }
    if (!s->aborted.load(std::memory_order_acquire)) {
      for (int o : plan::of(p.used_outputs, n.used_outputs)) {
        if (!outputs[o].initialized()) {
          s->fail(internal_error("node '", n.graph_node->name(), "' (", n.graph_node->op_name(),
                                 ") did not produce output ", o));
          break;
        }
      }
    }
    if (!s->aborted.load(std::memory_order_acquire)) {
      for (auto [output, fetch] : plan::of(p.fetch_outputs, n.fetch_outputs)) {
        s->fetches[static_cast<std::size_t>(fetch)] = outputs[output];
      }
    }
    // Nodes this one makes ready; they take over its count in `outstanding`, so a chain
    // costs no atomic operation on it. A consumer with one producer needs no atomic
    // decrement either: this is its only producer.
    int released = 0;
    std::vector<int> expensive;
    if (!s->aborted.load(std::memory_order_acquire)) {
      auto release = [&](int consumer) {
        if (p.nodes[static_cast<std::size_t>(consumer)].initial_pending == 1 ||
            s->pending[consumer].fetch_sub(1, std::memory_order_acq_rel) == 1) {
          ++released;
          if (is_cheap(s, consumer)) inline_ready.push_back(consumer);
          else expensive.push_back(consumer);
        }
      };
      const auto edges = plan::of(p.edges, n.out_edges);
      const std::size_t num_edges = edges.size();
      for (std::size_t e = 0; e < num_edges; ++e) {
        const plan::edge& edge = edges[e];
        bool last_use = e + 1 == num_edges || edges[e + 1].output != edge.output;
        if (last_use) {
          s->inputs[static_cast<std::size_t>(edge.slot)] = std::move(outputs[edge.output]);
        } else {
          s->inputs[static_cast<std::size_t>(edge.slot)] = outputs[edge.output];
        }
        release(edge.consumer);
      }
      for (int c : plan::of(p.control_out, n.control_out)) release(c);
    }
    for (int o = 0; o < n.num_outputs; ++o) outputs[o] = tensor();
    if (released == 0) {
      if (s->outstanding.fetch_sub(1, std::memory_order_acq_rel) == 1) finish_step(s);
      return;
    }
    // Counted before any of them can run on another thread and finish.
    if (released > 1) s->outstanding.fetch_add(released - 1, std::memory_order_relaxed);
    // Keep one expensive node for this thread when it has nothing else to do, unless
    // this is not a compute thread (an asynchronous kernel finishing on an actor's
    // thread): compute never runs there.
    if (!expensive.empty() && inline_ready.empty() && s->pool->in_pool()) {
      inline_ready.push_back(expensive.back());
      expensive.pop_back();
    }
    for (int e : expensive) {
      s->pool->schedule([s, e] { process(s, {e}); });
    }
  }

  static void trace(const std::shared_ptr<step>& s, int index, step_tracer::clock::time_point start,
                    double cpu_ns = -1) {
    const executable_spec& spec = s->exec->spec_;
    const plan::node& pn = s->exec->plan_->nodes[static_cast<std::size_t>(index)];
    const graph::node& n = *pn.graph_node;
    const auto end = env::now();
    step_tracer::node_detail detail{
        std::span<const tensor>(s->inputs.data() + pn.input_offset, static_cast<std::size_t>(pn.num_inputs)), pn.async,
        &n.def, cpu_ns};
    spec.tracer->node_span(spec.trace_task, spec.trace_device, n.name(), n.op_name(), s->info.step_id, start, end,
                           detail);
  }

  // An asynchronous node's context and whether it has completed: a kernel that throws
  // after arranging for done() to be called must not complete the node twice.
  struct async_call {
    async_call(std::span<const tensor> inputs, std::span<tensor> outputs, std::span<const dtype> types,
               const kernels::step_info& info)
        : ctx(inputs, outputs, types, info) {}
    kernels::kernel_context ctx;
    std::atomic<bool> completed{false};
    // While compute_async runs on `caller`: the nodes a completion on that same thread
    // made ready, for the caller's loop to run (under its budget) rather than a nested
    // process() per completion (a chain of kernels that complete at once, such as reads
    // of free variables, would nest without bound). `inside` is only read and written on
    // `caller`.
    std::thread::id caller;
    bool inside = false;
    std::vector<int> ready_inside;
  };

  // Runs ready nodes until no inline work is left; off the compute pool, only up to
  // k_inline_budget_off_pool_ns of estimated work, then the rest goes to the pool.
  static void process(const std::shared_ptr<step>& s, std::vector<int> ready) {
    const plan& p = *s->exec->plan_;
    const bool off_pool = !t_caller_waits && !s->pool->in_pool();
    double budget_ns = k_inline_budget_off_pool_ns;
    std::vector<tensor> scratch;  // a synchronous node's outputs, until complete() hands them on
    account_scope memory(s->memory);
    while (!ready.empty()) {
      const int index = ready.back();
      const plan::node& n = p.nodes[static_cast<std::size_t>(index)];
      if (off_pool) {
        budget_ns -= k_executor_ns_per_node + estimate(s, n);
        if (budget_ns < 0) {
          s->pool->schedule([s, rest = std::move(ready)]() mutable { process(s, std::move(rest)); });
          return;
        }
      }
      ready.pop_back();
      if (!n.async && scratch.size() < static_cast<std::size_t>(n.num_outputs)) scratch.resize(static_cast<std::size_t>(n.num_outputs));
      tensor* output_data = n.async ? s->outputs.data() + n.output_offset : scratch.data();
      if (s->aborted.load(std::memory_order_acquire)) {
        complete(s, index, status(), output_data, ready);
        continue;
      }
      if (!n.input_memory.empty()) {
        status placed = place_inputs(s, n);
        if (!placed.ok()) {
          complete(s, index, placed, output_data, ready);
          continue;
        }
      }
      std::span<const tensor> inputs(s->inputs.data() + n.input_offset, static_cast<std::size_t>(n.num_inputs));
      std::span<tensor> outputs(output_data, static_cast<std::size_t>(n.num_outputs));
      step_tracer* tracer = s->exec->spec_.tracer;
      const auto start = tracer != nullptr ? env::now() : step_tracer::clock::time_point();
      // (A simulated kernel's span is in virtual time: no CPU time is read for it.)
      // Its CPU time on every thread that worked for it (the pool's helpers too).
      std::optional<cpu_meter> cpu;
      if (tracer != nullptr && !n.async && s->exec->spec_.timer == nullptr) cpu.emplace();
      if (n.async) {
        auto call = std::make_shared<async_call>(inputs, outputs, n.graph_node->output_types, s->info);
        if (tracer != nullptr) call->ctx.want_cpu_ns();
        // Completes the node once: with the kernel's context, or (`thrown`) with the error of
        // an exception from compute_async, whose kernel may still answer on another thread.
        auto finish = [s, index, call, tracer, start](const status* thrown) {
          if (call->completed.exchange(true)) return;
          if (tracer != nullptr) trace(s, index, start, call->ctx.cpu_ns());
          const bool nested = std::this_thread::get_id() == call->caller && call->inside;
          std::vector<int> more;
          complete(s, index, thrown != nullptr ? *thrown : call->ctx.get_status(),
                   s->outputs.data() + s->exec->plan_->nodes[static_cast<std::size_t>(index)].output_offset,
                   nested ? call->ready_inside : more);
          if (!more.empty()) process(s, std::move(more));
        };
        call->caller = std::this_thread::get_id();
        call->inside = true;
        status thrown = kernels::catch_exceptions([&] {
          static_cast<kernels::async_op_kernel&>(*n.kernel).compute_async(call->ctx, [finish] { finish(nullptr); });
        });
        call->inside = false;
        ready.insert(ready.end(), call->ready_inside.begin(), call->ready_inside.end());
        call->ready_inside.clear();
        if (!thrown.ok()) finish(&thrown);
        continue;
      }
      kernels::kernel_context ctx(inputs, outputs, n.graph_node->output_types, s->info);
      status thrown = s->exec->spec_.shape_only && !computes_when_shape_only(*n.graph_node, inputs)
                          ? shape_only_outputs(*n.graph_node, inputs, outputs)
                          : kernels::catch_exceptions([&] { n.kernel->compute(ctx); });
      if (!thrown.ok()) ctx.fail(std::move(thrown));
      if (kernel_timer* timer = s->exec->spec_.timer) {
        // Completes when the node's virtual time is up, as an asynchronous node would.
        auto kept = std::make_shared<std::vector<tensor>>(std::make_move_iterator(outputs.begin()),
                                                         std::make_move_iterator(outputs.end()));
        timer->ran(*n.graph_node, inputs, *kept,
                   [s, index, kept, st = ctx.get_status(), tracer](env::clock::time_point begun, env::clock::time_point) {
                     if (tracer != nullptr) trace(s, index, begun);
                     std::vector<int> more;
                     complete(s, index, st, kept->data(), more);
                     if (!more.empty()) process(s, std::move(more));
                   });
        continue;
      }
      if (tracer != nullptr) trace(s, index, start, cpu ? cpu->elapsed_ns() : -1);
      complete(s, index, ctx.get_status(), output_data, ready);
    }
  }
};

void executable::run(std::int64_t step_id, std::vector<tensor> feeds, compute_pool& pool,
                     done_callback done, kernels::cancellation_manager* abort) const {
  const plan& p = *plan_;
  auto s = std::make_shared<step>();
  s->exec = this;
  s->pool = &pool;
  s->memory = spec_.device != nullptr ? spec_.device->memory() : nullptr;
  s->info.memory = s->memory;
  s->info.step_id = step_id;
  s->info.client = &s->exec->spec_.client;
  s->info.pool = &pool;
  s->info.cancellation = &s->cancellation;
  s->inputs.resize(static_cast<std::size_t>(p.total_inputs));
  s->outputs.resize(static_cast<std::size_t>(p.total_outputs));
  s->pending.reset(new std::atomic<int>[p.nodes.size()]);
  for (std::size_t i = 0; i < p.nodes.size(); ++i) s->pending[i].store(p.nodes[i].initial_pending, std::memory_order_relaxed);
  s->fetches.resize(p.fetch_from_feed.size());
  s->done = std::move(done);
  for (std::size_t f = 0; f < p.fetch_from_feed.size(); ++f) {
    if (p.fetch_from_feed[f] >= 0) s->fetches[f] = feeds[static_cast<std::size_t>(p.fetch_from_feed[f])];
  }
  for (std::size_t f = 0; f < p.feed_slots.size(); ++f) {
    for (int slot : p.feed_slots[f]) s->inputs[static_cast<std::size_t>(slot)] = feeds[f];
  }
  feeds.clear();  // the slots hold the only references now, so kernels may reuse them
  if (abort != nullptr) {
    s->abort = abort;
    s->abort_token = abort->new_token();
    step* raw = s.get();  // finish_step deregisters before the step can go away
    if (!abort->register_callback(s->abort_token, [raw, step_id] {
          raw->fail(aborted_error("step ", step_id, " was aborted"));
        })) {
      s->fail(aborted_error("step ", step_id, " was aborted before it started"));
    }
  }
  if (p.roots.empty()) {
    executor_access::finish_step(s);
    return;
  }
  s->outstanding.store(static_cast<int>(p.roots.size()), std::memory_order_relaxed);
  // Roots: expensive ones go to the pool, cheap ones run here, in the caller's thread.
  std::vector<int> cheap;
  for (int r : p.roots) {
    if (executor_access::is_cheap(s, r)) {
      cheap.push_back(r);
    } else {
      pool.schedule([s, r] { executor_access::process(s, {r}); });
    }
  }
  if (!cheap.empty()) {
    std::reverse(cheap.begin(), cheap.end());  // process() takes from the back: keep the roots' order
    executor_access::process(s, std::move(cheap));
  }
}

result<std::vector<tensor>> executable::run_and_wait(std::int64_t step_id, std::vector<tensor> feeds,
                                                     compute_pool& pool) const {
  TROUPE_RETURN_IF_ERROR(check_feeds(feeds));
  std::promise<result<std::vector<tensor>>> promise;
  auto future = promise.get_future();
  {
    struct waiting_caller {
      bool before = std::exchange(t_caller_waits, true);
      ~waiting_caller() { t_caller_waits = before; }
    } scope;
    run(step_id, std::move(feeds), pool, [&promise](result<std::vector<tensor>> r) { promise.set_value(std::move(r)); });
  }
  return future.get();
}

}  // namespace troupe::actors
