#include "base/logging.hpp"

#include <unistd.h>

#include <mutex>
#include <string>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include "base/config.hpp"

namespace loom::base {
namespace {

// LOOM_DEBUG_FILE may contain %h (host name) and %p (pid), so each process writes its own file.
std::string expand_log_path(std::string path) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  for (std::size_t i = 0; (i = path.find('%', i)) != std::string::npos;) {
    if (i + 1 >= path.size()) break;
    std::string with;
    if (path[i + 1] == 'h')
      with = host;
    else if (path[i + 1] == 'p')
      with = std::to_string(getpid());
    else {
      i += 2;
      continue;
    }
    path.replace(i, 2, with);
    i += with.size();
  }
  return path;
}

spdlog::level::level_enum level_from_env() {
  auto v = env_string("LOOM_DEBUG");
  if (!v) return spdlog::level::warn;
  std::string s = *v;
  for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (s == "TRACE") return spdlog::level::trace;
  if (s == "DEBUG") return spdlog::level::debug;
  if (s == "INFO") return spdlog::level::info;
  if (s == "ERROR") return spdlog::level::err;
  if (s == "OFF") return spdlog::level::off;
  return spdlog::level::warn;
}

std::shared_ptr<spdlog::logger> make_logger() {
  std::shared_ptr<spdlog::logger> logger;
  if (auto path = env_string("LOOM_DEBUG_FILE")) {
    try {
      logger = std::make_shared<spdlog::logger>(
          "loom", std::make_shared<spdlog::sinks::basic_file_sink_mt>(expand_log_path(*path)));
    } catch (const spdlog::spdlog_ex&) {
      logger.reset();  // unwritable path: fall back to stderr rather than fail the job
    }
  }
  if (!logger)
    logger =
        std::make_shared<spdlog::logger>("loom", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_level(level_from_env());
  logger->set_pattern("[%H:%M:%S.%e] loom %l: %v");
  logger->flush_on(spdlog::level::info);
  return logger;
}

std::shared_ptr<spdlog::logger>& logger_slot() {
  static std::shared_ptr<spdlog::logger> logger = make_logger();
  return logger;
}

}  // namespace

spdlog::logger& log() {
  return *logger_slot();
}

void set_log_rank(int rank, int size) {
  logger_slot()->set_pattern(fmt::format("[%H:%M:%S.%e] loom rank {}/{} %l: %v", rank, size));
}

}  // namespace loom::base
