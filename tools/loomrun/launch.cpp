#include "launch.hpp"

#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "loom/store.hpp"
#include "store/keys.hpp"

namespace loomrun {
namespace {

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

// Set per worker by loomrun (and torchrun): never inherited from loomrun's own environment.
constexpr std::string_view kPerWorker[] = {"RANK=",
                                           "WORLD_SIZE=",
                                           "LOCAL_RANK=",
                                           "LOCAL_WORLD_SIZE=",
                                           "NODE_RANK=",
                                           "GROUP_RANK=",
                                           "GROUP_WORLD_SIZE=",
                                           "ROLE_RANK=",
                                           "ROLE_NAME=",
                                           "ROLE_WORLD_SIZE=",
                                           "MASTER_ADDR=",
                                           "MASTER_PORT=",
                                           "LOOM_STORE_HOSTED=",
                                           "LOOM_INIT_METHOD=",
                                           "LOOM_RESTART_COUNT=",
                                           "LOOM_ON_FAILURE=",
                                           "LOOM_LEFT_OUT_DIR=",
                                           "LOOM_WORKER_ID=",
                                           "LOOM_MIN_NODES=",
                                           "TORCHELASTIC_"};

}  // namespace

std::string random_hex(int count) {
  std::vector<unsigned char> bytes(static_cast<std::size_t>(count));
  FILE* f = std::fopen("/dev/urandom", "rb");
  if (f == nullptr || std::fread(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::fprintf(stderr, "loomrun: cannot read /dev/urandom\n");
    std::exit(1);
  }
  std::fclose(f);
  std::string hex;
  for (unsigned char b : bytes)
    hex += "0123456789abcdef"[b >> 4], hex += "0123456789abcdef"[b & 15];
  return hex;
}

void settle_secret(const Args& args) {
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
  const std::string where =
      args.dynamic ? fmt::format("the rendezvous at {}:{}", args.rdzv_host, args.rdzv_port)
                   : fmt::format("{}:{}", args.master_addr,
                                 args.master_port >= 0 ? args.master_port : 29500);
  if (args.max_nodes == 1) {
    setenv("LOOM_SECRET", random_hex(32).c_str(), 1);
  } else if (!args.insecure) {
    std::fprintf(stderr,
                 "loomrun: --nnodes %s: every node's loomrun needs the same job secret: give "
                 "--secret-file PATH (or set LOOM_SECRET_FILE or LOOM_SECRET). Without one, "
                 "anyone who can reach %s can read and write the store and join the job; "
                 "--insecure accepts that\n",
                 args.min_nodes == args.max_nodes
                     ? std::to_string(args.max_nodes).c_str()
                     : fmt::format("{}:{}", args.min_nodes, args.max_nodes).c_str(),
                 where.c_str());
    std::exit(2);
  } else {
    std::fprintf(stderr,
                 "loomrun: warning: --insecure: the store on %s and the data connections are "
                 "not authenticated\n",
                 where.c_str());
  }
}

std::vector<std::string> inherited_environment(char** environ, const Args& args) {
  std::vector<std::string> env;
  bool omp = false;
  for (char** e = environ; *e; ++e) {
    const std::string_view kv = *e;
    bool per_worker = false;
    for (std::string_view name : kPerWorker) per_worker |= kv.rfind(name, 0) == 0;
    if (per_worker) continue;
    omp |= kv.rfind("OMP_NUM_THREADS=", 0) == 0;
    env.emplace_back(kv);
  }
  // Several workers on a node, each with all cores' threads, would oversubscribe it.
  if (!omp && args.nproc_per_node > 1) env.emplace_back("OMP_NUM_THREADS=1");
  return env;
}

std::vector<int> cpu_share(int local, int workers, const std::vector<int>& allowed) {
  const auto cpus = static_cast<long long>(allowed.size());
  if (cpus == 0 || workers <= 0) return {};
  const long long first = local * cpus / workers;
  const long long end = std::max(first + 1, (local + 1LL) * cpus / workers);
  return {allowed.begin() + first, allowed.begin() + end};
}

std::vector<WorkerSpec> worker_specs(const Args& args, const Placement& place,
                                     const std::vector<std::string>& base_env) {
  std::vector<int> allowed;
  if (args.bind_cores) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof(set), &set) == 0)
      for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &set)) allowed.push_back(cpu);
  }
  std::vector<WorkerSpec> specs;
  for (int local = 0; local < args.nproc_per_node; ++local) {
    WorkerSpec spec{place.first_rank + local, base_env,
                    cpu_share(local, args.nproc_per_node, allowed)};
    auto set = [&](std::string_view name, const auto& value) {
      spec.env.push_back(fmt::format("{}={}", name, value));
    };
    // torchrun's (torch.distributed.elastic's LocalElasticAgent):
    set("RANK", spec.rank);
    set("LOCAL_RANK", local);
    set("GROUP_RANK", place.group_rank);
    set("ROLE_RANK", spec.rank);  // one role: its ranks are the global ones
    set("ROLE_NAME", args.role);
    set("LOCAL_WORLD_SIZE", args.nproc_per_node);
    set("WORLD_SIZE", place.world_size);
    set("GROUP_WORLD_SIZE", place.group_world_size);
    set("ROLE_WORLD_SIZE", place.world_size);
    set("MASTER_ADDR", place.master_addr);
    set("MASTER_PORT", place.master_port);
    set("TORCHELASTIC_RESTART_COUNT", place.restart_count);
    set("TORCHELASTIC_MAX_RESTARTS", args.max_restarts);
    set("TORCHELASTIC_RUN_ID", place.run_id);
    set("TORCHELASTIC_USE_AGENT_STORE", "True");  // loomrun hosts the store at MASTER_ADDR
    // Loom's:
    set("NODE_RANK", place.group_rank);
    set("LOOM_STORE_HOSTED", 1);  // also tells init() that loomrun launched it
    set("LOOM_RESTART_COUNT", place.restart_count);
    set("LOOM_ON_FAILURE", args.shrink_on_failure ? "shrink" : "exit");
    set("LOOM_WORKER_ID", worker_id(place, spec.rank));
    // A job of MIN:MAX nodes may not shrink below MIN (a static launch gives no bound).
    if (args.dynamic) set("LOOM_MIN_NODES", args.min_nodes);
    specs.push_back(std::move(spec));
  }
  return specs;
}

