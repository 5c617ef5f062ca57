// Shared-memory transport for ranks on one host: one POSIX segment per pair of ranks, created
// by the lower rank on first use and unlinked as soon as the higher rank has mapped it.
#pragma once

#include <map>
#include <memory>

#include "core/config.hpp"
#include "loom/store.hpp"
#include "transports/shm/shm_connection.hpp"

namespace loom::transport::shm {

class ShmTransport final : public Transport {
 public:
  // pids: every rank's process id (from the topology exchange), to notice dead peers.
  // purpose: names this transport's segments and store keys apart from another one's in the
  // same job ("shm"; "cudaipc" for the control FIFOs of CUDA IPC connections).
  ShmTransport(Store& store, int rank, std::uint64_t job_token, const core::Config& config,
               std::vector<int> pids, std::string purpose = "shm");
  ~ShmTransport() override;
  std::string_view name() const override { return "shm"; }
  Connection& connect(int peer, const core::Deadline& deadline) override;
  void abort() override;

 private:
  Store& store_;
  int rank_;
  std::uint64_t job_token_;
  core::Config config_;
  std::vector<int> pids_;
  std::string purpose_;
  std::map<int, std::unique_ptr<ShmConnection>> connections_;
  std::string segment_name(int peer) const;
};

}  // namespace loom::transport::shm
