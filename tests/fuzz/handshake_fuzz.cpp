// libFuzzer: what an unauthenticated peer controls in the handshake (the challenge a client
// reads, the response a server reads, the abort record a monitor reads). Never a crash, and a
// server never accepts a response without the secret.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/abort_record.hpp"
#include "base/auth.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace loom::base;
  if (auto challenge = Challenge::decode(data, size)) {
    Handshake client("loom-data", "secret");
    auto reply = client.respond(*challenge, "context");
    client.verify_proof(data, size, "context");
    (void)reply;
  }
  Handshake server("loom-data", "secret");
  server.challenge();  // a fresh nonce the input cannot know
  std::string why;
  const std::string_view context(reinterpret_cast<const char*>(data), size / 2);
  if (server.check_response(data, size, context, &why)) __builtin_trap();  // forged
  Handshake open_server("loom-store", "");
  open_server.challenge();
  open_server.check_response(data, size, {}, &why);
  AbortRecord::decode(loom::Bytes(data, data + size));
  return 0;
}