void log_launch(const Args& args, const std::string& run_id, const std::string& endpoint) {
  std::fprintf(stderr,
               "loomrun: INFO: Starting elastic_operator with launch configs:\n"
               "  entrypoint       : %s\n"
               "  min_nodes        : %d\n"
               "  max_nodes        : %d\n"
               "  nproc_per_node   : %d\n"
               "  run_id           : %s\n"
               "  rdzv_backend     : %s\n"
               "  rdzv_endpoint    : %s\n"
               "  max_restarts     : %d\n"
               "  monitor_interval : %g\n",
               args.command.front().c_str(), args.min_nodes, args.max_nodes, args.nproc_per_node,
               run_id.c_str(), args.rdzv_backend == "static" ? "loom" : args.rdzv_backend.c_str(),
               endpoint.c_str(), args.max_restarts,
               static_cast<double>(args.monitor_interval.count()) / 1000.0);
}

void log_round(const Args& args, const Placement& place) {
  std::vector<int> local_ranks, global_ranks, world_sizes;
  for (int local = 0; local < args.nproc_per_node; ++local) {
    local_ranks.push_back(local);
    global_ranks.push_back(place.first_rank + local);
    world_sizes.push_back(place.world_size);
  }
  std::fprintf(stderr, "%s",
               fmt::format("loomrun: INFO: [{}] Rendezvous complete for workers. Result:\n"
                           "  restart_count={}\n"
                           "  master_addr={}\n"
                           "  master_port={}\n"
                           "  group_rank={}\n"
                           "  group_world_size={}\n"
                           "  local_ranks=[{}]\n"
                           "  role_ranks=[{}]\n"
                           "  global_ranks=[{}]\n"
                           "  role_world_sizes=[{}]\n"
                           "  global_world_sizes=[{}]\n",
                           args.role, place.restart_count, place.master_addr, place.master_port,
                           place.group_rank, place.group_world_size, fmt::join(local_ranks, ", "),
                           fmt::join(global_ranks, ", "), fmt::join(global_ranks, ", "),
                           fmt::join(world_sizes, ", "), fmt::join(world_sizes, ", "))
                   .c_str());
}

namespace {

// Asks the workers' store, on a thread of its own (a store that does not answer must not hold up
// the supervisor's loop), once a second, which of this node's workers the survivors left out.
class LeftOutWatch {
 public:
  LeftOutWatch(const Placement& place, int workers)
      : host_(place.master_addr), port_(static_cast<std::uint16_t>(place.master_port)) {
    for (int local = 0; local < workers; ++local) {
      ranks_.push_back(place.first_rank + local);
      keys_.push_back(loom::store::keys::launcher_left_out(worker_id(place, ranks_.back())));
    }
  }
  ~LeftOutWatch() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  LeftOutWatch(const LeftOutWatch&) = delete;
  LeftOutWatch& operator=(const LeftOutWatch&) = delete;

  // The ranks named so far. The first call starts the thread: after the workers are forked.
  std::vector<int> named() {
    std::lock_guard lock(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    return named_;
  }

 private:
  void run() {
    constexpr auto kWait = std::chrono::seconds(1);
    std::shared_ptr<loom::Store> store;
    std::unique_lock lock(mu_);
    while (!stop_) {
      lock.unlock();
      std::vector<int> found;
      try {
        if (!store)
          store = std::make_shared<loom::TcpStore>(host_, port_, kWait, std::nullopt, kWait);
        const std::vector<bool> seen = store->check(keys_);
        for (std::size_t i = 0; i < seen.size(); ++i)
          if (seen[i]) found.push_back(ranks_[i]);
      } catch (const std::exception&) {
        store.reset();  // its host may be gone or slow: the workers find that out themselves
      }
      lock.lock();
      named_ = std::move(found);
      wake_.wait_for(lock, kWait, [this] { return stop_; });
    }
  }

  std::string host_;
  std::uint16_t port_;
  std::vector<int> ranks_;
  std::vector<std::string> keys_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::vector<int> named_;
  std::thread thread_;
};

}  // namespace

std::string worker_id(const Placement& place, int rank) {
  // Made once per loomrun: two nodes' workers (or two jobs' on one store) never share a name.
  static const std::string kThisLoomrun = random_hex(8);
  return fmt::format("{}-{}-{}", kThisLoomrun, place.restart_count, rank);
}

LeftOutLookup left_out_in_store(const Placement& place, int workers) {
  auto watch = std::make_shared<LeftOutWatch>(place, workers);
  return [watch] { return watch->named(); };
}

}  // namespace loomrun
