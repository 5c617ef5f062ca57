// Why a communicator stopped, as the first rank to know published it in the store: every other
// rank then raises the same kind of error naming the same cause, instead of each reporting only
// the neighbour that closed its connection on it.
#pragma once

#include <optional>
#include <string>

#include "loom/store.hpp"

namespace loom::base {

struct AbortRecord {
  enum class Kind : std::uint8_t { peer_failed = 1, mismatch, timeout, aborted };
  Kind kind = Kind::peer_failed;
  int reporter = -1;  // the rank that published it
  int failed = -1;    // the rank at fault, when known
  std::string cause;  // "rank 6 on host vm is gone: ..." or the mismatch sentence

  Bytes encode() const;
  static std::optional<AbortRecord> decode(const Bytes& bytes);
  // Throws the error this record stands for: PeerError (naming the failed rank), TimeoutError or
  // CollectiveMismatch, with `context` ("all_reduce #3 (...): rank 2") in front.
  [[noreturn]] void raise(const std::string& context) const;
};

}  // namespace loom::base
