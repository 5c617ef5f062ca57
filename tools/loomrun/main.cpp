// loomrun: starts the workers of one node, hosts the rendezvous store on node 0, prefixes each
// line of output with its rank, and when one worker fails stops the rest and returns its code.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.hpp"
#include "loom/store.hpp"

extern char** environ;

namespace {

struct Args {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = -1;  // -1: pick a free port on a single node, else 29500
  double grace_s = 5.0;
  int max_restarts = 0;
  bool prefix = true;
  std::string secret_file;
  bool insecure = false;
  std::vector<std::string> command;
};

[[noreturn]] void usage(int code) {
  std::fprintf(
      code ? stderr : stdout,
      "usage: loomrun [options] [--] program [args...]\n"
      "  --nproc-per-node N   workers on this node (default 1)\n"
      "  --nnodes N           nodes in the job (default 1)\n"
      "  --node-rank R        this node's index, 0..nnodes-1 (default 0)\n"
      "  --master-addr HOST   node 0's address (default 127.0.0.1)\n"
      "  --master-port PORT   store port on node 0 (default: free port on one node, 29500 "
      "otherwise)\n"
      "  --grace SECONDS      wait after SIGTERM before SIGKILL when stopping workers (default 5)\n"
      "  --max-restarts N     when a worker fails, stop the others and start all again, up to N\n"
      "                       times (default 0); workers see LOOM_RESTART_COUNT\n"
      "  --no-prefix          do not prefix output lines with the rank\n"
      "  --secret-file PATH   file holding the job secret (else LOOM_SECRET_FILE or LOOM_SECRET);\n"
      "                       required with --nnodes above 1, made up on one node\n"
      "  --insecure           across nodes, run without a secret: anyone who can reach the store\n"
      "                       can read and write it\n"
      "Each worker gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR,\n"
      "MASTER_PORT. When a worker fails the others are stopped; once restarts are spent loomrun\n"
      "exits with the failing worker's code. SIGINT, SIGTERM and SIGHUP stop the workers; if\n"
      "loomrun itself is killed, its workers are killed too.\n");
  std::exit(code);
}

int parse_int(const std::string& flag, const std::string& v, int lo, int hi) {
  try {
    std::size_t pos = 0;
    long long x = std::stoll(v, &pos);
    if (pos == v.size() && x >= lo && x <= hi) return static_cast<int>(x);
  } catch (const std::exception&) {
  }
  std::fprintf(stderr, "loomrun: %s expects an integer in [%d, %d], got '%s'\n", flag.c_str(), lo,
               hi, v.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  int i = 1;
  auto value = [&](const std::string& flag) -> std::string {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "loomrun: %s needs a value\n", flag.c_str());
      std::exit(2);
    }
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    std::string flag = arg, inline_value;
    if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      flag = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    auto get = [&] { return inline_value.empty() ? value(flag) : inline_value; };
    if (flag == "--") {
      ++i;
      break;
    }
    if (flag == "-h" || flag == "--help")
      usage(0);
    else if (flag == "--nproc-per-node" || flag == "--nproc_per_node")
      a.nproc_per_node = parse_int(flag, get(), 1, 4096);
    else if (flag == "--nnodes")
      a.nnodes = parse_int(flag, get(), 1, 1 << 20);
    else if (flag == "--node-rank" || flag == "--node_rank")
      a.node_rank = parse_int(flag, get(), 0, 1 << 20);
    else if (flag == "--master-addr" || flag == "--master_addr")
      a.master_addr = get();
    else if (flag == "--master-port" || flag == "--master_port")
      a.master_port = parse_int(flag, get(), 0, 65535);
    else if (flag == "--grace")
      a.grace_s = parse_int(flag, get(), 0, 3600);
    else if (flag == "--max-restarts" || flag == "--max_restarts")
      a.max_restarts = parse_int(flag, get(), 0, 1 << 20);
    else if (flag == "--no-prefix")
      a.prefix = false;
    else if (flag == "--secret-file" || flag == "--secret_file")
      a.secret_file = get();
    else if (flag == "--insecure")
      a.insecure = true;
    else if (arg.rfind("-", 0) == 0) {
      std::fprintf(stderr, "loomrun: unknown option %s\n", arg.c_str());
      usage(2);
    } else
      break;
  }
  for (; i < argc; ++i) a.command.push_back(argv[i]);
  if (a.command.empty()) {
    std::fprintf(stderr, "loomrun: no program to run\n");
    usage(2);
  }
  if (a.node_rank >= a.nnodes) {
    std::fprintf(stderr, "loomrun: --node-rank %d must be below --nnodes %d\n", a.node_rank,
                 a.nnodes);
    std::exit(2);
  }
  return a;
}

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

