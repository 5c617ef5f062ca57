#include "transports/cudaipc/cudaipc_transport.hpp"

#include <cuda_runtime_api.h>

#include <cstring>

#include <fmt/format.h>

#include "base/logging.hpp"
#include "device/cuda_util.hpp"
#include "device/device.hpp"
#include "store/keys.hpp"
#include "transports/await_key.hpp"

namespace loom::transport::cudaipc {
using device::error_text;
namespace {}  // namespace

CudaIpcConnection::CudaIpcConnection(shm::ShmConnection& control, std::byte* own_slots,
                                     std::byte* peer_slots, int device)
    : control_(control), own_slots_(own_slots), peer_slots_(peer_slots), device_(device) {}

std::byte* CudaIpcConnection::try_acquire_send_slot(std::size_t /*bytes*/) {
  if (control_.try_acquire_send_slot() == nullptr) return nullptr;
  return peer_slots_ + control_.send_slot_index() * control_.slot_bytes();
}

std::optional<RecvSlot> CudaIpcConnection::try_recv_slot() {
  auto slot = control_.try_recv_slot();
  if (slot) slot->data = own_slots_ + control_.recv_slot_index() * control_.slot_bytes();
  return slot;
}

std::string CudaIpcConnection::describe() const {
  return fmt::format("cudaipc to rank {}: {} device slots of {} KiB on device {}, control {}",
                     peer(), control_.slots(), slot_bytes() >> 10, device_, control_.describe());
}

namespace {
// The control connections get the device FIFO's geometry; their own host slots stay untouched
// (the segment's pages are never faulted in).
base::LinkConfig control_link(const base::LinkConfig& link) {
  base::LinkConfig c = link;
  c.buffer_bytes = link.cuda_buffer_bytes;
  return c;
}
}  // namespace

CudaIpcTransport::CudaIpcTransport(const Setup& setup, std::vector<int> pids,
                                   std::vector<bool> local_peers)
    : store_(setup.store),
      rank_(setup.rank),
      slot_bytes_(setup.link.cuda_slot_bytes()),
      slots_(static_cast<std::size_t>(setup.link.slots)),
      local_peers_(std::move(local_peers)),
      pids_(pids),
      control_(Setup{setup.store, setup.rank, setup.size, setup.token, control_link(setup.link),
                     setup.pacing},
               std::move(pids), store::keys::Space::cudaipc_control) {}

CudaIpcTransport::~CudaIpcTransport() {
  connections_.clear();
  if (device_ < 0) return;
  device::DeviceScope scope(device_);
  for (auto& [peer, p] : opened_) cudaIpcCloseMemHandle(p);
  for (auto& [peer, p] : own_) cudaFree(p);
}

void CudaIpcTransport::prepare(int device) {
  if (device_ >= 0) return;
  device::DeviceScope scope(device);  // the caller's thread: its device comes back
  // All or nothing: a failure part way frees what was made, so a later call can try again.
  std::map<int, std::byte*> own;
  std::vector<std::pair<std::string, Bytes>> handles;
  auto give_back = [&] {
    for (auto& [peer, p] : own) cudaFree(p);
    cudaGetLastError();
  };
  for (std::size_t peer = 0; peer < local_peers_.size(); ++peer) {
    if (!local_peers_[peer]) continue;
    void* fifo = nullptr;
    cudaError_t e = cudaMalloc(&fifo, slot_bytes_ * slots_);
    if (e != cudaSuccess) {
      give_back();
      throw Error(
          fmt::format("cudaipc: rank {}: cudaMalloc of {} bytes of slots for rank {} failed: {}",
                      rank_, slot_bytes_ * slots_, peer, error_text(e)));
    }
    own[static_cast<int>(peer)] = static_cast<std::byte*>(fifo);
    cudaIpcMemHandle_t handle{};
    e = cudaIpcGetMemHandle(&handle, fifo);
    if (e != cudaSuccess) {
      give_back();
      throw Error(fmt::format("cudaipc: rank {}: cudaIpcGetMemHandle for rank {} failed: {}", rank_,
                              peer, error_text(e)));
    }
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(&handle);
    handles.emplace_back(store::keys::cudaipc_handle(rank_, static_cast<int>(peer)),
                         Bytes(bytes, bytes + sizeof(handle)));
  }
  for (const auto& [key, value] : handles) store_.set(key, value);
  own_ = std::move(own);
  device_ = device;
  base::log().debug("cudaipc: rank {}: device {} slots exported to {} local peer(s)", rank_, device,
                    own_.size());
}

Connection& CudaIpcTransport::connect(int peer, const base::Deadline& deadline,
                                      const base::Halt& halt) {
  if (auto it = connections_.find(peer); it != connections_.end()) return *it->second;
  if (device_ < 0 || !local_peers_.at(static_cast<std::size_t>(peer)))
    throw std::logic_error(fmt::format(
        "cudaipc: rank {}: connect to rank {} before prepare() or across hosts", rank_, peer));
  // The control FIFO first: it is where a peer that never makes device calls is noticed.
  auto& control = static_cast<shm::ShmConnection&>(control_.connect(peer, deadline, halt));
  // Published at the peer's first device call (prepare), which a peer that dies first never
  // makes: wait as for a connection, watching the halt and the peer's process.
  const Bytes handle_bytes =
      await_key(store_, store::keys::cudaipc_handle(peer, rank_), deadline, halt, peer,
                pids_.at(static_cast<std::size_t>(peer)),
                fmt::format("cudaipc: rank {} (waiting for rank {}'s device slots)", rank_, peer));
  cudaIpcMemHandle_t handle{};
  if (handle_bytes.size() != sizeof(handle))
    throw PeerError(fmt::format("cudaipc: rank {} with rank {}: malformed IPC handle ({} bytes)",
                                rank_, peer, handle_bytes.size()),
                    peer);
  std::memcpy(&handle, handle_bytes.data(), sizeof(handle));
  void* remote = nullptr;
  const cudaError_t e = cudaIpcOpenMemHandle(&remote, handle, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess)
    throw PeerError(fmt::format("cudaipc: rank {} with rank {}: cannot open the peer's device "
                                "slots: {} (GPUs without peer access? set LOOM_CUDA_IPC=0 to "
                                "stage through host memory)",
                                rank_, peer, error_text(e)),
                    peer);
  opened_[peer] = static_cast<std::byte*>(remote);
  auto conn = std::make_unique<CudaIpcConnection>(control, own_.at(peer),
                                                  static_cast<std::byte*>(remote), device_);
  base::log().debug("connected: {}", conn->describe());
  return *(connections_[peer] = std::move(conn));
}

}  // namespace loom::transport::cudaipc

namespace loom::transport::cudaipc {

std::unique_ptr<IpcTransport> make_transport(const Setup& setup, std::vector<int> pids,
                                             std::vector<bool> local_peers) {
  if (device::count() == 0) return nullptr;
  return std::make_unique<CudaIpcTransport>(setup, std::move(pids), std::move(local_peers));
}

}  // namespace loom::transport::cudaipc
