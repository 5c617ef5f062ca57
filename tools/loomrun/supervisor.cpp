#include "supervisor.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace loomrun {
namespace {

// Splits a worker's output into lines and writes each with its rank in front.
struct OutputStream {
  int fd;
  FILE* sink;
  std::string pending;
};

struct Worker {
  int rank;
  pid_t pid = -1;
  // Set once it has exited. It stays unreaped (a zombie) until the attempt ends, so that its pid,
  // which names its process group, cannot name another group when loomrun signals it.
  std::optional<int> exit_code;
  OutputStream out, err;
  bool left_out = false;  // the survivors' shrink left it out while it ran: loomrun stopped it
  // When it is stopped unless it ends first, once the survivors named it: a rank that failed
  // by itself is named too, and may still be writing its error out.
  std::optional<std::chrono::steady_clock::time_point> leave_at;
};

// --on-failure shrink: the folder where the survivors of a shrink name, by pid, the workers on
// this host they left out that still run (a frozen one would keep loomrun waiting forever after
// the others end). Made before the workers start and removed with what is in it at the end.
class LeftOutDir {
 public:
  LeftOutDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/loomrun-left-out-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr)
      path_ = pattern;
    else
      std::fprintf(stderr,
                   "loomrun: cannot make a folder in %s (%s): a frozen worker that the others "
                   "leave out will not be stopped\n",
                   pattern.c_str(), std::strerror(errno));
  }
  ~LeftOutDir() {
    if (path_.empty()) return;
    take_names();
    ::rmdir(path_.c_str());
  }
  LeftOutDir(const LeftOutDir&) = delete;
  LeftOutDir& operator=(const LeftOutDir&) = delete;
  const std::string& path() const { return path_; }
  // The pids named since the last look; each name is taken once (its file removed), so that a
  // pid that a process of a wrapper left behind cannot name another process later.
  std::vector<pid_t> take_names() const {
    std::vector<pid_t> pids;
    if (path_.empty()) return pids;
    DIR* d = ::opendir(path_.c_str());
    if (d == nullptr) return pids;
    while (const dirent* e = ::readdir(d)) {
      char* end = nullptr;
      const long pid = std::strtol(e->d_name, &end, 10);
      if (end != e->d_name && *end == '\0' && pid > 0) pids.push_back(static_cast<pid_t>(pid));
    }
    for (pid_t pid : pids) ::unlink(file_of(pid).c_str());
    ::closedir(d);
    return pids;
  }

 private:
  std::string file_of(pid_t pid) const { return path_ + "/" + std::to_string(pid); }
  std::string path_;
};

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) {
  g_signal = sig;
}
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

void flush_lines(OutputStream& s, int rank, bool prefix, bool final) {
  std::size_t start = 0;
  for (std::size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    if (prefix) std::fprintf(s.sink, "[%d] ", rank);
    std::fwrite(s.pending.data() + start, 1, nl - start + 1, s.sink);
  }
  s.pending.erase(0, start);
  if (final && !s.pending.empty()) {
    if (prefix) std::fprintf(s.sink, "[%d] ", rank);
    std::fprintf(s.sink, "%s\n", s.pending.c_str());
    s.pending.clear();
  }
  std::fflush(s.sink);
}

int exit_code_of(const siginfo_t& info) {
  if (info.si_code == CLD_EXITED) return info.si_status;
  return 128 + info.si_status;  // killed by a signal
}

// The worker's exit code once it has exited, left unreaped (see Worker::exit_code).
std::optional<int> ended(const Worker& w) {
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(w.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
      info.si_pid != w.pid)
    return std::nullopt;
  return exit_code_of(info);
}

// Forks one worker in its own process group (stopping it stops everything it started), which
// dies with loomrun: the kernel kills it when loomrun dies, even by SIGKILL. -1 if fork failed.
pid_t start_worker(char* const* argv, char* const* envp, const cpu_set_t* cpus, int out, int err) {
  const pid_t supervisor = ::getpid();
  // Until exec, a stop signal must not run loomrun's handler in the child, where it is lost.
  sigset_t stop_signals, previous;
  sigemptyset(&stop_signals);
  for (int sig : kStopSignals) sigaddset(&stop_signals, sig);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &previous);
  const pid_t pid = fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != supervisor) _exit(128 + SIGKILL);  // loomrun died before prctl
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    for (int sig : kStopSignals) sigaction(sig, &default_action, nullptr);
    sigaction(SIGPIPE, &default_action, nullptr);  // loomrun ignores it; the program must not
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    setpgid(0, 0);
    dup2(out, 1);
    dup2(err, 2);
    if (cpus != nullptr && ::sched_setaffinity(0, sizeof(*cpus), cpus) != 0)
      dprintf(2, "loomrun: cannot bind to its CPUs (--cpu-bind): %s; running unbound\n",
              std::strerror(errno));
    execvpe(argv[0], argv, envp);
    dprintf(2, "loomrun: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  const int fork_error = errno;
  if (pid > 0) setpgid(pid, pid);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  errno = fork_error;
  return pid;
}

