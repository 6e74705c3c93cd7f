#include "scenarios/scenario.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "core/address.h"
#include "core/file.h"
#include "core/random.h"
#include "graph/text_proto.h"

namespace troupe::scenarios {

namespace {

namespace pb = google::protobuf;
using parse_tree = pb::TextFormat::ParseInfoTree;
using graph::join;
using graph::suggestion;

const std::string k_default_dataset_dir = "/usr/share/datasets/fashion-mnist";

bool contains(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

// --- Pass 1: syntax: graph::parse_text_proto ------------------------------------------

// --- Pass 2 and 3: meaning and defaults -------------------------------------------------

struct location {
  int line = -1;  // 0-based, as protobuf records them; -1: unknown
  int column = -1;
};

// A message of the scenario under check: where it is in the file and how to name it.
struct node {
  const pb::Message* message = nullptr;
  const parse_tree* tree = nullptr;  // null when the file does not contain the message
  std::string path;                  // "training.optimizer", "" for the root
  location at;                       // of the field holding this message
};

class checker {
 public:
  checker(std::string filename, const parse_tree* root_tree)
      : filename_(std::move(filename)), root_tree_(root_tree) {}

  node root(const pb::Message& message) const { return node{&message, root_tree_, "", {}}; }

  // The message in `field` (element `index` of a repeated field) of `parent`.
  node child(const node& parent, std::string_view field, int index,
             const pb::Message& message) const {
    const pb::FieldDescriptor* fd = descriptor_of(parent, field);
    node n{&message, nullptr, field_path(parent, field, index), parent.at};
    if (parent.tree != nullptr) {
      n.tree = parent.tree->GetTreeForNested(fd, index);
      location here = location_of(parent, field, index);
      if (here.line >= 0) n.at = here;
    }
    return n;
  }
  node child(const node& parent, std::string_view field, const pb::Message& message) const {
    return child(parent, field, -1, message);
  }

  // Where `field` of n is written, or else where n is. Elements written as a list
  // ("[1, 2]") share one location: the field's.
  location location_of(const node& n, std::string_view field, int index = -1) const {
    if (n.tree != nullptr) {
      for (int i = index; i >= (index < 0 ? -1 : 0); --i) {
        auto loc = n.tree->GetLocation(descriptor_of(n, field), i);
        if (loc.line >= 0) return {loc.line, loc.column};
      }
    }
    return n.at;
  }
  bool written(const node& n, std::string_view field, int index = -1) const {
    return n.tree != nullptr && n.tree->GetLocation(descriptor_of(n, field), index).line >= 0;
  }

  // Records "file:line:col: path.field: message".
  template <class... Args>
  void error(const node& n, std::string_view field, int index, const Args&... args) {
    error_at(location_of(n, field, index), field_path(n, field, index), args...);
  }
  template <class... Args>
  void error(const node& n, std::string_view field, const Args&... args) {
    error(n, field, -1, args...);
  }
  template <class... Args>
  void error_at(location at, const std::string& path, const Args&... args) {
    errors_.push_back(str_cat(where(at), ": ", path, ": ", args...));
  }
  // "file:line:col: path.field" of a field, for a note.
  std::string where(const node& n, std::string_view field) const {
    return str_cat(where(location_of(n, field, -1)), ": ", field_path(n, field, -1));
  }
  std::string where(location at) const {
    return at.line >= 0 ? str_cat(filename_, ":", at.line + 1, ":", at.column + 1) : filename_;
  }

  std::string position(location at) const {
    return at.line >= 0 ? str_cat(at.line + 1, ":", at.column + 1) : std::string("?");
  }

  status to_status() const {
    if (errors_.empty()) return status();
    return invalid_argument_error(join(errors_, "\n"));
  }

 private:
  static const pb::FieldDescriptor* descriptor_of(const node& n, std::string_view field) {
    const pb::FieldDescriptor* fd = n.message->GetDescriptor()->FindFieldByName(std::string(field));
    assert(fd != nullptr && "checker: no such field");
    return fd;
  }
  static std::string field_path(const node& n, std::string_view field, int index) {
    std::string path = n.path.empty() ? std::string(field) : str_cat(n.path, ".", field);
    if (index >= 0) path += str_cat("[", index, "]");
    return path;
  }

  std::string filename_;
  const parse_tree* root_tree_;
  std::vector<std::string> errors_;
};

// [a-z][a-z0-9_]*
bool valid_job_name(const std::string& name) {
  if (name.empty() || name[0] < 'a' || name[0] > 'z') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// Records an error unless min <= value <= max: "must be >= min (is v)" or "must be <= max
// (is v)", with `note` before "is" when given.
template <class T>
void check_range(checker& c, const node& n, std::string_view field, int index, T value,
                 std::int64_t min, std::int64_t max, std::string_view note = "") {
  std::string is = note.empty() ? str_cat("is ", value) : str_cat(note, "; is ", value);
  if (value < min) {
    c.error(n, field, index, "must be >= ", min, " (", is, ")");
  } else if (value > max) {
    c.error(n, field, index, "must be <= ", max, " (", is, ")");
  }
}
template <class T>
void check_range(checker& c, const node& n, std::string_view field, T value, std::int64_t min,
                 std::int64_t max, std::string_view note = "") {
  check_range(c, n, field, -1, value, min, max, note);
}

void check_cluster(checker& c, const node& parent, scenario::Cluster* cluster) {
  node n = c.child(parent, "cluster", *cluster);
  if (cluster->worker_job().empty()) cluster->set_worker_job("worker");
  std::map<std::string, location> first_seen;
  for (int i = 0; i < cluster->job_size(); ++i) {
    scenario::Cluster::Job* job = cluster->mutable_job(i);
    node j = c.child(n, "job", i, *job);
    if (!valid_job_name(job->name())) {
      c.error(j, "name", "'", job->name(), "' is not a valid job name (lower-case letters, ",
              "digits and '_', starting with a letter)");
    } else if (auto [it, fresh] = first_seen.emplace(job->name(), c.location_of(j, "name")); !fresh) {
      c.error(j, "name", "job '", job->name(), "' is defined twice (first at ",
              c.position(it->second), ")");
    }
    if (!job->has_tasks()) job->set_tasks(1);
    check_range(c, j, "tasks", job->tasks(), 1, k_max_tasks);
  }
  if (cluster->job_size() == 0) {
    auto* job = cluster->add_job();
    job->set_name(cluster->worker_job());
    job->set_tasks(1);
  }
  std::vector<std::string> jobs;
  std::int64_t total_tasks = 0;  // of the jobs whose count is in range (reported above)
  for (const auto& job : cluster->job()) {
    jobs.push_back(job.name());
    if (job.tasks() >= 1 && job.tasks() <= k_max_tasks) total_tasks += job.tasks();
  }
  if (total_tasks > k_max_tasks) {
    c.error_at(c.location_of(n, "job", 0), str_cat(n.path, ".job"), "the cluster has ", total_tasks,
               " tasks in all; at most ", k_max_tasks);
  }

  if (!contains(jobs, cluster->worker_job())) {
    c.error(n, "worker_job", "the worker job '", cluster->worker_job(),
            "' is not in the cluster (jobs: ", join(jobs), ")",
            c.written(n, "worker_job") ? "" : "; name the job that trains with worker_job");
  }
  if (!cluster->has_ps_job()) {
    cluster->set_ps_job(contains(jobs, "ps") ? "ps" : "");
  } else if (!cluster->ps_job().empty()) {
    if (!contains(jobs, cluster->ps_job())) {
      c.error(n, "ps_job", "the ps job '", cluster->ps_job(), "' is not in the cluster (jobs: ",
              join(jobs), ")");
    } else if (cluster->ps_job() == cluster->worker_job()) {
      c.error(n, "ps_job", "the ps job must differ from the worker job ('",
              cluster->worker_job(), "')");
    }
  }
  for (int i = 0; i < cluster->job_size(); ++i) {
    const std::string& name = cluster->job(i).name();
    if (name == cluster->worker_job() || name == cluster->ps_job() || !valid_job_name(name)) continue;
    if (!contains(jobs, cluster->worker_job())) continue;  // already reported
    node j = c.child(n, "job", i, cluster->job(i));
    c.error(j, "name", "job '", name, "' is not used (the worker job is '", cluster->worker_job(),
            "', the ps job ",
            cluster->ps_job().empty() ? std::string("none") : "'" + cluster->ps_job() + "'",
            "); remove it or name it in worker_job or ps_job");
  }

  int with_addresses = 0;
  for (int i = 0; i < cluster->job_size(); ++i) {
    const auto& job = cluster->job(i);
    if (job.addresses_size() == 0) continue;
    ++with_addresses;
    node j = c.child(n, "job", i, job);
    if (cluster->mode() != scenario::Cluster::REAL) {
      c.error(j, "addresses", 0, "addresses are for mode: REAL (servers in processes of their own)");
    } else if (job.addresses_size() != job.tasks()) {
      c.error(j, "addresses", 0, "job '", job.name(), "' has ", job.tasks(), " task", job.tasks() == 1 ? "" : "s", " but ",
              job.addresses_size(), " address", job.addresses_size() == 1 ? "" : "es");
    }
    for (int a = 0; a < job.addresses_size(); ++a) {
      std::string host;
      int port = 0;
      if (status s = parse_host_port(job.addresses(a), &host, &port); !s.ok()) c.error(j, "addresses", a, s.message());
    }
  }
  const bool with_file = !cluster->cluster_file().empty();
  if (with_file && cluster->mode() != scenario::Cluster::REAL) {
    c.error(n, "cluster_file", "cluster_file is for mode: REAL (servers started by hand with that file)");
  } else if (with_file && with_addresses > 0) {
    c.error(n, "cluster_file", "give either the servers' cluster_file or addresses, not both (the file has the addresses)");
  }
  if (cluster->tls() && (cluster->mode() != scenario::Cluster::REAL || with_addresses > 0 || with_file)) {
    c.error(n, "tls", cluster->mode() != scenario::Cluster::REAL
                          ? "tls is for mode: REAL"
                          : "tls makes certificates for servers troupe run starts; for servers started by hand, "
                            "name the cluster file they were started with (cluster_file), whose tls section is used");
  }
  if (with_addresses > 0 && with_addresses < cluster->job_size() && cluster->mode() == scenario::Cluster::REAL) {
    c.error(n, "mode", "addresses are given for ", with_addresses, " of ", cluster->job_size(),
            " jobs: give them for every job (servers started by hand) or for none (troupe run starts them)");
  }
  if (!scenario::Cluster::Mode_IsValid(cluster->mode())) {
    c.error(n, "mode", "unknown mode ", cluster->mode(), " (valid: LOCAL, IN_PROCESS, SIMULATED, REAL)");
  } else if (cluster->mode() == scenario::Cluster::MODE_UNSPECIFIED) {
    cluster->set_mode(total_tasks == 1 ? scenario::Cluster::LOCAL : scenario::Cluster::IN_PROCESS);
  } else if (cluster->mode() == scenario::Cluster::LOCAL && total_tasks != 1) {
    c.error(n, "mode", "LOCAL runs one task but the cluster has ", total_tasks,
            "; use IN_PROCESS to run several tasks in this process");
  }
}

// mode SIMULATED: the simulation section (after check_training: its seed is the default).
void check_simulation(checker& c, const node& parent, scenario::Scenario* s, std::vector<std::string>* notes) {
  scenario::Cluster* cluster = s->mutable_cluster();
  if (cluster->mode() == scenario::Cluster::SIMULATED && !s->has_simulation()) {
    // Written before IN_PROCESS existed: it meant every task in this process, in real time.
    cluster->set_mode(scenario::Cluster::IN_PROCESS);
    if (notes != nullptr) {
      notes->push_back(str_cat(c.where(c.child(parent, "cluster", *cluster), "mode"),
                               ": mode SIMULATED without a simulation section runs as IN_PROCESS (every task in this "
                               "process, in real time), as it did before; write IN_PROCESS, or add a simulation "
                               "section for virtual time (doc/simulation.md)"));
    }
    return;
  }
  if (!s->has_simulation()) return;
  node n = c.child(parent, "simulation", s->simulation());
  if (cluster->mode() != scenario::Cluster::SIMULATED) {
    c.error(n, "seed", "a simulation section is for cluster.mode: SIMULATED (virtual time)");
    return;
  }
  scenario::Simulation* sim = s->mutable_simulation();
  if (!sim->has_seed()) sim->set_seed(s->training().seed());
  node net = c.child(n, "network", sim->network());
  scenario::Simulation::Network* nw = sim->mutable_network();
  if (!nw->has_latency_us()) nw->set_latency_us(50);
  if (!nw->has_bandwidth_gbps()) nw->set_bandwidth_gbps(10);
  // A field of `at` in [0, `top`] (`top_text` as the error writes it).
  auto within = [&](const node& at, std::string_view field, double value, double top, std::string_view top_text) {
    if (!(value >= 0 && value <= top)) c.error(at, field, "must be in [0, ", top_text, "] (is ", value, ")");
  };
  within(net, "latency_us", nw->latency_us(), 1e7, "10^7");
  if (!(nw->bandwidth_gbps() > 0 && nw->bandwidth_gbps() <= 1e4)) {
    c.error(net, "bandwidth_gbps", "must be in (0, 10^4] (is ", nw->bandwidth_gbps(), ")");
  }
  within(net, "jitter_us", nw->jitter_us(), 1e7, "10^7");
  within(net, "copy_gbps", nw->copy_gbps(), 1e4, "10^4");
  within(net, "nic_gbps", nw->nic_gbps(), 1e4, "10^4");
  within(net, "transfer_us", nw->transfer_us(), 1e6, "10^6");
  within(net, "step_cpu_us", nw->step_cpu_us(), 1e6, "10^6");
  within(net, "message_cpu_us", nw->message_cpu_us(), 1e6, "10^6");
  within(net, "process_cpu_us", nw->process_cpu_us(), 1e5, "10^5");
  within(net, "busy_wait_us", nw->busy_wait_us(), 1e6, "10^6");
  within(net, "send_busy_wait_us", nw->send_busy_wait_us(), 1e6, "10^6");
  node cn = c.child(n, "compute", sim->compute());
  scenario::Simulation::Compute* cp = sim->mutable_compute();
  if (!cp->has_gflops()) cp->set_gflops(20);
  if (!cp->has_memory_gbps()) cp->set_memory_gbps(10);
  if (!cp->has_kernel_overhead_us()) cp->set_kernel_overhead_us(1);
  if (!cp->has_cores_per_device()) cp->set_cores_per_device(1);
  if (!(cp->gflops() > 0 && cp->gflops() <= 1e7)) c.error(cn, "gflops", "must be in (0, 10^7] (is ", cp->gflops(), ")");
  if (!(cp->memory_gbps() > 0 && cp->memory_gbps() <= 1e7)) {
    c.error(cn, "memory_gbps", "must be in (0, 10^7] (is ", cp->memory_gbps(), ")");
  }
  within(cn, "kernel_overhead_us", cp->kernel_overhead_us(), 1e6, "10^6");
  check_range(c, cn, "cores_per_device", cp->cores_per_device(), 1, 1024);
  check_range(c, cn, "machine_cores", cp->machine_cores(), 0, 1024);
  if (!cp->has_intra_op_threads()) cp->set_intra_op_threads(1);
  check_range(c, cn, "intra_op_threads", cp->intra_op_threads(), 1, 1024);
  within(cn, "noise", cp->noise(), 100, "100");
  within(cn, "noise_ms", cp->noise_ms(), 1e7, "10^7");
  within(cn, "task_cpu_us", cp->task_cpu_us(), 1e5, "10^5");
  node sw = c.child(n, "swizzle", sim->swizzle());
  scenario::Simulation::Swizzle* z = sim->mutable_swizzle();
  if (!z->has_links()) z->set_links(1);
  within(sw, "every_ms", z->every_ms(), 1e7, "10^7");
  if (z->every_ms() > 0 && !(z->clog_ms() > 0 && z->clog_ms() <= 1e7)) {
    c.error(sw, "clog_ms", "must be in (0, 10^7] when every_ms is set (is ", z->clog_ms(), ")");
  }
  check_range(c, sw, "links", z->links(), 1, 1024);
  if (sim->has_liveness()) {
    node lv = c.child(n, "liveness", sim->liveness());
    scenario::Simulation::Liveness* l = sim->mutable_liveness();
    if (l->within_ms() == 0) l->set_within_ms(10000);
    const std::int64_t total = s->training().steps();
    if (l->steps() < 1 || l->steps() >= total) {
      c.error(lv, "steps", "must be in [1, training.steps) = [1, ", total, ") (is ", l->steps(), ")");
    } else {
      const std::int64_t from = total - l->steps();
      for (int i = 0; i < s->faults().fault_size(); ++i) {
        if (s->faults().fault(i).at_step() >= from) {
          c.error(lv, "steps", "the liveness phase (from global step ", from, ") has no faults, but faults.fault[", i,
                  "] is at step ", s->faults().fault(i).at_step());
        }
      }
    }
    if (!(l->within_ms() > 0 && l->within_ms() <= 1e9)) c.error(lv, "within_ms", "must be in (0, 10^9] (is ", l->within_ms(), ")");
  }
  if (!sim->has_execute_kernels()) sim->set_execute_kernels(true);
  if (!sim->execute_kernels()) {
    // Shape-only: tensors are phantoms (core/phantom.h), so there is nothing to save,
    // evaluate or expect.
    const char* why = "a shape-only simulation (execute_kernels: false) computes no values";
    if (s->has_checkpoint()) c.error(n, "execute_kernels", "false cannot go with a checkpoint section: ", why, " to save");
    if (s->training().eval_every() > 0) c.error(n, "execute_kernels", "false cannot go with training.eval_every: ", why, " to evaluate");
    if (s->report().expect().has_min_test_accuracy() || s->report().expect().has_max_final_loss()) {
      c.error(n, "execute_kernels", "false cannot go with report.expect: ", why, " to check");
    }
  }
}

void check_model(checker& c, const node& parent, scenario::Model* model) {
  node n = c.child(parent, "model", *model);
  if (model->name().empty()) model->set_name("mlp");
  if (!contains(model_names(), model->name())) {
    c.error(n, "name", "unknown model '", model->name(), "'", suggestion(model->name(), model_names()),
            " (valid: ", join(model_names()), ")");
    return;
  }
  if (model->name() != "mlp") {
    if (model->hidden_units_size() > 0) {
      c.error(n, "hidden_units", 0, "only the mlp model has hidden_units, not '", model->name(), "'");
    }
    return;
  }
  if (model->hidden_units_size() == 0) {
    model->add_hidden_units(512);
    model->add_hidden_units(512);
  }
  if (model->hidden_units_size() > k_max_hidden_layers) {
    c.error(n, "hidden_units", k_max_hidden_layers, "at most ", k_max_hidden_layers,
            " hidden layers (has ", model->hidden_units_size(), ")");
    return;
  }
  for (int i = 0; i < model->hidden_units_size(); ++i) {
    check_range(c, n, "hidden_units", i, model->hidden_units(i), 1, k_max_hidden_units);
  }
}

// The parameters each optimizer has, with their defaults; the other fields of Optimizer
// must be left out.
struct optimizer_parameter {
  const char* field;
  double default_value;
};
// Fields of every optimizer (learning-rate decay), checked on their own.
bool is_decay_field(const std::string& field) {
  return field == "decay_steps" || field == "decay_rate" || field == "staircase";
}
const std::map<std::string, std::vector<optimizer_parameter>>& optimizer_parameters() {
  static const auto* table = new std::map<std::string, std::vector<optimizer_parameter>>{
      {"sgd", {{"learning_rate", 0.01}}},
      {"momentum", {{"learning_rate", 0.01}, {"momentum", 0.9}, {"nesterov", 0}}},
      {"adagrad", {{"learning_rate", 0.01}, {"initial_accumulator_value", 0.1}}},
      {"adam", {{"learning_rate", 0.001}, {"beta1", 0.9}, {"beta2", 0.999}, {"epsilon", 1e-8}}},
      {"rmsprop",
       {{"learning_rate", 0.001}, {"decay", 0.9}, {"momentum", 0.0}, {"epsilon", 1e-10}}},
  };
  return *table;
}

void check_optimizer(checker& c, const node& parent, scenario::Optimizer* optimizer) {
  node n = c.child(parent, "optimizer", *optimizer);
  if (optimizer->name().empty()) optimizer->set_name("sgd");
  if (!contains(optimizer_names(), optimizer->name())) {
    c.error(n, "name", "unknown optimizer '", optimizer->name(), "'",
            suggestion(optimizer->name(), optimizer_names()), " (valid: ", join(optimizer_names()),
            ")");
    return;
  }
  const auto& parameters = optimizer_parameters().at(optimizer->name());
  std::vector<std::string> names;
  for (const auto& p : parameters) names.push_back(p.field);
  const pb::Reflection* reflection = optimizer->GetReflection();
  const pb::Descriptor* type = optimizer->GetDescriptor();
  for (int i = 0; i < type->field_count(); ++i) {
    const pb::FieldDescriptor* field = type->field(i);
    if (field->name() == "name" || is_decay_field(field->name())) continue;
    auto p = std::find_if(parameters.begin(), parameters.end(),
                          [&](const optimizer_parameter& q) { return q.field == field->name(); });
    bool has = reflection->HasField(*optimizer, field);
    if (p == parameters.end()) {
      if (has) {
        c.error(n, field->name(), "'", optimizer->name(), "' has no parameter ", field->name(),
                " (its parameters: ", join(names), ")");
      }
      continue;
    }
    if (!has) {
      if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_BOOL) {
        reflection->SetBool(optimizer, field, p->default_value != 0);
      } else {
        reflection->SetFloat(optimizer, field, static_cast<float>(p->default_value));
      }
    }
  }
  auto positive = [&](const char* field, float value) {
    if (!(value > 0) || !std::isfinite(value)) c.error(n, field, "must be > 0 (is ", value, ")");
  };
  auto fraction = [&](const char* field, float value) {
    if (!(value >= 0 && value < 1)) c.error(n, field, "must be in [0, 1) (is ", value, ")");
  };
  positive("learning_rate", optimizer->learning_rate());
  if (optimizer->has_momentum()) fraction("momentum", optimizer->momentum());
  if (optimizer->has_beta1()) fraction("beta1", optimizer->beta1());
  if (optimizer->has_beta2()) fraction("beta2", optimizer->beta2());
  if (optimizer->has_decay()) fraction("decay", optimizer->decay());
  if (optimizer->has_epsilon()) positive("epsilon", optimizer->epsilon());
  if (optimizer->has_initial_accumulator_value()) {
    positive("initial_accumulator_value", optimizer->initial_accumulator_value());
  }
  if (optimizer->has_decay_steps()) {
    check_range(c, n, "decay_steps", optimizer->decay_steps(), 1, k_max_steps);
    if (!optimizer->has_decay_rate()) {
      c.error(n, "decay_steps", "needs decay_rate: the learning rate is multiplied by it every decay_steps steps");
    } else {
      positive("decay_rate", optimizer->decay_rate());
    }
  } else {
    for (const char* field : {"decay_rate", "staircase"}) {
      if (c.written(n, field)) c.error(n, field, "needs decay_steps (learning-rate decay)");
    }
  }
}

void check_training(checker& c, const node& parent, scenario::Training* training,
                    int worker_tasks) {
  node n = c.child(parent, "training", *training);
  check_optimizer(c, n, training->mutable_optimizer());
  if (!c.written(n, "steps")) {
    c.error(n, "steps", "required: how many updates to apply (for example: steps: 1000)");
  } else {
    check_range(c, n, "steps", training->steps(), 1, k_max_steps);
  }
  if (!training->has_batch_size()) training->set_batch_size(64);
  check_range(c, n, "batch_size", training->batch_size(), 1, k_max_batch_size);
  if (!training->has_seed()) training->set_seed(random_seed());
  if (!scenario::Training::Replication_IsValid(training->replication())) {
    c.error(n, "replication", "unknown replication ", training->replication(),
            " (valid: ASYNC, SYNC)");
  } else if (training->replication() == scenario::Training::REPLICATION_UNSPECIFIED) {
    training->set_replication(scenario::Training::ASYNC);
  }
  if (training->replication() != scenario::Training::SYNC) {
    if (training->has_backup_workers()) {
      c.error(n, "backup_workers", "only SYNC replication has backup workers");
    }
  } else {
    if (!training->has_backup_workers()) training->set_backup_workers(0);
    int b = training->backup_workers();
    if (b < 0 || (worker_tasks > 0 && b >= worker_tasks)) {
      c.error(n, "backup_workers", "must be in [0, ", worker_tasks, ") for ", worker_tasks,
              " worker task", worker_tasks == 1 ? "" : "s", " (is ", b, ")");
    }
  }
  check_range(c, n, "eval_every", training->eval_every(), 0, k_max_steps, "0: only at the end");
}

// batch_size: training.batch_size, already checked; clamped to its range when invalid.
void check_dataset(checker& c, const node& parent, scenario::Dataset* dataset,
                   std::int64_t batch_size) {
  node n = c.child(parent, "dataset", *dataset);
  if (dataset->name().empty()) dataset->set_name("fashion-mnist");
  if (!contains(dataset_names(), dataset->name())) {
    c.error(n, "name", "unknown dataset '", dataset->name(), "'",
            suggestion(dataset->name(), dataset_names()), " (valid: ", join(dataset_names()), ")");
  }
  if (dataset->dir().empty()) dataset->set_dir(k_default_dataset_dir);
  if (!dataset->has_shuffle()) dataset->set_shuffle(true);
  if (!dataset->has_reader_threads()) dataset->set_reader_threads(1);
  if (!dataset->has_deterministic()) dataset->set_deterministic(false);
  check_range(c, n, "reader_threads", dataset->reader_threads(), 1, k_max_reader_threads);
  if (dataset->deterministic() && dataset->reader_threads() > 1) {
    c.error(n, "reader_threads", "is ", dataset->reader_threads(),
            " but deterministic: true needs 1 (several readers fill the queue in an order set by timing)");
  }
  // A shuffling queue only with shuffle and without deterministic.
  const bool shuffling_queue = dataset->shuffle() && !dataset->deterministic();
  if (!dataset->has_min_after_dequeue()) {
    dataset->set_min_after_dequeue(shuffling_queue ? static_cast<std::int32_t>(4 * batch_size) : 0);
  } else if (dataset->min_after_dequeue() < 0 || dataset->min_after_dequeue() >= k_max_queue_capacity) {
    check_range(c, n, "min_after_dequeue", dataset->min_after_dequeue(), 0, k_max_queue_capacity - 1);
  } else if (!shuffling_queue && dataset->min_after_dequeue() > 0) {
    c.error(n, "min_after_dequeue", "is ", dataset->min_after_dequeue(),
            dataset->shuffle() ? " but the queue is first-in first-out (deterministic: true): it must be 0"
                               : " but the dataset is not shuffled (shuffle: false): it must be 0");
  }
  if (!dataset->has_queue_capacity()) {
    std::int64_t wanted = std::int64_t{dataset->min_after_dequeue()} + 3 * batch_size;
    dataset->set_queue_capacity(static_cast<std::int32_t>(std::min<std::int64_t>(wanted, k_max_queue_capacity)));
  } else if (dataset->queue_capacity() > k_max_queue_capacity) {
    c.error(n, "queue_capacity", "must be <= ", k_max_queue_capacity, " (is ",
            dataset->queue_capacity(), ")");
  } else if (dataset->queue_capacity() < batch_size ||
             dataset->queue_capacity() <= dataset->min_after_dequeue()) {
    c.error(n, "queue_capacity", "must be >= training.batch_size (", batch_size,
            ") and > min_after_dequeue (", dataset->min_after_dequeue(), "); is ",
            dataset->queue_capacity());
  }
}

void check_report(checker& c, const node& parent, scenario::Report* report) {
  node n = c.child(parent, "report", *report);
  if (!scenario::Report::Progress_IsValid(report->progress())) {
    c.error(n, "progress", "unknown progress ", report->progress(),
            " (valid: AUTO, BAR, PLAIN, OFF)");
  } else if (report->progress() == scenario::Report::PROGRESS_UNSPECIFIED) {
    report->set_progress(scenario::Report::AUTO);
  }
  if (!report->has_progress_every()) report->set_progress_every(100);
  check_range(c, n, "progress_every", report->progress_every(), 1, k_max_steps);
  node e = c.child(n, "expect", report->expect());
  if (report->expect().has_min_test_accuracy()) {
    float a = report->expect().min_test_accuracy();
    if (!(a >= 0 && a <= 1)) c.error(e, "min_test_accuracy", "must be in [0, 1] (is ", a, ")");
  }
  if (report->expect().has_max_final_loss()) {
    float l = report->expect().max_final_loss();
    if (!(l > 0)) c.error(e, "max_final_loss", "must be > 0 (is ", l, ")");
  }
}

void check_checkpoint(checker& c, const node& parent, scenario::Scenario* s) {
  if (!s->has_checkpoint()) return;
  scenario::Checkpoint* checkpoint = s->mutable_checkpoint();
  node n = c.child(parent, "checkpoint", *checkpoint);
  if (checkpoint->dir().empty()) {
    c.error(n, "dir", "required: the folder of the checkpoints (for example: dir: \"/tmp/run/ckpt\")");
  }
  check_range(c, n, "every_steps", checkpoint->every_steps(), 0, k_max_steps, "0: only at the end");
  if (!checkpoint->has_keep()) checkpoint->set_keep(5);
  check_range(c, n, "keep", checkpoint->keep(), 1, k_max_checkpoints_kept);
  if (!scenario::Checkpoint::Restore_IsValid(checkpoint->restore())) {
    c.error(n, "restore", "unknown restore ", checkpoint->restore(), " (valid: LATEST, NONE)");
  } else if (checkpoint->restore() == scenario::Checkpoint::RESTORE_UNSPECIFIED) {
    checkpoint->set_restore(scenario::Checkpoint::LATEST);
  }
}

void check_supervision(checker& c, const node& parent, scenario::Scenario* s) {
  scenario::Supervision* sup = s->mutable_supervision();
  node n = c.child(parent, "supervision", *sup);
  if (!sup->has_max_restarts()) sup->set_max_restarts(5);
  check_range(c, n, "max_restarts", sup->max_restarts(), 0, k_max_restarts);
  if (!sup->has_within_seconds()) sup->set_within_seconds(60);
  const double w = sup->within_seconds();
  if (!(w > 0 && w <= k_max_window_seconds)) {
    c.error(n, "within_seconds", "must be in (0, ", k_max_window_seconds, "] (is ", w, ")");
  }
  if (!scenario::Supervision::Recovery_IsValid(sup->recovery())) {
    c.error(n, "recovery", "unknown recovery ", sup->recovery(), " (valid: ROLLBACK_ALL, RESTORE_LOST)");
  } else if (sup->recovery() == scenario::Supervision::RECOVERY_UNSPECIFIED) {
    sup->set_recovery(s->training().replication() == scenario::Training::SYNC ? scenario::Supervision::ROLLBACK_ALL
                                                                              : scenario::Supervision::RESTORE_LOST);
  }
}

// "/job:NAME/task:N" or "/job:NAME/replica:0/task:N" -> (NAME, N); false otherwise.
bool parse_task(const std::string& text, std::string* job, int* task) {
  constexpr std::string_view k_job = "/job:", k_replica = "/replica:0", k_task = "/task:";
  if (text.rfind(k_job, 0) != 0) return false;
  std::size_t end = text.find('/', k_job.size());
  if (end == std::string::npos) return false;
  *job = text.substr(k_job.size(), end - k_job.size());
  std::string_view rest(text.data() + end, text.size() - end);
  if (rest.substr(0, k_replica.size()) == k_replica) rest.remove_prefix(k_replica.size());
  if (rest.substr(0, k_task.size()) != k_task) return false;
  rest.remove_prefix(k_task.size());
  if (rest.empty() || rest.size() > 6) return false;
  int n = 0;
  for (char ch : rest) {
    if (ch < '0' || ch > '9') return false;
    n = n * 10 + (ch - '0');
  }
  *task = n;
  return true;
}

void check_faults(checker& c, const node& parent, scenario::Scenario* s) {
  if (!s->has_faults()) return;
  scenario::Faults* faults = s->mutable_faults();
  node n = c.child(parent, "faults", *faults);
  if (faults->has_random()) {
    node r = c.child(n, "random", faults->random());
    const double k = faults->random().kills_per_1000_steps();
    if (!(k >= 0 && k <= 1000)) c.error(r, "kills_per_1000_steps", "must be in [0, 1000] (is ", k, ")");
    if (k > 0 && servers_by_hand(s->cluster())) {
      c.error(r, "kills_per_1000_steps",
              "random kills need servers that troupe run starts (no addresses or cluster_file)");
    }
    if (k > 0 && !s->has_checkpoint()) {
      c.error(r, "kills_per_1000_steps", "random kills may hit tasks holding variables: they need a checkpoint ",
              "section to restore them from");
    }
    if (faults->random().buggify() && s->cluster().mode() != scenario::Cluster::SIMULATED) {
      c.error(r, "buggify", "BUGGIFY sites are live only in cluster.mode: SIMULATED (virtual time, doc/simulation.md)");
    }
  }
  const auto& cl = s->cluster();
  const std::string holder = cl.ps_job().empty() ? cl.worker_job() : cl.ps_job();
  for (int i = 0; i < faults->fault_size(); ++i) {
    scenario::Fault* f = faults->mutable_fault(i);
    node fn = c.child(n, "fault", i, *f);
    if (!c.written(fn, "at_step")) {
      c.error(fn, "at_step", "required: the global step at which the fault happens");
    } else if (f->at_step() < 1 || f->at_step() >= s->training().steps()) {
      c.error(fn, "at_step", "must be in [1, training.steps) = [1, ", s->training().steps(), ") (is ", f->at_step(),
              ")");
    }
    // A task name of the cluster; false (with the error recorded) otherwise.
    auto check_task_field = [&](const node& k, const char* field, const std::string& name, std::string* job,
                                int* task) {
      if (!parse_task(name, job, task)) {
        c.error(k, field, "'", name, "' is not a task name (for example \"/job:ps/task:0\")");
        return false;
      }
      const int tasks = num_tasks(cl, *job);
      if (tasks == 0) {
        c.error(k, field, "the cluster has no job '", *job, "'");
        return false;
      }
      if (*task >= tasks) {
        c.error(k, field, "job '", *job, "' has ", tasks, " task", tasks == 1 ? "" : "s", " (0 to ", tasks - 1,
                "); there is no task ", *task);
        return false;
      }
      return true;
    };
    auto check_task = [&](const node& k, const std::string& name, std::string* job, int* task) {
      return check_task_field(k, "task", name, job, task);
    };
    auto needs_checkpoint = [&](const char* kind) {
      if (!s->has_checkpoint()) c.error(fn, kind, "needs a checkpoint section (the checkpoints it acts on)");
    };
    const auto kind = f->kind_case();
    const bool ranged = kind == scenario::Fault::kStraggle || kind == scenario::Fault::kDiskFull ||
                        kind == scenario::Fault::kDropMessages || kind == scenario::Fault::kDelayMessages;
    if (f->has_until_step()) {
      if (!ranged) {
        c.error(fn, "until_step", "only straggle, disk_full, drop_messages and delay_messages last until a step");
      } else if (f->until_step() <= f->at_step()) {
        c.error(fn, "until_step", "must be > at_step (", f->at_step(), "; is ", f->until_step(), ")");
      }
    }
    // A real cluster's processes can be killed and frozen by the troupe run that started
    // them, not by one that found them at addresses.
    if (servers_by_hand(cl)) {
      const char* owned = kind == scenario::Fault::kKill                   ? "kill"
                          : kind == scenario::Fault::kStall                ? "stall"
                          : kind == scenario::Fault::kKillDuringCheckpoint ? "kill_during_checkpoint"
                                                                           : nullptr;
      if (owned != nullptr) {
        c.error(fn, owned, owned, " needs servers that troupe run starts (no addresses or cluster_file): it cannot ",
                "signal servers started by hand");
      }
    }
    std::string job;
    int task = 0;
    switch (f->kind_case()) {
      case scenario::Fault::kKill: {
        node k = c.child(fn, "kill", f->kill());
        if (check_task(k, f->kill().task(), &job, &task) && job == holder && (job != cl.worker_job() || task == 0) &&
            !s->has_checkpoint()) {
          c.error(k, "task", "'", f->kill().task(), "' holds variables: restoring them after the kill needs a ",
                  "checkpoint section (for example: checkpoint { dir: \"/tmp/run/ckpt\" every_steps: 100 })");
        }
        break;
      }
      case scenario::Fault::kStraggle: {
        node k = c.child(fn, "straggle", f->straggle());
        check_task(k, f->straggle().task(), &job, &task);
        check_range(c, k, "delay_ms", f->straggle().delay_ms(), 1, 60000);
        break;
      }
      case scenario::Fault::kStall: {
        node k = c.child(fn, "stall", f->stall());
        check_task(k, f->stall().task(), &job, &task);
        check_range(c, k, "duration_ms", f->stall().duration_ms(), 1, 600000);
        break;
      }
      case scenario::Fault::kCorruptCheckpoint:
        needs_checkpoint("corrupt_checkpoint");
        break;
      case scenario::Fault::kDiskFull:
        needs_checkpoint("disk_full");
        break;
      case scenario::Fault::kKillDuringCheckpoint:
        needs_checkpoint("kill_during_checkpoint");
        break;
      case scenario::Fault::kDropMessages:
      case scenario::Fault::kDelayMessages: {
        const bool drop = kind == scenario::Fault::kDropMessages;
        node k = drop ? c.child(fn, "drop_messages", f->drop_messages()) : c.child(fn, "delay_messages", f->delay_messages());
        const std::string& from = drop ? f->drop_messages().from() : f->delay_messages().from();
        const std::string& to = drop ? f->drop_messages().to() : f->delay_messages().to();
        std::string to_job;
        int to_task = 0;
        const bool from_ok = check_task_field(k, "from", from, &job, &task);
        const bool to_ok = check_task_field(k, "to", to, &to_job, &to_task);
        if (from_ok && to_ok && job == to_job && task == to_task) {
          c.error(k, "to", "'", to, "' is the sending task too: faults act on links between two tasks");
        }
        if (drop) {
          const double p = f->drop_messages().probability();
          if (!(p > 0 && p <= 1)) c.error(k, "probability", "must be in (0, 1] (is ", p, ")");
        } else {
          check_range(c, k, "delay_ms", f->delay_messages().delay_ms(), 1, 60000);
        }
        break;
      }
      case scenario::Fault::KIND_NOT_SET:
        c.error(fn, "at_step", "the fault has no kind (valid: kill, straggle, stall, corrupt_checkpoint, disk_full, ",
                "kill_during_checkpoint, drop_messages, delay_messages)");
        break;
    }
  }
}

std::string stem_of(const std::string& filename) {
  std::string stem = std::filesystem::path(filename).stem().string();
  return stem.empty() ? std::string("scenario") : stem;
}

}  // namespace

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names = {"mlp", "lenet"};
  return names;
}

const std::vector<std::string>& dataset_names() {
  static const std::vector<std::string> names = {"fashion-mnist"};
  return names;
}

const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = {"sgd", "momentum", "adagrad", "adam", "rmsprop"};
  return names;
}

