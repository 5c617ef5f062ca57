// Job-secret authentication of store and data connections: an HMAC-SHA256 challenge-response
// in both directions, on fresh random nonces, so a recorded handshake cannot be replayed.
//
//   server -> client   Challenge  magic, version, whether a secret is required, server nonce
//   client -> server   Response   client nonce, HMAC(secret, role | server nonce | client nonce |
//   context) server -> client   Proof      HMAC(secret, role' | client nonce | server nonce |
//   context)
//
// Every message has a fixed size and is checked whole before anything else is read. Without a
// secret on both sides the challenge says so and no MACs are exchanged; a side with a secret
// refuses a peer without one, and the other way round.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::base {

using Nonce = std::array<std::uint8_t, 32>;
using Mac = std::array<std::uint8_t, 32>;

// The job secret: LOOM_SECRET, else the contents of the file named by LOOM_SECRET_FILE (a
// trailing newline dropped); empty when neither is set (then a one-line warning, once).
const std::string& job_secret();
// The secret in a file, a trailing newline dropped. Raises InvalidArgument naming the file when
// it cannot be read, is empty, or is readable by group or others (its mode is named too).
std::string read_secret_file(const std::string& path);

Nonce random_nonce();
// HMAC-SHA256 of the concatenation of the parts.
Mac hmac(std::string_view secret, std::initializer_list<std::string_view> parts);
bool macs_equal(const Mac& a, const Mac& b);  // in constant time

struct Challenge {
  static constexpr std::size_t kBytes = 8 + 1 + 32;
  bool secret_required = false;
  Nonce nonce{};
  std::array<std::uint8_t, kBytes> encode() const;
  // nullopt when the bytes are not a challenge of this protocol version.
  static std::optional<Challenge> decode(const std::uint8_t* bytes, std::size_t size);
};

// What each side of one connection computes. `kind` separates the store from data connections,
// `context` binds the MACs to that connection's own data (for data connections, the hello).
class Handshake {
 public:
  Handshake(std::string_view kind, std::string secret) : kind_(kind), secret_(std::move(secret)) {}
  bool has_secret() const { return !secret_.empty(); }

  // Client: given the server's challenge, the response to send (empty when no secret is used),
  // or an error naming why this client cannot answer.
  struct Reply {
    std::vector<std::uint8_t> bytes;
    std::string error;
  };
  Reply respond(const Challenge& challenge, std::string_view context);
  // Client: whether the server's proof is right (true when no secret is used).
  bool verify_proof(const std::uint8_t* bytes, std::size_t size, std::string_view context) const;

  // Server: a fresh challenge, then the check of the client's response; on success, the proof
  // to send back (empty when no secret is used). Returns nullopt (and sets *why) on failure.
  Challenge challenge();
  std::optional<std::vector<std::uint8_t>> check_response(const std::uint8_t* bytes,
                                                          std::size_t size,
                                                          std::string_view context,
                                                          std::string* why);
  // Response size the server expects: 64 bytes with a secret, 0 without.
  std::size_t response_bytes() const { return has_secret() ? 64 : 0; }
  std::size_t proof_bytes() const { return has_secret() ? 32 : 0; }

 private:
  std::string kind_;
  std::string secret_;
  Nonce server_nonce_{};
  Nonce client_nonce_{};
};

}  // namespace loom::base
