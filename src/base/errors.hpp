// What the library does with loom::Error inside: the public error classes are in loom/loom.hpp.
#pragma once

#include <string>

#include "loom/loom.hpp"

namespace loom {

// The same error with `context` in front of its message ("all_reduce #3 (f32 x 8, sum): "),
// unless the message starts with it already.
[[noreturn]] void rethrow_with_context(const Error& error, const std::string& context);

}  // namespace loom