// Forks one worker in its own process group (stopping it stops everything it started), which
// dies with loomrun: the kernel kills it when loomrun dies, even by SIGKILL. -1 if fork failed.
pid_t start_worker(char* const* argv, char* const* envp, int out, int err) {
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

// Starts this node's workers and supervises them until all have exited: the first failing
// worker's exit code (0 if none failed), and whether a signal to loomrun ended the run.
struct Outcome {
  int code;
  bool interrupted;
};

Outcome run_workers(const Args& args, const std::vector<std::string>& base_env, int port,
                    int attempt) {
  const int world = args.nproc_per_node * args.nnodes;
  std::vector<Worker> workers;
  std::optional<int> failure;  // the first failing worker's exit code
  for (int local = 0; local < args.nproc_per_node; ++local) {
    Worker w;
    w.rank = args.node_rank * args.nproc_per_node + local;
    std::vector<std::string> env = base_env;
    env.push_back("RANK=" + std::to_string(w.rank));
    env.push_back("WORLD_SIZE=" + std::to_string(world));
    env.push_back("LOCAL_RANK=" + std::to_string(local));
    env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(args.nproc_per_node));
    env.push_back("NODE_RANK=" + std::to_string(args.node_rank));
    env.push_back("MASTER_ADDR=" + args.master_addr);
    env.push_back("MASTER_PORT=" + std::to_string(port));
    env.push_back("LOOM_STORE_HOSTED=1");  // also tells init() that loomrun launched it
    env.push_back("LOOM_RESTART_COUNT=" + std::to_string(attempt));
    std::vector<char*> envp, argvp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> command = args.command;
    for (auto& s : command) argvp.push_back(s.data());
    argvp.push_back(nullptr);

    int out[2] = {-1, -1}, err[2] = {-1, -1};
    const char* step = "pipe";
    pid_t pid = -1;
    if (pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0) {
      step = "fork";
      pid = start_worker(argvp.data(), envp.data(), out[1], err[1]);
    }
    if (pid < 0) {
      std::fprintf(stderr, "loomrun: cannot start rank %d: %s: %s; stopping the workers started\n",
                   w.rank, step, std::strerror(errno));
      for (int fd : {out[0], out[1], err[0], err[1]})
        if (fd >= 0) close(fd);
      failure = 1;
      break;
    }
    close(out[1]);
    close(err[1]);
    w.pid = pid;
    w.out = {out[0], stdout, {}};
    w.err = {err[0], stderr, {}};
    workers.push_back(std::move(w));
  }

  std::optional<std::chrono::steady_clock::time_point> kill_at;
  // Signals go to each worker's process group, which outlives the worker when it left children.
  auto stop_all = [&](int sig) {
    for (auto& w : workers) kill(-w.pid, sig);
  };
  auto begin_stopping = [&] {
    stop_all(SIGTERM);
    kill_at = std::chrono::steady_clock::now() +
              std::chrono::milliseconds(static_cast<long long>(args.grace_s * 1000));
  };
  if (failure) begin_stopping();
  std::optional<std::chrono::steady_clock::time_point> all_exited_at;

  for (;;) {
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
        flush_lines(*streams[i], ranks[i], args.prefix, false);
      } else if (n == 0 || errno != EINTR) {
        flush_lines(*streams[i], ranks[i], args.prefix, true);
        close(streams[i]->fd);
        streams[i]->fd = -1;
      }
    }
    for (auto& w : workers) {
      if (w.exit_code) continue;
      siginfo_t info{};
      if (waitid(P_PID, static_cast<id_t>(w.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
          info.si_pid != w.pid)
        continue;
      w.exit_code = exit_code_of(info);
      if (*w.exit_code != 0 && !failure) {
        failure = *w.exit_code;
        std::fprintf(stderr, "loomrun: rank %d exited with code %d; stopping the other workers\n",
                     w.rank, *failure);
        begin_stopping();
      }
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
            flush_lines(*s, w.rank, args.prefix, true);
            close(s->fd);
          }
      }
      break;
    }
  }
  return Outcome{failure.value_or(0), g_signal != 0};
}

