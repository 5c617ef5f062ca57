#include "loom/trace.hpp"

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "base/config.hpp"
#include "base/trace_internal.hpp"

namespace loom::trace {
namespace {

struct Tracer {
  std::mutex mu;
  std::vector<Event> events;
  std::map<std::thread::id, int> threads;
  std::string path_pattern;
  std::atomic<bool> on{false};
  int rank = 0, size = 1;
  const std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();

  Tracer() {
    if (auto p = base::env_string("LOOM_TRACE")) path_pattern = *p;
    on = !path_pattern.empty();
  }
  ~Tracer() { write(); }

  std::string path() const {
    std::string p = path_pattern;
    if (auto at = p.find("%r"); at != std::string::npos)
      return p.replace(at, 2, std::to_string(rank));
    if (size <= 1) return p;
    auto dot = p.rfind('.');
    std::string suffix = fmt::format(".rank{}", rank);
    return dot == std::string::npos || dot < p.rfind('/') + 1 ? p + suffix : p.insert(dot, suffix);
  }

  void write() {
    std::lock_guard lock(mu);
    if (path_pattern.empty()) return;
    std::ofstream out(path());
    if (!out) {  // may run at exit, after the logger is gone
      std::fprintf(stderr, "loom: LOOM_TRACE: cannot write %s\n", path().c_str());
      return;
    }
    out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
    out << fmt::format(
        "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":\"rank {}\"}}}}",
        rank, rank);
    for (const Event& e : events) {
      std::string name;
      for (char c : e.name) name += (c == '"' || c == '\\') ? '_' : c;
      out << fmt::format(
          ",\n{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{},"
          "\"tid\":{}}}",
          name, e.category, e.start_us, e.duration_us, rank, e.thread);
    }
    out << "\n]}\n";
  }
};

Tracer& tracer() {
  static Tracer t;
  return t;
}

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               tracer().origin)
      .count();
}

}  // namespace

bool enabled() {
  return tracer().on.load(std::memory_order_relaxed);
}

Scope::Scope(std::string name, const char* category) : category_(category) {
  if (!enabled()) return;
  name_ = std::move(name);
  start_us_ = now_us();
}

Scope::~Scope() {
  if (start_us_ < 0) return;
  const std::int64_t end = now_us();
  Tracer& t = tracer();
  std::lock_guard lock(t.mu);
  auto [it, added] =
      t.threads.emplace(std::this_thread::get_id(), static_cast<int>(t.threads.size()));
  t.events.push_back(Event{std::move(name_), category_, start_us_, end - start_us_, it->second});
}

std::vector<Event> events() {
  std::lock_guard lock(tracer().mu);
  return tracer().events;
}

void flush() {
  tracer().write();
}

}  // namespace loom::trace

namespace loom::base {
void start_trace(const std::string& path) {
  auto& t = trace::tracer();
  std::lock_guard lock(t.mu);
  t.path_pattern = path;
  t.events.clear();
  t.on = !path.empty();
}

void set_trace_rank(int rank, int size) {
  auto& t = trace::tracer();
  std::lock_guard lock(t.mu);
  t.rank = rank;
  t.size = size;
}
}  // namespace loom::base
