// Helpers that libraries built on Loom (loom::ddp) share with it: element conversion and the log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loom/export.hpp"
#include "loom/loom.hpp"

namespace loom {

// out[i] = in[i] * scale, between f32 and f16/bf16 (rounded to nearest even) or f32 to f32.
// Other pairs raise InvalidArgument. out must not overlap in.
LOOM_API void convert(const void* in, DataType in_type, void* out, DataType out_type,
                      std::size_t count, float scale = 1.0f);

enum class LogLevel : std::uint8_t { debug, info, warn, error };
// One line in Loom's log (LOOM_DEBUG sets the level shown, LOOM_DEBUG_FILE where it goes).
LOOM_API void log(LogLevel level, std::string_view message);

}  // namespace loom