// Starts a worker for each spec, into `workers`. A worker that cannot be started ends the
// launch: its rank goes to `failed_rank` and the result is exit code 1 (those started are
// stopped by the caller).
std::optional<int> start_workers(const std::vector<std::string>& command,
                                 const std::vector<WorkerSpec>& specs,
                                 const std::optional<LeftOutDir>& left_out_dir,
                                 std::vector<Worker>& workers, int& failed_rank) {
  for (const WorkerSpec& spec : specs) {
    Worker w;
    w.rank = spec.rank;
    std::vector<std::string> env = spec.env, argv_copy = command;
    if (left_out_dir && !left_out_dir->path().empty())
      env.push_back("LOOM_LEFT_OUT_DIR=" + left_out_dir->path());
    std::vector<char*> envp, argvp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    for (auto& s : argv_copy) argvp.push_back(s.data());
    argvp.push_back(nullptr);

    cpu_set_t cpus;  // built before fork: the child only applies it
    CPU_ZERO(&cpus);
    for (int cpu : spec.cpus) CPU_SET(cpu, &cpus);

    int out[2] = {-1, -1}, err[2] = {-1, -1};
    const char* step = "pipe";
    pid_t pid = -1;
    if (pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0) {
      step = "fork";
      pid = start_worker(argvp.data(), envp.data(), spec.cpus.empty() ? nullptr : &cpus, out[1],
                         err[1]);
    }
    if (pid < 0) {
      std::fprintf(stderr, "loomrun: cannot start rank %d: %s: %s; stopping the workers started\n",
                   w.rank, step, std::strerror(errno));
      for (int fd : {out[0], out[1], err[0], err[1]})
        if (fd >= 0) close(fd);
      failed_rank = w.rank;
      return 1;
    }
    close(out[1]);
    close(err[1]);
    w.pid = pid;
    w.out = {out[0], stdout, {}};
    w.err = {err[0], stderr, {}};
    workers.push_back(std::move(w));
  }
  return std::nullopt;
}

// Waits up to 50 ms for output from the workers and passes on every whole line; a pipe that
// ends is flushed and closed.
void pump_output(std::vector<Worker>& workers, bool prefix) {
  std::vector<pollfd> fds;
  std::vector<OutputStream*> streams;
  std::vector<int> ranks;
  for (auto& w : workers)
    for (OutputStream* s : {&w.out, &w.err})
      if (s->fd >= 0) {
        fds.push_back({s->fd, POLLIN, 0});
        streams.push_back(s);
        ranks.push_back(w.rank);
      }
  ::poll(fds.data(), fds.size(), 50);
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char buf[65536];
    ssize_t n = read(fds[i].fd, buf, sizeof(buf));
    if (n > 0) {
      streams[i]->pending.append(buf, static_cast<std::size_t>(n));
      flush_lines(*streams[i], ranks[i], prefix, false);
    } else if (n == 0 || errno != EINTR) {
      flush_lines(*streams[i], ranks[i], prefix, true);
      close(streams[i]->fd);
      streams[i]->fd = -1;
    }
  }
}

// Workers the survivors' shrink left out, named by pid (this node's folder) or by rank (the
// store): each still running `grace_s` after it was named is killed.
void stop_left_out(std::vector<Worker>& workers, std::optional<LeftOutDir>& left_out_dir,
                   bool others_go_on, const LeftOutLookup& left_out_in_store, double grace_s) {
  const auto now = std::chrono::steady_clock::now();
  const auto leave_at = now + std::chrono::milliseconds(static_cast<long long>(grace_s * 1000));
  auto name = [&](Worker& w) {
    if (!w.exit_code && !w.left_out && !w.leave_at) w.leave_at = leave_at;
  };
  if (left_out_dir)
    for (pid_t pid : left_out_dir->take_names()) {
      // The worker itself, or a process it started (its group: a wrapper that did not exec).
      const pid_t group = ::getpgid(pid);
      for (auto& w : workers)
        if (w.pid == pid || w.pid == group) name(w);
    }
  if (others_go_on && left_out_in_store)
    for (int rank : left_out_in_store())
      for (auto& w : workers)
        if (w.rank == rank) name(w);
  for (auto& w : workers) {
    // One that ended since the look above ends as itself.
    if (!w.leave_at || now < *w.leave_at || w.exit_code || w.left_out || ended(w)) continue;
    std::fprintf(stderr,
                 "loomrun: rank %d was left out by the others' shrink and still ran %.0f s "
                 "later (frozen, or too late to join); stopping it\n",
                 w.rank, grace_s);
    w.left_out = true;
    kill(-w.pid, SIGKILL);
  }
}