// 32 random bytes from the kernel, as hex.
std::string random_secret() {
  unsigned char bytes[32];
  FILE* f = std::fopen("/dev/urandom", "rb");
  if (f == nullptr || std::fread(bytes, 1, sizeof(bytes), f) != sizeof(bytes)) {
    std::fprintf(stderr, "loomrun: cannot read /dev/urandom for the job secret\n");
    std::exit(1);
  }
  std::fclose(f);
  std::string hex;
  for (unsigned char b : bytes)
    hex += "0123456789abcdef"[b >> 4], hex += "0123456789abcdef"[b & 15];
  return hex;
}

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

// The job secret authenticates every store and data connection. One node: make one and hand it
// to the workers. Several nodes: every loomrun must be given the same one, or run --insecure.
void settle_secret(const Args& args, int port) {
  if (!args.secret_file.empty()) {  // it wins over the environment's
    std::error_code ec;
    const auto path = std::filesystem::absolute(args.secret_file, ec);
    setenv("LOOM_SECRET_FILE", (ec ? args.secret_file : path.string()).c_str(), 1);
    unsetenv("LOOM_SECRET");
  }
  if (!env_set("LOOM_SECRET") && env_set("LOOM_SECRET_FILE")) {
    const char* path = std::getenv("LOOM_SECRET_FILE");
    FILE* f = std::fopen(path, "rb");
    const bool readable = f != nullptr && std::fgetc(f) != EOF;
    const int error = errno;
    if (f != nullptr) std::fclose(f);
    if (!readable) {
      std::fprintf(stderr, "loomrun: cannot read the job secret from %s: %s\n", path,
                   f == nullptr ? std::strerror(error) : "empty file");
      std::exit(2);
    }
  }
  if (env_set("LOOM_SECRET") || env_set("LOOM_SECRET_FILE")) return;
  if (args.nnodes == 1) {
    setenv("LOOM_SECRET", random_secret().c_str(), 1);
  } else if (!args.insecure) {
    std::fprintf(stderr,
                 "loomrun: --nnodes %d: every node's loomrun needs the same job secret: give "
                 "--secret-file PATH (or set LOOM_SECRET_FILE or LOOM_SECRET). Without one, "
                 "anyone who can reach %s:%d can read and write the store and join the job; "
                 "--insecure accepts that\n",
                 args.nnodes, args.master_addr.c_str(), port);
    std::exit(2);
  } else {
    std::fprintf(stderr,
                 "loomrun: warning: --insecure: the store on %s:%d and the data connections are "
                 "not authenticated\n",
                 args.master_addr.c_str(), port);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
  int port = args.master_port >= 0 ? args.master_port : args.nnodes == 1 ? 0 : 29500;
  settle_secret(args, port);

  std::unique_ptr<loom::StoreServer> store;
  if (args.node_rank == 0) {
    // On --master-addr only: across nodes that is the address the other nodes reach.
    try {
      store =
          std::make_unique<loom::StoreServer>(args.master_addr, static_cast<std::uint16_t>(port));
    } catch (const std::exception& e) {
      std::fprintf(stderr,
                   "loomrun: cannot host the store on %s:%d: %s (--master-addr must be an address "
                   "of this machine, node 0)\n",
                   args.master_addr.c_str(), port, e.what());
      return 1;
    }
    port = store->port();
  }

  // Environment of every worker, built before fork: the child only calls exec.
  std::vector<std::string> base_env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    for (const char* name :
         {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "NODE_RANK=", "MASTER_ADDR=",
          "MASTER_PORT=", "LOOM_STORE_HOSTED=", "LOOM_INIT_METHOD=", "LOOM_RESTART_COUNT="})
      if (kv.rfind(name, 0) == 0) kv.clear();
    if (!kv.empty()) base_env.push_back(kv);
  }

  for (int sig : kStopSignals) signal(sig, on_signal);
  signal(SIGPIPE, SIG_IGN);

  for (int attempt = 0;; ++attempt) {
    const Outcome outcome = run_workers(args, base_env, port, attempt);
    if (outcome.code == 0 || outcome.interrupted) return outcome.code;
    if (attempt >= args.max_restarts) {
      if (args.max_restarts > 0)
        std::fprintf(stderr, "loomrun: restarts spent (%d); exiting with code %d\n",
                     args.max_restarts, outcome.code);
      return outcome.code;
    }
    std::fprintf(stderr, "loomrun: restarting the workers (%d of %d)\n", attempt + 1,
                 args.max_restarts);
  }
}
