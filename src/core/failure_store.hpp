// The abort record in the store: the first rank to know of a failure publishes it, the others
// read it.
#pragma once

#include <optional>

#include "base/abort_record.hpp"
#include "loom/store.hpp"

namespace loom::core {

// Publishes `mine` unless a record stands already; returns the one that stands. Raises
// StoreError or TimeoutError when the store cannot be reached.
base::AbortRecord publish_abort(Store& store, const base::AbortRecord& mine);
// The record, if one has been published.
std::optional<base::AbortRecord> read_abort(Store& store);

}  // namespace loom::core
