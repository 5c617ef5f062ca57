#include "loom/util.hpp"

#include "base/logging.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

namespace loom {

void convert(const void* in, DataType in_type, void* out, DataType out_type, std::size_t count,
             float scale) {
  kernels::convert(out, out_type, in, in_type, count, scale);
}

void log(LogLevel level, std::string_view message) {
  switch (level) {
    case LogLevel::debug:
      return base::log().debug("{}", message);
    case LogLevel::info:
      return base::log().info("{}", message);
    case LogLevel::warn:
      return base::log().warn("{}", message);
    case LogLevel::error:
      return base::log().error("{}", message);
  }
}

}  // namespace loom
