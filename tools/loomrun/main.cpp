// loomrun: starts the workers of one node with torchrun's environment, supervises them (output
// prefixed with the rank; when one fails the rest are stopped), and restarts them after a
// failure. Static launches: every node is given its rank and node 0 hosts the store. Dynamic
// launches (--rdzv-endpoint, --nnodes MIN:MAX, --standalone): nodes meet in a rendezvous that
// assigns their ranks, lets nodes come and go between rounds and survives the loss of any node.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "args.hpp"
#include "launch.hpp"
#include "loom/store.hpp"
#include "rendezvous.hpp"
#include "static_attempts.hpp"
#include "supervisor.hpp"

extern char** environ;

namespace loomrun {
namespace {

// --on-failure shrink: workers the others left out, named in the workers' store.
LeftOutLookup left_out_lookup(const Args& args, const Placement& place) {
  return args.shrink_on_failure ? left_out_in_store(place, args.nproc_per_node) : LeftOutLookup{};
}

int run_static(const Args& args, const std::vector<std::string>& base_env) {
  const int node_rank = args.node_rank.value_or(0);
  int port = args.master_port >= 0 ? args.master_port : args.nnodes() == 1 ? 0 : 29500;
  std::unique_ptr<loom::StoreServer> store;
  if (node_rank == 0) {
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
  Placement place;
  place.group_rank = node_rank;
  place.group_world_size = args.nnodes();
  place.first_rank = node_rank * args.nproc_per_node;
  place.world_size = args.nnodes() * args.nproc_per_node;
  place.master_addr = args.master_addr;
  place.master_port = port;
  place.run_id = args.rdzv_id;
  // Across nodes with restarts, the nodes agree on the attempt through node 0's store.
  std::unique_ptr<StaticAttempts> agreed;
  int attempt = 0;
  try {
    if (args.nnodes() > 1 && args.max_restarts > 0) {
      agreed = std::make_unique<StaticAttempts>(args.master_addr, static_cast<std::uint16_t>(port));
      attempt = agreed->first();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loomrun: node 0's store at %s:%d: %s\n", args.master_addr.c_str(), port,
                 e.what());
    return 1;
  }
  for (;;) {
    place.restart_count = attempt;
    log_round(args, place);
    const int running = attempt;
    const Outcome outcome = run_workers(
        args.command, worker_specs(args, place, base_env), args.grace_s, args.prefix,
        [&] { return agreed && agreed->passed(running, args.monitor_interval * 5); },
        args.shrink_on_failure, left_out_lookup(args, place));
    if ((outcome.code == 0 && !outcome.stopped) || outcome.interrupted) return outcome.code;
    const int code = outcome.code != 0 ? outcome.code : 1;
    try {
      attempt = agreed ? agreed->after(attempt) : attempt + 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loomrun: node 0's store: %s; exiting with code %d\n", e.what(), code);
      return code;
    }
    if (attempt > args.max_restarts) {
      if (args.max_restarts > 0)
        std::fprintf(stderr, "loomrun: restarts spent (%d); exiting with code %d\n",
                     args.max_restarts, code);
      return code;
    }
    if (outcome.stopped)
      std::fprintf(stderr,
                   "loomrun: another node restarted its workers; restarting these in attempt %d "
                   "(%d of %d)\n",
                   attempt, attempt, args.max_restarts);
    else
      std::fprintf(stderr, "loomrun: restarting the workers (%d of %d)\n", attempt,
                   args.max_restarts);
  }
}

// Told to stop (SIGINT, SIGTERM, SIGHUP) outside the workers' run: leaves as a stopped run does.
int stopped_at_rendezvous(const RendezvousStopped& e) {
  const int sig = received_signal();
  std::fprintf(stderr, "loomrun: got signal %d; %s at the rendezvous; exiting with code %d\n", sig,
               e.what(), 128 + sig);
  return 128 + sig;
}

// The rendezvous settings loomrun's options give.
RendezvousConfig rendezvous_config(const Args& args) {
  RendezvousConfig config;
  config.run_id = args.standalone ? "standalone-" + random_hex(8) : args.rdzv_id;
  config.min_nodes = args.min_nodes;
  config.max_nodes = args.max_nodes;
  config.endpoint_host = args.rdzv_host;
  config.endpoint_port = args.rdzv_port;
  config.local_addr = args.local_addr;
  config.nproc = args.nproc_per_node;
  config.join_timeout = args.join_timeout;
  config.last_call_timeout = args.last_call_timeout;
  config.keep_alive_timeout = args.keep_alive_timeout;
  config.read_timeout = args.read_timeout;
  config.exit_barrier_timeout = args.exit_barrier_timeout;
  config.poll_interval = std::min(args.monitor_interval, std::chrono::milliseconds(100));
  config.stop_requested = [] { return received_signal() != 0; };
  return config;
}

int run_dynamic(const Args& args, const std::vector<std::string>& base_env) {
  const RendezvousConfig config = rendezvous_config(args);
  std::unique_ptr<Rendezvous> rdzv;
  try {
    rdzv = std::make_unique<Rendezvous>(config);
  } catch (const RendezvousStopped& e) {
    return stopped_at_rendezvous(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loomrun: %s\n", e.what());
    return 1;
  }
  log_launch(args, config.run_id, fmt::format("{}:{}", rdzv->store_endpoint(), rdzv->store_port()));

  int exit_code = 1;  // the code to leave with once restarts are spent
  for (;;) {
    Round round;
    try {
      round = rdzv->next_round(args.max_restarts);
    } catch (const RendezvousStopped& e) {
      return stopped_at_rendezvous(e);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loomrun: %s; exiting with code %d\n", e.what(), exit_code);
      return exit_code;
    }
    // Group rank 0 hosts the workers' store of this round, on the address the others reach.
    std::unique_ptr<loom::StoreServer> worker_store;
    Placement place;
    if (round.group_rank == 0) {
      try {
        worker_store = std::make_unique<loom::StoreServer>(rdzv->local_addr(), 0);
        place.master_addr = rdzv->local_addr();
        place.master_port = worker_store->port();
        rdzv->publish_master(round, place.master_addr, place.master_port);
      } catch (const std::exception& e) {
        rdzv->record_failure(round, fmt::format("node {} cannot host the workers' store: {}",
                                                round.group_rank, e.what()));
        continue;
      }
    } else {
      std::tie(place.master_addr, place.master_port) = rdzv->master(round);
      if (place.master_port == 0) {
        rdzv->record_failure(round, "the workers' store was never published");
        continue;
      }
    }
    place.group_rank = round.group_rank;
    place.group_world_size = round.group_world_size();
    place.first_rank = round.first_rank();
    place.world_size = round.world_size();
    place.restart_count = round.restart_count;
    place.run_id = config.run_id;
    log_round(args, place);

    RoundEnd end = RoundEnd::running;
    auto next_poll = std::chrono::steady_clock::now();
    const Outcome outcome = run_workers(
        args.command, worker_specs(args, place, base_env), args.grace_s, args.prefix,
        [&] {
          const auto now = std::chrono::steady_clock::now();
          if (now < next_poll) return false;
          next_poll = now + args.monitor_interval;
          end = rdzv->poll(round);
          // Shrinking, the workers go on without a lost node.
          if (end == RoundEnd::failed && args.shrink_on_failure) return false;
          return end != RoundEnd::running;
        },
        args.shrink_on_failure, left_out_lookup(args, place));
    if (outcome.interrupted) {
      rdzv->record_failure(round,
                           fmt::format("node {} ({}) was stopped by signal {}", round.group_rank,
                                       rdzv->local_addr(), received_signal()));
      return outcome.code;
    }
    if (outcome.stopped) {
      std::fprintf(stderr,
                   "loomrun: round %lld ended (%s); the workers were stopped, joining "
                   "the next round\n",
                   static_cast<long long>(round.number),
                   end == RoundEnd::membership   ? "nodes are waiting to join"
                   : end == RoundEnd::store_lost ? "the rendezvous store was lost"
                                                 : "a node failed or was lost");
      continue;
    }
    if (outcome.code == 0) {
      try {
        rdzv->finish(round);
      } catch (const RendezvousStopped& e) {
        return stopped_at_rendezvous(e);
      }
      return 0;
    }
    if (!rdzv->record_failure(
            round, fmt::format("rank {} on node {} ({}) exited with code {}", outcome.failed_rank,
                               round.group_rank, rdzv->local_addr(), outcome.code))) {
      std::fprintf(stderr,
                   "loomrun: round %lld ended (nodes are waiting to join); its workers stopped, "
                   "joining the next round\n",
                   static_cast<long long>(round.number));
      continue;
    }
    exit_code = outcome.code;
    std::fprintf(stderr,
                 "loomrun: round %lld failed; joining the next round (restarts so far: "
                 "%d of %d)\n",
                 static_cast<long long>(round.number), round.restart_count, args.max_restarts);
  }
}

}  // namespace
}  // namespace loomrun

int main(int argc, char** argv) {
  using namespace loomrun;
  const Args args = parse(argc, argv);
  settle_secret(args);
  std::vector<std::string> base_env = inherited_environment(environ, args);
  install_signal_handlers();
  return args.dynamic ? run_dynamic(args, base_env) : run_static(args, base_env);
}
