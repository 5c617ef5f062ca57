// The library's logger: spdlog, configured from LOOM_DEBUG and LOOM_DEBUG_FILE.
#pragma once

#include <memory>

#include <spdlog/spdlog.h>

namespace loom::base {

spdlog::logger& log();
// Adds the rank to every later line of this process's log.
void set_log_rank(int rank, int size);

}  // namespace loom::base
