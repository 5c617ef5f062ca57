#include "base/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "base/config.hpp"
#include "base/logging.hpp"
#include "loom/loom.hpp"

namespace loom::base {
namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'A', 'U', 'T', '1'};

std::string_view bytes_of(const Nonce& n) {
  return {reinterpret_cast<const char*>(n.data()), n.size()};
}

}  // namespace

std::string read_secret_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw InvalidArgument(
        fmt::format("LOOM_SECRET_FILE: cannot read {}: {}", path, std::strerror(errno)));
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  std::string s;
  char buf[4096];
  for (ssize_t n; stat_ok && (n = ::read(fd, buf, sizeof(buf))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    s.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (!stat_ok) throw InvalidArgument(fmt::format("LOOM_SECRET_FILE: cannot stat {}", path));
  // As ssh does with private keys: a secret others can read is no secret, so it is refused.
  if ((st.st_mode & 077) != 0)
    throw InvalidArgument(
        fmt::format("LOOM_SECRET_FILE: {} has mode {:04o}, which lets group or others read it; "
                    "refusing it (chmod 600 {})",
                    path, st.st_mode & 07777, path));
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  if (s.empty()) throw InvalidArgument(fmt::format("LOOM_SECRET_FILE: {} is empty", path));
  return s;
}

const std::string& job_secret() {
  static const std::string secret = [] {
    if (auto s = env_string("LOOM_SECRET"); s && !s->empty()) return *s;
    if (auto path = env_string("LOOM_SECRET_FILE"); path && !path->empty())
      return read_secret_file(*path);
    log().warn(
        "no LOOM_SECRET or LOOM_SECRET_FILE: store and data connections are not authenticated");
    return std::string();
  }();
  return secret;
}

Nonce random_nonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1)
    throw Error("authentication: the system random generator failed");
  return n;
}

Mac hmac(std::string_view secret, std::initializer_list<std::string_view> parts) {
  std::string message;
  for (auto p : parts) {
    // Length-prefixed, so that no two different part lists give the same message.
    const auto n = static_cast<std::uint32_t>(p.size());
    message.append(reinterpret_cast<const char*>(&n), 4);
    message.append(p);
  }
  Mac out{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(),
           &length) == nullptr ||
      length != out.size())
    throw Error("authentication: HMAC-SHA256 failed");
  return out;
}

bool macs_equal(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::array<std::uint8_t, Challenge::kBytes> Challenge::encode() const {
  std::array<std::uint8_t, kBytes> out{};
  std::memcpy(out.data(), kMagic, 8);
  out[8] = secret_required ? 1 : 0;
  std::memcpy(out.data() + 9, nonce.data(), nonce.size());
  return out;
}

std::optional<Challenge> Challenge::decode(const std::uint8_t* bytes, std::size_t size) {
  if (size != kBytes || std::memcmp(bytes, kMagic, 8) != 0 || bytes[8] > 1) return std::nullopt;
  Challenge c;
  c.secret_required = bytes[8] == 1;
  std::memcpy(c.nonce.data(), bytes + 9, c.nonce.size());
  return c;
}

Handshake::Reply Handshake::respond(const Challenge& challenge, std::string_view context) {
  if (challenge.secret_required && !has_secret())
    return {{}, "the peer requires a job secret and this process has none (set LOOM_SECRET)"};
  if (!challenge.secret_required && has_secret())
    return {{}, "the peer does not authenticate but this process has a job secret: refusing it"};
  if (!has_secret()) return {};
  server_nonce_ = challenge.nonce;
  client_nonce_ = random_nonce();
  const Mac mac =
      hmac(secret_, {kind_, "client", bytes_of(server_nonce_), bytes_of(client_nonce_), context});
  Reply reply;
  reply.bytes.assign(client_nonce_.begin(), client_nonce_.end());
  reply.bytes.insert(reply.bytes.end(), mac.begin(), mac.end());
  return reply;
}

bool Handshake::verify_proof(const std::uint8_t* bytes, std::size_t size,
                             std::string_view context) const {
  if (!has_secret()) return size == 0;
  if (size != sizeof(Mac)) return false;
  Mac got;
  std::memcpy(got.data(), bytes, got.size());
  return macs_equal(got, hmac(secret_, {kind_, "server", bytes_of(client_nonce_),
                                        bytes_of(server_nonce_), context}));
}

Challenge Handshake::challenge() {
  Challenge c;
  c.secret_required = has_secret();
  if (has_secret()) server_nonce_ = c.nonce = random_nonce();
  return c;
}

std::optional<std::vector<std::uint8_t>> Handshake::check_response(const std::uint8_t* bytes,
                                                                   std::size_t size,
                                                                   std::string_view context,
                                                                   std::string* why) {
  if (!has_secret()) return std::vector<std::uint8_t>{};
  if (size != response_bytes()) {
    *why = fmt::format("authentication response of {} bytes, expected {}", size, response_bytes());
    return std::nullopt;
  }
  std::memcpy(client_nonce_.data(), bytes, client_nonce_.size());
  Mac got;
  std::memcpy(got.data(), bytes + 32, got.size());
  if (client_nonce_ == server_nonce_ ||  // a reflected challenge
      !macs_equal(got, hmac(secret_, {kind_, "client", bytes_of(server_nonce_),
                                      bytes_of(client_nonce_), context}))) {
    *why = "wrong job secret (HMAC mismatch)";
    return std::nullopt;
  }
  const Mac proof =
      hmac(secret_, {kind_, "server", bytes_of(client_nonce_), bytes_of(server_nonce_), context});
  return std::vector<std::uint8_t>(proof.begin(), proof.end());
}

}  // namespace loom::base
