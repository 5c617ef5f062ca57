// Chrome / Perfetto trace events: with LOOM_TRACE=path.json each process writes the spans it
// recorded (every collective Loom runs, and whatever the program marks with trace::Scope) to
// that file at exit, or at flush(). "%r" in the path becomes the rank; without it, ranks of a
// world larger than one write path.rank<r>.json. Open the files in chrome://tracing or Perfetto.
#pragma once

#include "loom/export.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace loom::trace {

// Whether LOOM_TRACE is set (read once).
LOOM_API bool enabled();

// Records a span from construction to destruction, on the calling thread, when tracing is on.
class LOOM_API Scope {
 public:
  explicit Scope(std::string name, const char* category = "loom");
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  std::string name_;
  const char* category_;
  std::int64_t start_us_ = -1;
};

// A recorded span, in microseconds since this process started tracing.
struct LOOM_API Event {
  std::string name;
  std::string category;
  std::int64_t start_us;
  std::int64_t duration_us;
  int thread;  // 0 = the first thread that recorded, 1 = the next, ...
};
// Every span recorded so far (for tests and tools).
LOOM_API std::vector<Event> events();
// Writes the file now (it is also written at exit).
LOOM_API void flush();

}  // namespace loom::trace
