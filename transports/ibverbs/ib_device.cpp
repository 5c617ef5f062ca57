#include "transports/ibverbs/ib_device.hpp"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "base/config.hpp"

namespace loom::transport::ibverbs {

std::string PortChoice::describe() const {
  return ethernet ? fmt::format("{} port {} (RoCE, GID index {})", device, port, gid_index)
                  : fmt::format("{} port {} (InfiniBand, LID {})", device, port, lid);
}

std::optional<PortChoice> choose_port(std::string& why) {
  if (base::env_string("LOOM_IB_DISABLE").value_or("0") == "1") {
    why = "disabled by LOOM_IB_DISABLE=1";
    return std::nullopt;
  }
  std::string wanted = base::env_string("LOOM_IB_HCA").value_or("");
  int wanted_port = 0;
  if (auto colon = wanted.find(':'); colon != std::string::npos) {
    wanted_port = std::atoi(wanted.c_str() + colon + 1);
    wanted.resize(colon);
  }
  const int gid_index = static_cast<int>(base::env_int("LOOM_IB_GID_INDEX", 0, 255).value_or(0));
  int count = 0;
  std::unique_ptr<ibv_device*, decltype(&ibv_free_device_list)> list(ibv_get_device_list(&count),
                                                                     &ibv_free_device_list);
  if (!list) {
    why = errno == ENOSYS ? "no RDMA device on this host (the kernel has no RDMA support)"
                          : fmt::format("cannot list RDMA devices: {}", std::strerror(errno));
    return std::nullopt;
  }
  if (count == 0) {
    why = "no RDMA device on this host";
    return std::nullopt;
  }
  bool named_found = false;
  for (int d = 0; d < count; ++d) {
    const char* name = ibv_get_device_name(list.get()[d]);
    if (!wanted.empty() && wanted != name) continue;
    named_found = true;
    ibv_context* ctx = ibv_open_device(list.get()[d]);
    if (!ctx) continue;
    ibv_device_attr dev{};
    if (ibv_query_device(ctx, &dev) != 0) {
      ibv_close_device(ctx);
      continue;
    }
    for (int port = 1; port <= dev.phys_port_cnt; ++port) {
      if (wanted_port != 0 && port != wanted_port) continue;
      ibv_port_attr attr{};
      if (ibv_query_port(ctx, static_cast<std::uint8_t>(port), &attr) != 0 ||
          attr.state != IBV_PORT_ACTIVE)
        continue;
      PortChoice c;
      c.device = name;
      c.port = port;
      c.ethernet = attr.link_layer == IBV_LINK_LAYER_ETHERNET;
      c.gid_index = gid_index;
      c.lid = attr.lid;
      c.active_mtu = attr.active_mtu;
      if (c.ethernet) {
        ibv_gid gid{};
        if (ibv_query_gid(ctx, static_cast<std::uint8_t>(port), gid_index, &gid) != 0 ||
            (gid.global.subnet_prefix == 0 && gid.global.interface_id == 0))
          continue;  // no usable GID at this index
      } else if (c.lid == 0) {
        continue;  // no subnet manager has assigned a LID yet
      }
      ibv_close_device(ctx);
      return c;
    }
    ibv_close_device(ctx);
  }
  why = !wanted.empty() && !named_found
            ? fmt::format("LOOM_IB_HCA names {}, which is not among the {} RDMA device(s)", wanted,
                          count)
        : wanted_port != 0
            ? fmt::format("port {} of {} is not active", wanted_port,
                          wanted.empty() ? "any device" : wanted)
            : fmt::format(
                  "no active port on {}",
                  wanted.empty() ? fmt::format("any of the {} RDMA device(s)", count) : wanted);
  return std::nullopt;
}

}  // namespace loom::transport::ibverbs
