// Which launcher started this process, and what it says about the job: loomrun, torchrun-style
// variables, Open MPI's mpirun, or Slurm's srun. init() builds the communicator from this.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::core {

struct LaunchEnv {
  std::string launcher;  // "loomrun", "env" (torchrun-style), "openmpi", "slurm"
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = -1;  // the node's index, where the launcher says (-1: it does not)
  // The rendezvous: "env://" with master_addr:master_port, or a tcp:// or file:// URL.
  std::string init_method = "env://";
  std::string master_addr;
  int master_port = 0;
  // The rank 0 process hosts the store unless the launcher does (loomrun).
  bool store_hosted_by_launcher = false;
  // The job as the launcher names it ("" where it names none): TORCHELASTIC_RUN_ID (loomrun's
  // or torchrun's --rdzv-id) unless "none", or "slurm-<job>.<step>". init() keeps the job's
  // keys under it, so that two jobs that meet in one store never touch each other's keys.
  std::string job;
  std::string describe() const;  // for the INFO line
};

using EnvLookup = std::function<std::optional<std::string>(const char*)>;

// Reads the environment through `lookup` (the process environment by default). The first that
// applies wins: RANK and WORLD_SIZE (loomrun, torchrun, by hand); Open MPI (OMPI_COMM_WORLD_*:
// an mpirun inside a Slurm allocation still sees the allocation's SLURM_* variables); Slurm
// (SLURM_PROCID, SLURM_NTASKS). Throws InvalidArgument naming what is missing or malformed.
LaunchEnv detect_launch_env(const EnvLookup& lookup);
LaunchEnv detect_launch_env();

// Slurm's host list syntax: "node[1-3,7],gpu[01-02]" -> node1 node2 node3 node7 gpu01 gpu02;
// several bracket groups in one name expand as a product; zero padding is kept.
std::vector<std::string> expand_slurm_hostlist(std::string_view list);

// The store port of a Slurm job step without MASTER_PORT: a hash of the job id, the step id and
// the user, so that neighbouring jobs and steps (and two users' jobs of one number) do not meet
// on one port; within [kSlurmPortLow, kSlurmPortHigh], below Linux's ephemeral ports (32768 and
// up), which outgoing connections take.
constexpr int kSlurmPortLow = 10000, kSlurmPortHigh = 32767;
int slurm_store_port(std::string_view job_id, std::string_view step_id, unsigned uid);

// Slurm's per-node task counts, "2(x3),1" -> 2 2 2 1.
std::vector<int> expand_slurm_tasks_per_node(std::string_view list);

}  // namespace loom::core
