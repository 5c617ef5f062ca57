// Blocking work that must not hold Python's interpreter lock (another thread may need it).
#pragma once

#include <functional>

namespace loom_torch {

// Runs f with the interpreter lock released when this thread holds it.
void without_gil(const std::function<void()>& f);

}  // namespace loom_torch
