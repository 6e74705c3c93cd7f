#include "cluster/task_processes.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <random>
#include <sstream>
#include <thread>

namespace troupe::cluster {
namespace {

using clock = std::chrono::steady_clock;

// The last lines of a log file (for an error about its process).
std::string tail_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "(no log)";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = size > 1200 ? size - 1200 : 0;
  in.seekg(from);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.empty()) return "(the log is empty)";
  return text;
}

std::mutex pick_mutex;  // guards the generator below

std::string exit_text(int wait_status) {
  if (WIFEXITED(wait_status)) return str_cat("exited with code ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return str_cat("was killed by signal ", WTERMSIG(wait_status));
  return "ended";
}

}  // namespace

int free_loopback_port() {
  static std::mt19937 pick(std::random_device{}());
  // The ports handed out lately: a port is free until its server binds it, so without
  // these two tasks of one cluster file could draw the same one (about 1 run in 400 with
  // nine tasks).
  static std::set<int> given;
  static std::deque<int> given_order;
  constexpr std::size_t k_remembered = 4096;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    int port = 0;
    {
      std::lock_guard<std::mutex> lock(pick_mutex);
      port = std::uniform_int_distribution<int>(20000, 31999)(pick);
      if (given.count(port) != 0) continue;
    }
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 0;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (!free) continue;
    std::lock_guard<std::mutex> lock(pick_mutex);
    if (!given.insert(port).second) continue;  // another thread drew it meanwhile
    given_order.push_back(port);
    if (given_order.size() > k_remembered) {
      given.erase(given_order.front());
      given_order.pop_front();
    }
    return port;
  }
  return 0;
}

struct task_processes::impl {
  task_processes_options options;
  std::string cluster_path;
  struct process {
    task_address address;
    std::string log;
    int pid = 0;
  };
  mutable std::mutex mutex;                // guards procs and ended
  std::map<std::string, process> procs;    // by canonical task name
  bool ended = false;

  // The launcher thread: forks every server (their parent-death signal is tied to it)
  // and runs the timers of stalls.
  std::mutex queue_mutex;
  std::condition_variable wake;
  std::deque<std::function<void()>> queue;
  std::multimap<clock::time_point, std::function<void()>> timers;
  bool stopping = false;
  std::thread launcher;

