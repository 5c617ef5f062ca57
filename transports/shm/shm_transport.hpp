// Shared-memory transport for ranks on one host: one POSIX segment per pair of ranks, created
// by the lower rank on first use and unlinked as soon as the higher rank has mapped it.
#pragma once

#include <map>
#include <memory>

#include "base/config.hpp"
#include "loom/store.hpp"
#include "store/keys.hpp"
#include "transports/shm/shm_connection.hpp"

namespace loom::transport::shm {

class ShmTransport final : public Transport {
 public:
  // pids: every rank's process id (from the topology exchange), to notice dead peers.
  // space: this transport's store keys and segment names, apart from another one's in the same
  // job (shm; cudaipc_control for the FIFO counters of CUDA IPC connections).
  ShmTransport(Store& store, int rank, std::uint64_t job_token, const base::Config& config,
               std::vector<int> pids, store::keys::Space space = store::keys::Space::shm);
  ~ShmTransport() override;
  std::string_view name() const override { return "shm"; }
  Connection& connect(int peer, const base::Deadline& deadline, const base::Halt& halt) override;
  void abort() override;

 private:
  Store& store_;
  int rank_;
  std::uint64_t job_token_;
  base::Config config_;
  std::vector<int> pids_;
  store::keys::Space space_;
  std::map<int, std::unique_ptr<ShmConnection>> connections_;
  std::string segment_name(int peer) const;
  // The creator's segment, once it has published it; raises when the halt comes, the deadline
  // passes or the creator's process is gone first.
  void await_segment(int peer, const std::string& key, const base::Deadline& deadline,
                     const base::Halt& halt);
};

}  // namespace loom::transport::shm