result<scenario::Scenario> parse_scenario(const std::string& text, const std::string& filename,
                                          std::vector<std::string>* notes) {
  scenario::Scenario s;
  parse_tree tree;
  TROUPE_RETURN_IF_ERROR(graph::parse_text_proto(text, filename, "scenario", &s, &tree));
  checker c(filename, &tree);
  node root = c.root(s);
  if (s.name().empty()) s.set_name(stem_of(filename));
  check_cluster(c, root, s.mutable_cluster());
  int worker_tasks = num_tasks(s.cluster(), s.cluster().worker_job());
  check_model(c, root, s.mutable_model());
  check_training(c, root, s.mutable_training(), worker_tasks);
  check_simulation(c, root, &s, notes);
  check_dataset(c, root, s.mutable_dataset(), std::clamp(s.training().batch_size(), 1, k_max_batch_size));
  check_report(c, root, s.mutable_report());
  check_checkpoint(c, root, &s);
  check_supervision(c, root, &s);
  check_faults(c, root, &s);
  TROUPE_RETURN_IF_ERROR(c.to_status());
  return s;
}

result<scenario::Scenario> load_scenario(const std::string& path, std::vector<std::string>* notes) {
  auto text = read_file(path);
  if (!text.ok()) return text.error();
  return parse_scenario(*text, path, notes);
}