Outcome run_workers_impl(const std::vector<std::string>& command,
                         const std::vector<WorkerSpec>& specs, double grace_s, bool prefix,
                         const std::function<bool()>& should_stop, bool others_go_on,
                         const LeftOutLookup& left_out_in_store) {
  std::vector<Worker> workers;
  std::optional<int> failure;  // the first failing worker's exit code
  int failed_rank = -1;
  int last_code = 0, last_rank = -1;  // the last worker to end (others_go_on)
  bool stopped = false;
  std::optional<LeftOutDir> left_out_dir;
  if (others_go_on) left_out_dir.emplace();
  failure = start_workers(command, specs, left_out_dir, workers, failed_rank);

  std::optional<std::chrono::steady_clock::time_point> kill_at;
  // Signals go to each worker's process group, which outlives the worker when it left children.
  auto stop_all = [&](int sig) {
    for (auto& w : workers) kill(-w.pid, sig);
  };
  auto begin_stopping = [&] {
    stop_all(SIGTERM);
    kill_at = std::chrono::steady_clock::now() +
              std::chrono::milliseconds(static_cast<long long>(grace_s * 1000));
  };
  if (failure) begin_stopping();
  std::optional<std::chrono::steady_clock::time_point> all_exited_at;

  for (;;) {
    pump_output(workers, prefix);
    for (auto& w : workers) {
      if (w.exit_code) continue;
      w.exit_code = ended(w);
      if (!w.exit_code) continue;
      if (w.left_out) continue;  // reported when stopped; the job is the survivors'
      last_code = *w.exit_code, last_rank = w.rank;
      if (*w.exit_code != 0 && others_go_on && !stopped && !kill_at) {
        std::fprintf(stderr,
                     "loomrun: rank %d exited with code %d; the other workers go on without it "
                     "(--on-failure shrink)\n",
                     w.rank, *w.exit_code);
      } else if (*w.exit_code != 0 && !failure && !stopped) {
        failure = *w.exit_code;
        failed_rank = w.rank;
        std::fprintf(stderr, "loomrun: rank %d exited with code %d; stopping the other workers\n",
                     w.rank, *failure);
        begin_stopping();
      }
    }
    stop_left_out(workers, left_out_dir, others_go_on, left_out_in_store, grace_s);
    if (!kill_at && should_stop && should_stop()) {
      stopped = true;
      begin_stopping();
    }
    if (g_signal && !kill_at) {
      std::fprintf(stderr, "loomrun: got signal %d; stopping workers\n",
                   static_cast<int>(g_signal));
      if (!failure) failure = 128 + g_signal;
      begin_stopping();
    }
    if (kill_at && std::chrono::steady_clock::now() >= *kill_at) {
      stop_all(SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
    bool all_exited = true, pipes_closed = true;
    for (auto& w : workers) {
      all_exited &= w.exit_code.has_value();
      pipes_closed &= w.out.fd < 0 && w.err.fd < 0;
    }
    if (all_exited && !all_exited_at) all_exited_at = std::chrono::steady_clock::now();
    // A worker's leftover children may hold its pipes open: drain briefly, then stop them.
    if (all_exited && (pipes_closed || std::chrono::steady_clock::now() - *all_exited_at >
                                           std::chrono::seconds(2))) {
      stop_all(SIGKILL);
      for (auto& w : workers) {
        waitpid(w.pid, nullptr, 0);  // only now may its pid name another process group
        for (OutputStream* s : {&w.out, &w.err})
          if (s->fd >= 0) {
            flush_lines(*s, w.rank, prefix, true);
            close(s->fd);
          }
      }
      break;
    }
  }
  // Going on without failed workers, the job is as good as the workers that ended it.
  if (others_go_on && !failure && !stopped && last_code != 0)
    failure = last_code, failed_rank = last_rank;
  return Outcome{failure.value_or(0), failed_rank, g_signal != 0, stopped};
}

}  // namespace

void install_signal_handlers() {
  for (int sig : kStopSignals) signal(sig, on_signal);
  signal(SIGPIPE, SIG_IGN);
}

int received_signal() {
  return g_signal;
}

Outcome run_workers(const std::vector<std::string>& command, const std::vector<WorkerSpec>& specs,
                    double grace_s, bool prefix, const std::function<bool()>& should_stop,
                    bool others_go_on, const LeftOutLookup& left_out_in_store) {
  return run_workers_impl(command, specs, grace_s, prefix, should_stop, others_go_on,
                          left_out_in_store);
}

}  // namespace loomrun
