// Shared-memory transport for ranks on one host: one POSIX segment per pair of ranks, created
// by the lower rank on first use and unlinked as soon as the higher rank has mapped it.
//
// A segment's name ends in 128 random bits that only the store tells the peer, so no other
// user can take the name first; the opener maps only a segment of its own user. The creator
// holds a shared flock(2) on the segment while it lives: a named segment that nobody holds is
// left over from processes that died (SIGKILL before the peer mapped it), and every transport
// removes such segments of its user when it starts and when it ends.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>

#include "base/config.hpp"
#include "loom/store.hpp"
#include "store/keys.hpp"
#include "transports/setup.hpp"
#include "transports/shm/shm_connection.hpp"

namespace loom::transport::shm {

class ShmTransport final : public Transport {
 public:
  // pids: every rank's process id (from the topology exchange), to notice dead peers.
  // space: this transport's store keys and segment names, apart from another one's in the same
  // job (shm; cudaipc_control for the FIFO counters of CUDA IPC connections).
  ShmTransport(const Setup& setup, std::vector<int> pids,
               store::keys::Space space = store::keys::Space::shm);
  ~ShmTransport() override;
  TransportKind kind_to(int) const override { return TransportKind::shm; }
  Connection& connect(int peer, const base::Deadline& deadline, const base::Halt& halt) override;
  void abort() override;
  void set_connect_wait(std::function<void(int timeout_ms)> wait) override {
    connect_wait_ = std::move(wait);
  }

 private:
  // A segment this rank created: its name, and the descriptor that holds its lock.
  struct Created {
    std::string name;
    int fd;
  };
  // How far along its slot a small message may be placed (ShmConnection), 0: at its start.
  std::size_t placement_span(std::size_t slots) const;
  void* create_segment(int peer, const std::string& name, std::size_t bytes);
  // fd_out: the open segment, for the connection to reserve its slots' pages with.
  void* open_segment(int peer, const std::string& name, std::size_t bytes, int& fd_out);
  // The name the creator published, once it has; raises when the halt comes, the deadline
  // passes or the creator's process is gone first.
  std::string await_segment_name(int peer, const std::string& key, const base::Deadline& deadline,
                                 const base::Halt& halt);
  // "/loom-<token>[-<space>]-<low>-<high>-": what every name of this pair starts with.
  std::string name_prefix(int peer) const;

  Store& store_;
  int rank_;
  std::uint64_t job_token_;
  base::LinkConfig link_;
  base::Pacing pacing_;
  std::vector<int> pids_;
  store::keys::Space space_;
  std::map<int, std::unique_ptr<ShmConnection>> connections_;
  std::map<int, Created> created_;
  std::function<void(int timeout_ms)> connect_wait_;  // an opener's pause (default: a sleep)
  std::atomic<bool> aborted_{false};                  // after a failure no peer is waited for
};

// Whether `name` (in /dev/shm, without the slash) has the form of a segment name of this build.
bool is_segment_name(std::string_view name);
// Removes this user's segments (of any job) that no live creator holds; returns how many.
int sweep_orphaned_segments();

}  // namespace loom::transport::shm