  ~impl() {
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      stopping = true;
    }
    wake.notify_all();
    if (launcher.joinable()) launcher.join();
  }

  void loop() {
    std::unique_lock<std::mutex> lock(queue_mutex);
    for (;;) {
      if (!queue.empty()) {
        auto work = std::move(queue.front());
        queue.pop_front();
        lock.unlock();
        work();
        lock.lock();
        continue;
      }
      if (!timers.empty() && timers.begin()->first <= clock::now()) {
        auto work = std::move(timers.begin()->second);
        timers.erase(timers.begin());
        lock.unlock();
        work();
        lock.lock();
        continue;
      }
      if (stopping) return;
      if (timers.empty()) {
        wake.wait(lock);
      } else {
        wake.wait_until(lock, timers.begin()->first);
      }
    }
  }

  // Runs `work` on the launcher thread and waits for it.
  template <typename T>
  T on_launcher(std::function<T()> work) {
    auto task = std::make_shared<std::packaged_task<T()>>(std::move(work));
    auto done = task->get_future();
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      queue.emplace_back([task] { (*task)(); });
    }
    wake.notify_all();
    return done.get();
  }

  void after(std::chrono::milliseconds delay, std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      timers.emplace(clock::now() + delay, std::move(work));
    }
    wake.notify_all();
  }

  struct started {
    int pid = 0;
    int ready_fd = -1;
  };

  // Forks and executes the task's server (on the launcher thread).
  result<started> fork_server(const process& p) {
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) return internal_error("a pipe for task ", p.address.task_name(), ": ", std::strerror(errno));
    const int log = ::open(p.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (log < 0 || null < 0) {
      const std::string why = std::strerror(errno);
      for (int fd : {ready[0], ready[1], log, null}) {
        if (fd >= 0) ::close(fd);
      }
      return unavailable_error("cannot open the log '", p.log, "' of task ", p.address.task_name(), ": ", why);
    }
    std::vector<std::string> args = {options.executable, "server", "--cluster", cluster_path, "--job", p.address.job,
                                     "--task", std::to_string(p.address.index), "--ready-fd", std::to_string(ready[1])};
    if (options.trace) args.push_back("--trace");
    // Every server shares this machine's cores with the others (and the client): a compute
    // thread that spins for more work takes a core from another process's kernels.
    args.push_back("--no-spin");
    if (options.compute_threads > 0) {
      args.push_back("--compute-threads");
      args.push_back(std::to_string(options.compute_threads));
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      // The child: only async-signal-safe calls until exec.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::signal(SIGPIPE, SIG_DFL);
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::dup2(null, 0);
      ::dup2(log, 1);
      ::dup2(log, 2);
      ::fcntl(ready[1], F_SETFD, 0);  // the ready pipe crosses exec
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    const int fork_errno = errno;
    ::close(ready[1]);
    ::close(log);
    ::close(null);
    if (pid < 0) {
      ::close(ready[0]);
      return unavailable_error("cannot start a process for task ", p.address.task_name(), ": ", std::strerror(fork_errno));
    }
    return started{pid, ready[0]};
  }

  // Waits for the server's "ready" line; on failure kills and reaps it.
  status wait_ready(const process& p, started s) {
    const auto deadline = clock::now() + options.ready_timeout;
    std::string said;
    bool closed = false;
    while (said.find('\n') == std::string::npos && !closed) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
      if (left <= 0) break;
      pollfd pfd{s.ready_fd, POLLIN, 0};
      const int n = ::poll(&pfd, 1, static_cast<int>(left));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      char buffer[64];
      const ssize_t got = ::read(s.ready_fd, buffer, sizeof buffer);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        closed = true;
      } else {
        said.append(buffer, static_cast<std::size_t>(got));
      }
    }
    ::close(s.ready_fd);
    if (said.rfind("ready", 0) == 0) return status();
    // It exited, or stays silent: make sure it is gone and say why.
    int wait_status = 0;
    std::string how;
    // A closed pipe is most likely a process exiting: give it a moment to be reaped.
    const auto exiting = clock::now() + std::chrono::milliseconds(closed ? 1000 : 0);
    bool reaped = ::waitpid(s.pid, &wait_status, WNOHANG) == s.pid;
    while (!reaped && clock::now() < exiting) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      reaped = ::waitpid(s.pid, &wait_status, WNOHANG) == s.pid;
    }
    if (reaped) {
      how = exit_text(wait_status);
    } else {
      ::kill(s.pid, SIGKILL);
      ::waitpid(s.pid, &wait_status, 0);
      how = closed ? "closed its ready pipe without serving" : str_cat("did not serve within ", options.ready_timeout.count(), " ms");
    }
    return unavailable_error("the server of task ", p.address.task_name(), " (", options.executable, " server) ", how,
                             "; the end of its log ", p.log, ":\n", tail_of(p.log));
  }

  // Starts the task's process (none may be running) and waits until it serves.
  status launch(const std::string& task) {
    process p;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (ended) return failed_precondition_error("the servers of this run were stopped");
      p = procs.at(task);
    }
    auto s = on_launcher<result<started>>([this, p] { return fork_server(p); });
    if (!s.ok()) return s.error();
    {
      std::lock_guard<std::mutex> lock(mutex);
      procs.at(task).pid = s->pid;
    }
    status ready = wait_ready(p, *s);
    if (!ready.ok()) {
      std::lock_guard<std::mutex> lock(mutex);
      if (procs.at(task).pid == s->pid) procs.at(task).pid = 0;  // reaped by wait_ready
    }
    return ready;
  }

  // Kills and reaps the task's process, if it has one.
  void end_process(const std::string& task) {
    int pid = 0;
    {
      std::lock_guard<std::mutex> lock(mutex);
      pid = procs.at(task).pid;
      procs.at(task).pid = 0;
    }
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    int wait_status = 0;
    while (::waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
    }
  }

  result<std::string> known(const std::string& task) const {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& [name, p] : procs) {
      if (p.address.is(task)) return name;
    }
    return not_found_error("no task '", task, "' among this run's servers");
  }

  status kill_task(const std::string& task) {
    auto name = known(task);
    if (!name.ok()) return name.error();
    end_process(*name);
    return status();
  }

  status restart_task(const std::string& task) {
    auto name = known(task);
    if (!name.ok()) return name.error();
    end_process(*name);
    return launch(*name);
  }

  int pid_of(const std::string& task) const {
    auto name = known(task);
    if (!name.ok()) return 0;
    std::lock_guard<std::mutex> lock(mutex);
    return procs.at(*name).pid;
  }

  status stall_task(const std::string& task, std::chrono::milliseconds duration) {
    auto name = known(task);
    if (!name.ok()) return name.error();
    int pid = 0;
    {
      std::lock_guard<std::mutex> lock(mutex);  // while it holds a pid, that process is not reaped
      pid = procs.at(*name).pid;
      if (pid > 0) ::kill(pid, SIGSTOP);
    }
    if (pid <= 0) return failed_precondition_error("task ", *name, " has no process to stall");
    after(duration, [this, name = *name, pid] {
      std::lock_guard<std::mutex> lock(mutex);
      if (procs.at(name).pid == pid) ::kill(pid, SIGCONT);  // still that process (not reaped, so not reused)
    });
    return status();
  }

  // Stops every server: SIGTERM (and SIGCONT for a stalled one), then SIGKILL.
  void stop_all() {
    std::vector<int> pids;
    {
      std::lock_guard<std::mutex> lock(mutex);
      ended = true;
      for (auto& [name, p] : procs) {
        if (p.pid > 0) pids.push_back(p.pid);
        p.pid = 0;
      }
    }
    for (int pid : pids) {
      ::kill(pid, SIGTERM);
      ::kill(pid, SIGCONT);
    }
    const auto deadline = clock::now() + options.stop_timeout;
    std::vector<int> left = pids;
    while (!left.empty() && clock::now() < deadline) {
      std::vector<int> still;
      for (int pid : left) {
        int wait_status = 0;
        const int r = ::waitpid(pid, &wait_status, WNOHANG);
        if (r == 0 || (r < 0 && errno == EINTR)) still.push_back(pid);
      }
      left.swap(still);
      if (!left.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (int pid : left) {
      ::kill(pid, SIGKILL);
      int wait_status = 0;
      while (::waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
      }
    }
  }
};

result<std::unique_ptr<task_processes>> task_processes::start(const cluster_file& file, task_processes_options options) {
  if (options.executable.empty() || ::access(options.executable.c_str(), X_OK) != 0) {
    return failed_precondition_error("a real cluster's servers need the troupe program, and '", options.executable,
                                     "' is not an executable file");
  }
  if (options.log_dir.empty()) return invalid_argument_error("task_processes: no log_dir");
  auto s = std::make_shared<impl>();
  s->options = std::move(options);
  s->cluster_path = file.path();
  for (const task_address& a : file.tasks()) {
    impl::process p;
    p.address = a;
    p.log = str_cat(s->options.log_dir, "/", a.job, "-", a.index, ".log");
    s->procs.emplace(a.task_name(), std::move(p));
  }
  s->launcher = std::thread([raw = s.get()] { raw->loop(); });
  std::unique_ptr<task_processes> out(new task_processes(s));
  // Every server forks first, then each is waited for: they start side by side.
  std::vector<std::pair<std::string, result<impl::started>>> forked;
  for (const auto& [name, p] : s->procs) {
    auto started = s->on_launcher<result<impl::started>>([raw = s.get(), p = p] { return raw->fork_server(p); });
    if (started.ok()) s->procs.at(name).pid = started->pid;
    forked.emplace_back(name, std::move(started));
  }
  status first;
  for (auto& [name, started] : forked) {
    status ready = started.ok() ? s->wait_ready(s->procs.at(name), *started) : started.error();
    if (!ready.ok() && started.ok()) s->procs.at(name).pid = 0;  // reaped
    if (!ready.ok() && first.ok()) first = ready;
  }
  if (!first.ok()) return first;  // `out` stops the others
  return out;
}

task_processes::~task_processes() { impl_->stop_all(); }

status task_processes::kill(const std::string& task) { return impl_->kill_task(task); }
status task_processes::restart(const std::string& task) { return impl_->restart_task(task); }
status task_processes::stall(const std::string& task, std::chrono::milliseconds duration) {
  return impl_->stall_task(task, duration);
}
int task_processes::pid(const std::string& task) const { return impl_->pid_of(task); }

std::string task_processes::log_path(const std::string& task) const {
  auto name = impl_->known(task);
  if (!name.ok()) return "";
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->procs.at(*name).log;
}

std::shared_ptr<const actors::cluster_options::remote_task_control> task_processes::control() const {
  auto c = std::make_shared<actors::cluster_options::remote_task_control>();
  std::weak_ptr<impl> weak = impl_;
  auto gone = [] { return failed_precondition_error("the servers of this run were stopped"); };
  c->kill = [weak, gone](const std::string& task) -> status {
    auto s = weak.lock();
    return s != nullptr ? s->kill_task(task) : gone();
  };
  c->restart = [weak, gone](const std::string& task) -> status {
    auto s = weak.lock();
    return s != nullptr ? s->restart_task(task) : gone();
  };
  c->stall = [weak, gone](const std::string& task, std::chrono::milliseconds duration) -> status {
    auto s = weak.lock();
    return s != nullptr ? s->stall_task(task, duration) : gone();
  };
  return c;
}

}  // namespace troupe::cluster
