// Finding the RDMA port to use: LOOM_IB_DISABLE=1 turns RDMA off, LOOM_IB_HCA=name[:port]
// chooses a device (else the first device with an active port), LOOM_IB_GID_INDEX the GID of a
// RoCE port (default 0).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace loom::transport::ibverbs {

struct PortChoice {
  std::string device;
  int port = 1;
  bool ethernet = false;  // RoCE: addressed by GID; else InfiniBand, by LID
  int gid_index = 0;
  std::uint16_t lid = 0;
  std::uint32_t active_mtu = 0;  // enum ibv_mtu
  std::string describe() const;  // "mlx5_0 port 1 (InfiniBand, LID 5)"
};

// The port, or nullopt with the reason in `why` (for the INFO log).
std::optional<PortChoice> choose_port(std::string& why);

}  // namespace loom::transport::ibverbs
