// Runs a test body in `world` real processes joined over TCP loopback.
//
// The parent forks one child per rank before any thread exists; rank 0 hosts the store on a
// socket the parent bound, so no port can be taken between choosing and listening. Each child
// builds a Communicator and runs the body; gtest failures and exceptions in a child fail the
// test, with that child's output attached.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/loom.hpp"
#include "loom/store.hpp"

namespace loom::testing {

struct RankContext {
  int rank;
  int size;
  std::shared_ptr<Store> store;
};

struct RunOptions {
  std::chrono::seconds timeout{120};
  Options options;
  // Ranks that run the body without building a Communicator (to test a rank that never joins).
  std::vector<int> absent;
  // Ranks the body kills on purpose: death by a signal counts as success for them.
  std::vector<int> may_die;
  // When set, each rank's LOOM_HOST_ID (to place ranks on pretend hosts of one machine), set in
  // its process before the body runs (run_ranks and run_ranks_raw alike).
  std::function<std::string(int rank, int size)> host_id;
};

// Counts this rank among the finished ones (the harness's rank 0 keeps the store up until all
// are), then SIGKILLs it: a rank that dies on purpose.
[[noreturn]] void die_by_sigkill(RankContext& ctx);

void run_ranks(int world, const std::function<void(Communicator&)>& body, RunOptions opts = {});
void run_ranks_raw(int world, const std::function<void(RankContext&)>& body, RunOptions opts = {});

// A port on 127.0.0.1 that nothing listens on now (for a store that init() hosts).
int free_port();

// The job token (16 hex digits) of the first communicator built on this store: its segments in
// /dev/shm are named loom-<token>-...
std::string job_token_of(Store& store);
// The /dev/shm segments of the first communicator built on this store (named after its job token).
std::vector<std::string> segments_of(Store& store);

}  // namespace loom::testing
