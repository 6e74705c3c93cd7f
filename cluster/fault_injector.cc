#include "cluster/fault_injector.h"

#include <algorithm>
#include <fstream>

#include "checkpoint/checkpoint.h"
#include "core/env.h"
#include "core/random.h"

namespace troupe::cluster {

// A file whose writer dies half-way through its first append (kill_during_checkpoint).
class crashing_file final : public writable_file {
 public:
  crashing_file(faulty_file_system* fs, std::unique_ptr<writable_file> file, std::string path)
      : fs_(fs), file_(std::move(file)), path_(std::move(path)) {}
  ~crashing_file() override { fs_->dead_ = false; }  // the writer is restarted
  status append(std::string_view bytes) override {
    if (!fs_->dead_) {
      (void)file_->append(bytes.substr(0, bytes.size() / 2));
      (void)file_->sync();
      fs_->dead_ = true;
    }
    return dead();
  }
  status write_at(std::int64_t offset, std::string_view bytes) override {
    if (!fs_->dead_) {
      (void)file_->write_at(offset, bytes.substr(0, bytes.size() / 2));
      (void)file_->sync();
      fs_->dead_ = true;
    }
    return dead();
  }
  status sync() override { return dead(); }
  status close() override {
    (void)file_->close();
    return dead();
  }

 private:
  status dead() const {
    return unavailable_error("the checkpoint writer was killed while writing '", path_, "' (kill_during_checkpoint)");
  }
  faulty_file_system* fs_;
  std::unique_ptr<writable_file> file_;
  std::string path_;
};

result<std::unique_ptr<writable_file>> faulty_file_system::create(const std::string& path) {
  if (full) return resource_exhausted_error("cannot create '", path, "': No space left on device (disk_full fault)");
  auto file = real().create(path);
  if (!file.ok() || !crash_next.exchange(false)) return file;
  return std::unique_ptr<writable_file>(new crashing_file(this, std::move(*file), path));
}

status faulty_file_system::rename(const std::string& from, const std::string& to) {
  if (dead_) return unavailable_error("the checkpoint writer is dead (kill_during_checkpoint)");
  return real().rename(from, to);
}

status faulty_file_system::remove(const std::string& path) {
  if (dead_) return unavailable_error("the checkpoint writer is dead (kill_during_checkpoint)");
  return real().remove(path);
}

namespace {

// Flips `n` bytes in the middle of `path`, in place.
result<std::string> damage_file(const std::string& path, std::int64_t n) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  if (!f) return not_found_error("cannot open '", path, "' to damage it");
  f.seekg(0, std::ios::end);
  const std::int64_t size = f.tellg();
  if (size <= 0) return failed_precondition_error("'", path, "' is empty");
  n = std::min(n, size);
  const std::int64_t offset = (size - n) / 2;
  std::string bytes(static_cast<std::size_t>(n), '\0');
  f.seekg(offset);
  f.read(bytes.data(), n);
  for (char& c : bytes) c = static_cast<char>(~c);
  f.seekp(offset);
  f.write(bytes.data(), n);
  f.flush();
  if (!f) return data_loss_error("cannot write '", path, "'");
  return str_cat("flipped ", n, " bytes of ", base_name(path), " at offset ", offset);
}

}  // namespace

fault_injector::fault_injector(std::shared_ptr<actors::cluster> cluster, std::vector<fault_spec> faults,
                               fault_injector_options options)
    : cluster_(std::move(cluster)), options_(std::move(options)), faults_(std::move(faults)) {
  std::stable_sort(faults_.begin(), faults_.end(),
                   [](const fault_spec& a, const fault_spec& b) { return a.at_step < b.at_step; });
  done_.assign(faults_.size(), false);
}

void fault_injector::log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

