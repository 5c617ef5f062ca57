// The handshake of a data socket: the acceptor's challenge, the dialer's hello (job token, both
// ranks, the socket's index) with its response, the acceptor's proof (base/auth.hpp). The
// accepting side runs without blocking, so that several run at once and a silent client costs
// only its short budget, never the time of a genuine peer.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "base/auth.hpp"

namespace loom::transport::tcp {

struct Hello {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint64_t job_token;
  std::int32_t from;
  std::int32_t to;
  std::int32_t index;
  std::int32_t sockets;
};
inline constexpr std::uint32_t kHelloMagic = 0x4c4d4831;  // "LMH1"
inline constexpr std::uint32_t kHelloVersion = 1;

// What an accepted hello must say.
struct HelloExpected {
  std::uint64_t job_token;
  int rank;
  int sockets;
};
// Empty when the hello is one of this job's peers to `expected.rank`, else why not.
std::string check_hello(const Hello& hello, const HelloExpected& expected);

class AcceptingHandshake {
 public:
  using Clock = std::chrono::steady_clock;
  // Owns fd (non-blocking) from here on; the client must have sent its hello by `expires`.
  AcceptingHandshake(int fd, const std::string& secret, Clock::time_point expires);
  ~AcceptingHandshake();
  AcceptingHandshake(const AcceptingHandshake&) = delete;
  AcceptingHandshake& operator=(const AcceptingHandshake&) = delete;

  enum class Step { waiting, done, refused };
  // Moves as far as the socket allows without blocking.
  Step advance(const HelloExpected& expected);
  // What poll() should wait for on fd().
  short events() const;
  int fd() const { return fd_; }
  // Hands the socket over (after Step::done); this object no longer closes it.
  int release();
  const Hello& hello() const { return hello_; }
  const std::string& why() const { return why_; }
  Clock::time_point expires() const { return expires_; }
  Clock::time_point started() const { return started_; }

 private:
  enum class Stage { challenge, hello, proof };
  Step refuse(std::string why);

  int fd_;
  base::Handshake handshake_;
  Stage stage_ = Stage::challenge;
  std::vector<std::uint8_t> out_;
  std::size_t sent_ = 0;
  std::vector<std::uint8_t> in_;
  std::size_t received_ = 0;
  Hello hello_{};
  std::string why_;
  Clock::time_point started_;
  Clock::time_point expires_;
};

}  // namespace loom::transport::tcp
