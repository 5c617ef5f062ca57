#include "core/failure_store.hpp"

#include "store/keys.hpp"

namespace loom::core {

using base::AbortRecord;

AbortRecord publish_abort(Store& store, const AbortRecord& mine) {
  const Bytes standing = store.compare_set(store::keys::abort_record(), {}, mine.encode());
  if (auto record = AbortRecord::decode(standing)) return *record;
  return mine;  // a malformed record (not written by Loom): ours is the better account
}

std::optional<AbortRecord> read_abort(Store& store) {
  if (!store.check({store::keys::abort_record()}).front()) return std::nullopt;
  return AbortRecord::decode(store.get(store::keys::abort_record(), std::chrono::seconds(5)));
}

}  // namespace loom::core
