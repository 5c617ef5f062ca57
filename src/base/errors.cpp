#include "base/errors.hpp"

namespace loom {

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::internal:
      return "error";
    case ErrorKind::invalid_argument:
      return "invalid argument";
    case ErrorKind::timeout:
      return "timeout";
    case ErrorKind::peer:
      return "peer error";
    case ErrorKind::mismatch:
      return "collective mismatch";
    case ErrorKind::aborted:
      return "aborted";
    case ErrorKind::store:
      return "store error";
  }
  return "error";
}

void rethrow_with_context(const Error& error, const std::string& context) {
  const std::string what = error.what();
  const std::string full = what.rfind(context, 0) == 0 ? what : context + ": " + what;
  switch (error.kind()) {
    case ErrorKind::invalid_argument:
      throw InvalidArgument(full);
    case ErrorKind::timeout:
      throw TimeoutError(full);
    case ErrorKind::peer:
      throw PeerError(full, static_cast<const PeerError&>(error).peer());
    case ErrorKind::mismatch:
      throw CollectiveMismatch(full, static_cast<const CollectiveMismatch&>(error).detail());
    case ErrorKind::aborted:
      throw Aborted(full);
    case ErrorKind::store:
      throw StoreError(full);
    case ErrorKind::internal:
      break;
  }
  throw Error(full);
}

}  // namespace loom
