// The abort record in the store: the first rank to know of a failure publishes it, the others
// read it.
#pragma once

#include <optional>
#include <vector>

#include "base/abort_record.hpp"
#include "loom/store.hpp"

namespace loom::core {

// Publishes `mine` unless a record stands already; returns the one that stands. Raises
// StoreError or TimeoutError when the store cannot be reached.
base::AbortRecord publish_abort(Store& store, const base::AbortRecord& mine);
// The record, if one has been published.
std::optional<base::AbortRecord> read_abort(Store& store);
// Says that `rank` has the record that stands: the rank hosting the store keeps it up for the
// ranks that have not (keep_store_for_survivors).
void mark_abort_seen(Store& store, int rank);
// The ranks of `size`, other than `self` and the record's failed rank, that have not said so
// (nor left on purpose before).
std::vector<int> unaware_of_abort(Store& store, int size, int self,
                                  const base::AbortRecord& record);

}  // namespace loom::core
