// What loomrun gives its workers: torchrun's environment and Loom's, the job secret, and
// torchrun's log lines about the launch and each round.
#pragma once

#include <string>
#include <vector>

#include "args.hpp"
#include "supervisor.hpp"

namespace loomrun {

// Where this node's workers stand in one round of the job.
struct Placement {
  int group_rank = 0, group_world_size = 1;
  int first_rank = 0, world_size = 1;
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  std::string run_id;
};

// The job secret: --secret-file, LOOM_SECRET_FILE or LOOM_SECRET; made up on one node; across
// nodes required unless --insecure (exits 2 saying how to give one).
void settle_secret(const Args& args);
// `bytes` random bytes from the kernel, as hex.
std::string random_hex(int bytes);
// loomrun's environment less what a launcher sets per worker; OMP_NUM_THREADS=1 where several
// workers share the node and it is unset, as torchrun does.
std::vector<std::string> inherited_environment(char** environ, const Args& args);
// --cpu-bind cores: local rank `local` of `workers` gets its block of the CPUs `allowed`, in
// order: a run of them when there are more CPUs than workers, else one, shared with its
// neighbours in local rank.
std::vector<int> cpu_share(int local, int workers, const std::vector<int>& allowed);
std::vector<WorkerSpec> worker_specs(const Args& args, const Placement& place,
                                     const std::vector<std::string>& base_env);

// What loomrun calls its worker of `rank` in this attempt (LOOM_WORKER_ID): unique to this
// loomrun, the attempt and the rank.
std::string worker_id(const Placement& place, int rank);
// --on-failure shrink: this node's workers (its `workers` ranks from place's first_rank) that
// the survivors' shrink left out, named in the workers' store at place's MASTER_ADDR:MASTER_PORT
// (a worker on a node where no survivor runs is named only there). Asked once a second on a
// thread of its own, which ends when the last copy of the lookup goes.
LeftOutLookup left_out_in_store(const Placement& place, int workers);

// torchrun's "Starting elastic_operator with launch configs" and "Rendezvous complete" lines.
void log_launch(const Args& args, const std::string& run_id, const std::string& endpoint);
void log_round(const Args& args, const Placement& place);

}  // namespace loomrun
