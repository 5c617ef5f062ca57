// Raw clients of a StoreServer for the store tests: requests written byte by byte (or held
// back), replies read as they come, and the descriptors this process holds.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "base/auth.hpp"
#include "base/socket_io.hpp"
#include "base/tcp_connect.hpp"
#include "base/wire.hpp"
#include "store/store_protocol.hpp"

namespace loom::store_test {

namespace protocol = store::protocol;

// A TCP connection to the server with nothing read or written yet (-1 when none is made).
inline int connect_raw(std::uint16_t port) {
  std::string error;
  return base::connect_tcp("127.0.0.1", port, base::Deadline(std::chrono::seconds(2)), error);
}

// Whether the server's challenge arrives on fd before the deadline.
inline bool challenged(int fd, const base::Deadline& deadline) {
  std::array<std::uint8_t, base::Challenge::kBytes> raw{};
  return base::read_exact(fd, raw.data(), raw.size(), deadline) == base::IoResult::ok &&
         base::Challenge::decode(raw.data(), raw.size()).has_value();
}

// A connection through the handshake of a server without a secret; -1 when it fails.
inline int open_connection(std::uint16_t port) {
  const int fd = connect_raw(port);
  if (fd < 0) return -1;
  if (!challenged(fd, base::Deadline(std::chrono::seconds(5)))) {
    ::close(fd);
    return -1;
  }
  return fd;  // without a secret the response and the proof are empty
}

inline std::vector<std::uint8_t> framed(const std::vector<std::uint8_t>& body) {
  std::vector<std::uint8_t> out(4 + body.size());
  const auto len = static_cast<std::uint32_t>(body.size());
  std::memcpy(out.data(), &len, 4);
  std::memcpy(out.data() + 4, body.data(), body.size());
  return out;
}

inline std::vector<std::uint8_t> set_request(const std::string& key, const std::string& value) {
  base::WireWriter w;
  w.u8(static_cast<std::uint8_t>(protocol::Op::set));
  w.str(key);
  w.str(value);
  return framed(w.buffer());
}

inline std::vector<std::uint8_t> get_request(const std::string& key, std::uint32_t timeout_ms) {
  base::WireWriter w;
  w.u8(static_cast<std::uint8_t>(protocol::Op::get));
  w.str(key);
  w.u32(timeout_ms);
  return framed(w.buffer());
}

inline std::vector<std::uint8_t> check_request(const std::vector<std::string>& keys) {
  base::WireWriter w;
  w.u8(static_cast<std::uint8_t>(protocol::Op::check));
  w.u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  return framed(w.buffer());
}

inline bool send_bytes(int fd, const std::uint8_t* data, std::size_t n) {
  return base::write_exact(fd, data, n, base::Deadline(std::chrono::seconds(10))) ==
         base::IoResult::ok;
}

// The next reply on fd, or nullopt when none came whole within the timeout.
inline std::optional<protocol::Reply> read_reply(int fd, std::chrono::milliseconds timeout) {
  base::Deadline deadline(timeout);
  std::uint32_t len = 0;
  if (base::read_exact(fd, &len, 4, deadline) != base::IoResult::ok || len == 0 ||
      len > protocol::kMaxMessageBytes)
    return std::nullopt;
  std::vector<std::uint8_t> body(len);
  if (base::read_exact(fd, body.data(), len, deadline) != base::IoResult::ok) return std::nullopt;
  return protocol::parse_reply(body.data(), body.size());
}

// How many sockets this process holds open.
inline int open_sockets() {
  int count = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (dirent* e = ::readdir(dir)) {
    char target[64] = {0};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    if (::readlink(link.c_str(), target, sizeof(target) - 1) > 0 &&
        std::strncmp(target, "socket:", 7) == 0)
      ++count;
  }
  ::closedir(dir);
  return count;
}

}  // namespace loom::store_test
