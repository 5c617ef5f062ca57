// loomrun's command line: its own options and torchrun's, in dash and underscore spellings, and
// torchrun's PET_* environment variables as defaults.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace loomrun {

struct Args {
  int nproc_per_node = 1;
  int min_nodes = 1, max_nodes = 1;  // --nnodes N or MIN:MAX
  std::optional<int> node_rank;
  std::string master_addr = "127.0.0.1";
  int master_port = -1;  // -1: pick a free port on a single node, else 29500
  // Static: node ranks given, node 0 hosts the store. Dynamic: nodes join a rendezvous at
  // rdzv_host:rdzv_port, which assigns their ranks and survives the loss of nodes.
  bool dynamic = false;
  std::string rdzv_backend = "static";  // as given; c10d and loom name the dynamic one
  std::string rdzv_host;
  int rdzv_port = 29400;  // torchrun's c10d default
  std::string rdzv_id = "none";
  bool standalone = false;
  std::chrono::milliseconds join_timeout = std::chrono::seconds(600);
  std::chrono::milliseconds last_call_timeout = std::chrono::seconds(30);
  std::chrono::milliseconds keep_alive_timeout = std::chrono::seconds(30);
  std::chrono::milliseconds read_timeout = std::chrono::seconds(30);
  std::chrono::milliseconds exit_barrier_timeout = std::chrono::seconds(300);
  std::string local_addr;
  std::string role = "default";
  double grace_s = 5.0;
  int max_restarts = 0;
  bool shrink_on_failure = false;  // --on-failure shrink: the other workers go on
  std::chrono::milliseconds monitor_interval = std::chrono::milliseconds(100);
  bool prefix = true;
  // --cpu-bind cores: each worker bound to its share of loomrun's CPUs, in blocks of consecutive
  // local ranks (when workers outnumber the CPUs, neighbours in rank share one).
  bool bind_cores = false;
  std::string secret_file;
  bool insecure = false;
  std::vector<std::string> command;

  int nnodes() const { return max_nodes; }  // static launches have min == max
};

// Exits with code 2 and a message naming the option on bad input; 0 after --help.
Args parse(int argc, char** argv);

}  // namespace loomrun