std::string scenario_to_text(const scenario::Scenario& s) {
  std::string out;
  pb::TextFormat::PrintToString(s, &out);
  return out;
}

dataset_files files_of(const scenario::Dataset& dataset) {
  std::string dir = dataset.dir().empty() ? k_default_dataset_dir : dataset.dir();
  return {dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz",
          dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz"};
}

status check_dataset_files(const scenario::Dataset& dataset) {
  dataset_files files = files_of(dataset);
  for (const std::string* path :
       {&files.train_images, &files.train_labels, &files.test_images, &files.test_labels}) {
    std::error_code ignored;
    if (!std::filesystem::is_regular_file(*path, ignored)) {
      bool default_dir = dataset.dir().empty() || dataset.dir() == k_default_dataset_dir;
      return not_found_error("dataset '", dataset.name(), "': no file '", *path, "'",
                             default_dir ? " (install the Debian package dataset-fashion-mnist)"
                                         : " (check dataset.dir)");
    }
  }
  return status();
}

bool servers_by_hand(const scenario::Cluster& cluster) {
  return cluster.mode() == scenario::Cluster::REAL &&
         (!cluster.cluster_file().empty() || (cluster.job_size() > 0 && cluster.job(0).addresses_size() > 0));
}

int num_tasks(const scenario::Cluster& cluster, std::string_view job) {
  for (const auto& j : cluster.job()) {
    if (j.name() == job) return j.tasks();
  }
  return 0;
}

int num_tasks(const scenario::Cluster& cluster) {
  int n = 0;
  for (const auto& j : cluster.job()) n += j.tasks();
  return n;
}

}  // namespace troupe::scenarios
