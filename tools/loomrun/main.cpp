// loomrun: starts the workers of one node, hosts the rendezvous store on node 0, prefixes each
// line of output with its rank, and when one worker fails stops the rest and returns its code.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
      "Each worker gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR,\n"
      "MASTER_PORT. When a worker fails the others are stopped; once restarts are spent loomrun\n"
      "exits with the failing worker's code.\n");
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
  std::optional<int> exit_code;
  OutputStream out, err;
};

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) {
  g_signal = sig;
}

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

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
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

    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      std::perror("loomrun: pipe");
      return Outcome{1, false};
    }
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("loomrun: fork");
      return Outcome{1, false};
    }
    if (pid == 0) {
      setpgid(0, 0);  // its own group: stopping a worker stops everything it started
      dup2(out[1], 1);
      dup2(err[1], 2);
      execvpe(argvp[0], argvp.data(), envp.data());
      dprintf(2, "loomrun: cannot run %s: %s\n", argvp[0], std::strerror(errno));
      _exit(127);
    }
    setpgid(pid, pid);
    close(out[1]);
    close(err[1]);
    w.pid = pid;
    w.out = {out[0], stdout, {}};
    w.err = {err[0], stderr, {}};
    workers.push_back(std::move(w));
  }

  std::optional<int> failure;  // the first failing worker's exit code
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  // Signals go to each worker's process group, which outlives the worker when it left children.
  auto stop_all = [&](int sig) {
    for (auto& w : workers) kill(-w.pid, sig);
  };
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
      int status = 0;
      if (waitpid(w.pid, &status, WNOHANG) == w.pid) {
        w.exit_code = exit_code_of(status);
        if (*w.exit_code != 0 && !failure) {
          failure = *w.exit_code;
          std::fprintf(stderr, "loomrun: rank %d exited with code %d; stopping the other workers\n",
                       w.rank, *failure);
          stop_all(SIGTERM);
          kill_at = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(static_cast<long long>(args.grace_s * 1000));
        }
      }
    }
    if (g_signal && !kill_at) {
      std::fprintf(stderr, "loomrun: got signal %d; stopping workers\n",
                   static_cast<int>(g_signal));
      stop_all(SIGTERM);
      if (!failure) failure = 128 + g_signal;
      kill_at = std::chrono::steady_clock::now() +
                std::chrono::milliseconds(static_cast<long long>(args.grace_s * 1000));
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
      for (auto& w : workers)
        for (OutputStream* s : {&w.out, &w.err})
          if (s->fd >= 0) {
            flush_lines(*s, w.rank, args.prefix, true);
            close(s->fd);
          }
      break;
    }
  }
  return Outcome{failure.value_or(0), g_signal != 0};
}

}  // namespace

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

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
  // The job secret authenticates every store and data connection. One node: make one and hand
  // it to the workers. Several nodes: every loomrun must be given the same one.
  const char* secret = std::getenv("LOOM_SECRET");
  const char* secret_file = std::getenv("LOOM_SECRET_FILE");
  if ((secret == nullptr || *secret == '\0') && (secret_file == nullptr || *secret_file == '\0')) {
    if (args.nnodes == 1)
      setenv("LOOM_SECRET", random_secret().c_str(), 1);
    else
      std::fprintf(stderr,
                   "loomrun: warning: no LOOM_SECRET or LOOM_SECRET_FILE; across nodes every "
                   "loomrun needs the same one, so this job's connections are not authenticated\n");
  }

  std::unique_ptr<loom::StoreServer> store;
  int port = args.master_port;
  if (args.node_rank == 0) {
    try {
      store = std::make_unique<loom::StoreServer>(
          args.nnodes == 1 ? args.master_addr : "0.0.0.0",
          static_cast<std::uint16_t>(port < 0 ? (args.nnodes == 1 ? 0 : 29500) : port));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loomrun: cannot host the store on %s:%d: %s\n",
                   args.master_addr.c_str(), port, e.what());
      return 1;
    }
    port = store->port();
  } else if (port < 0) {
    port = 29500;
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

  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
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