status fault_injector::inject(injected_fault& f) {
  const auto& k = f.spec.kind;
  if (k == "kill") return cluster_->kill_task(f.spec.task);
  if (k == "straggle") return cluster_->set_straggle(f.spec.task, std::chrono::milliseconds(f.spec.delay_ms));
  if (k == "stall") return cluster_->stall_task(f.spec.task, std::chrono::milliseconds(f.spec.duration_ms));
  if (k == "kill_during_checkpoint") {
    if (options_.fs == nullptr) return failed_precondition_error("kill_during_checkpoint: no checkpoint writer to kill");
    options_.fs->crash_next = true;
    return status();
  }
  if (k == "drop_messages" || k == "delay_messages") {
    actors::runtime_device::link_fault fault;
    fault.delay = std::chrono::milliseconds(f.spec.delay_ms);
    fault.drop = f.spec.probability;
    fault.seed = f.spec.seed;
    return cluster_->set_link_fault(f.spec.task, f.spec.to, fault);
  }
  if (k == "disk_full") {
    if (options_.fs == nullptr) return failed_precondition_error("disk_full: no checkpoint file system to fill");
    options_.fs->full = true;
    return status();
  }
  if (k == "corrupt_checkpoint") {
    auto dir = checkpoint::directory::open(options_.checkpoint_dir);
    if (!dir.ok()) return dir.error();
    auto list = dir->list();
    if (!list.ok()) return list.error();
    if (list->empty()) return failed_precondition_error("corrupt_checkpoint: no committed checkpoint to damage yet");
    auto done = damage_file(list->front().path, 64);
    if (!done.ok()) return done.error();
    f.detail = *done;
    return status();
  }
  return unimplemented_error("fault kind '", k, "'");
}

void fault_injector::lift(injected_fault& f) {
  if (f.lifted_at.has_value()) return;
  if (f.spec.kind == "straggle") (void)cluster_->set_straggle(f.spec.task, std::chrono::microseconds(0));
  else if (f.spec.kind == "disk_full" && options_.fs != nullptr) options_.fs->full = false;
  else if (f.spec.kind == "drop_messages" || f.spec.kind == "delay_messages") {
    (void)cluster_->set_link_fault(f.spec.task, f.spec.to, {});
  } else {
    return;
  }
  f.lifted_at = env::now();
  log(str_cat("fault: ", f.spec.kind, f.task.empty() ? "" : " " + f.task, " lifted"));
}

void fault_injector::step_reached(std::int64_t global_step) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Random kills: drawn for each step once, from (seed, step) alone.
  const auto& chaos = options_.chaos;
  for (; chaos.kills_per_1000_steps > 0 && !chaos.tasks.empty() && chaos_step_ < global_step;) {
    const std::int64_t s = ++chaos_step_;
    philox draw(chaos.seed, static_cast<std::uint64_t>(s));
    const auto bits = draw.next();
    if (static_cast<double>(bits[0]) * 0x1.0p-32 >= chaos.kills_per_1000_steps / 1000) continue;
    fault_spec spec;
    spec.kind = "kill";
    spec.task = chaos.tasks[bits[1] % chaos.tasks.size()];
    spec.at_step = s;
    // A task down already (killed, its restart to come) is not killed twice: that kill
    // would take nothing down, and no recovery would answer it.
    if (cluster_->task_down(spec.task)) {
      log(str_cat("fault: random kill of ", cluster_->canonical_task(spec.task), " at step ", global_step,
                  " skipped: the task is down already"));
      continue;
    }
    fire(spec, global_step, "random");
  }
  for (auto& f : injected_) {
    if (f.spec.until_step > 0 && f.spec.until_step <= global_step) lift(f);
  }
  for (std::size_t i = 0; i < faults_.size() && faults_[i].at_step <= global_step; ++i) {
    if (done_[i]) continue;
    done_[i] = true;
    fire(faults_[i], global_step, "");
  }
}

void fault_injector::fire(const fault_spec& spec, std::int64_t global_step, std::string detail) {
  injected_fault f;
  f.spec = spec;
  f.task = spec.task.empty() ? "" : cluster_->canonical_task(spec.task);
  f.step = global_step;
  f.at = env::now();
  f.detail = std::move(detail);
  f.outcome = inject(f);
  log(str_cat("fault: ", f.spec.kind, f.task.empty() ? "" : " " + f.task, " at step ", f.step,
              f.detail.empty() ? "" : ": " + f.detail,
              f.outcome.ok() ? std::string("") : str_cat(" failed: ", f.outcome.message())));
  injected_.push_back(std::move(f));
}

void fault_injector::lift_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& f : injected_) lift(f);
}

std::vector<injected_fault> fault_injector::injected() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return injected_;
}

int fault_injector::count(std::string_view kind) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(std::count_if(injected_.begin(), injected_.end(),
                                        [&](const injected_fault& f) { return f.spec.kind == kind; }));
}

}  // namespace troupe::cluster
