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

void mark_abort_seen(Store& store, int rank) {
  store.set(store::keys::abort_seen(rank), std::string("1"));
}

std::vector<int> unaware_of_abort(Store& store, int size, int self,
                                  const base::AbortRecord& record) {
  std::vector<int> ranks;
  std::vector<std::string> keys;  // for each rank: it read the record, it left before
  for (int r = 0; r < size; ++r) {
    if (r == self || r == record.failed) continue;
    ranks.push_back(r);
    keys.push_back(store::keys::abort_seen(r));
    keys.push_back(store::keys::departed(r));
  }
  if (keys.empty()) return {};
  const std::vector<bool> present = store.check(keys);
  std::vector<int> unaware;
  for (std::size_t i = 0; i < ranks.size(); ++i)
    if (!present[2 * i] && !present[2 * i + 1]) unaware.push_back(ranks[i]);
  return unaware;
}

}  // namespace loom::core
