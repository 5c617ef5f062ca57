// CUDA IPC transport for ranks on one host whose buffers are on GPUs. Each rank allocates the
// receiving slots of every local peer in its device memory and exports them with
// cudaIpcGetMemHandle; the peer opens them with cudaIpcOpenMemHandle, so the sender's kernel
// writes (or reduces) straight into the receiver's device slot. The FIFO's counters, tags and
// the sleeping protocol are a shared-memory connection's (a segment of their own), whose host
// slots stay untouched: the flags live in host memory that both processes map.
#pragma once

#include <map>
#include <memory>

#include "transports/cudaipc/cudaipc.hpp"
#include "transports/shm/shm_transport.hpp"

namespace loom::transport::cudaipc {

class CudaIpcConnection final : public Connection {
 public:
  CudaIpcConnection(shm::ShmConnection& control, std::byte* own_slots, std::byte* peer_slots,
                    int device);
  int peer() const override { return control_.peer(); }
  std::size_t slot_bytes() const override { return control_.slot_bytes(); }
  using Connection::try_acquire_send_slot;
  std::byte* try_acquire_send_slot(std::size_t bytes) override;
  void post_send(std::size_t bytes, Tag tag) override { control_.post_send(bytes, tag); }
  std::optional<RecvSlot> try_recv_slot() override;
  void release_recv_slot() override { control_.release_recv_slot(); }
  bool progress() override { return control_.progress(); }
  bool send_idle() const override { return control_.send_idle(); }
  void add_poll_fds(std::vector<pollfd>& fds) const override { control_.add_poll_fds(fds); }
  void prepare_sleep() override { control_.prepare_sleep(); }
  void sleep(int timeout_ms) override { control_.sleep(timeout_ms); }
  void wake_sleep() override { control_.wake_sleep(); }
  bool sleep_wakeable() const override { return control_.sleep_wakeable(); }
  std::string describe() const override;
  std::vector<Region> host_regions() const override { return {}; }

 private:
  shm::ShmConnection& control_;
  std::byte* own_slots_;   // this rank's device memory: the peer writes here
  std::byte* peer_slots_;  // the peer's, opened through IPC
  int device_;
};

class CudaIpcTransport final : public IpcTransport {
 public:
  // local_peers[r]: rank r is on this host (the only ones this transport serves).
  CudaIpcTransport(const Setup& setup, std::vector<int> pids, std::vector<bool> local_peers);
  ~CudaIpcTransport() override;
  TransportKind kind_to(int) const override { return TransportKind::cudaipc; }
  void prepare(int device) override;
  Connection& connect(int peer, const base::Deadline& deadline, const base::Halt& halt) override;
  void abort() override { control_.abort(); }
  void set_connect_wait(std::function<void(int timeout_ms)> wait) override {
    control_.set_connect_wait(std::move(wait));
  }

 private:
  Store& store_;
  int rank_;
  std::size_t slot_bytes_;
  std::size_t slots_;
  std::vector<bool> local_peers_;
  std::vector<int> pids_;  // by rank: whose end a wait for a peer's handle watches
  int device_ = -1;
  shm::ShmTransport control_;
  std::map<int, std::byte*> own_;     // receiving slots by peer (cudaMalloc)
  std::map<int, std::byte*> opened_;  // the peers' receiving slots (cudaIpcOpenMemHandle)
  std::map<int, std::unique_ptr<CudaIpcConnection>> connections_;
};

}  // namespace loom::transport::cudaipc
