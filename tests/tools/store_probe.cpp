// store_probe: one request to a Loom store, as a client with the environment's secret (if any),
// for the launch tests. Exit code: 0 done, 3 refused (StoreError), 4 timed out, 2 usage, 1 other.
//   store_probe HOST PORT put KEY                 set the key to "probe"
//   store_probe HOST PORT get KEY                 print the key's value
//   store_probe HOST PORT has-abort ATTEMPT       print whether attempt ATTEMPT's first
//                                                 communicator has an abort record
//   store_probe HOST PORT abort ATTEMPT           publish one there
#include <chrono>
#include <cstdio>
#include <string>

#include "base/abort_record.hpp"
#include "loom/loom.hpp"
#include "loom/store.hpp"
#include "store/keys.hpp"

namespace {

// The key `key` of the first communicator (prefix "loom") of restart attempt `attempt`.
std::string communicator_key(const std::string& attempt, const std::string& key) {
  return "loom/" + loom::store::keys::generation_prefix("attempt" + attempt, 1) + "/" + key;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  if (argc != 5) {
    std::fprintf(stderr, "usage: store_probe HOST PORT put|get KEY, has-abort|abort ATTEMPT\n");
    return 2;
  }
  const std::string host = argv[1], op = argv[3], arg = argv[4];
  const auto port = static_cast<std::uint16_t>(std::stoi(argv[2]));
  try {
    loom::TcpStore store(host, port, 5s);
    if (op == "put") {
      store.set(arg, std::string("probe"));
    } else if (op == "get") {
      const auto value = store.get_string(arg, 2s);
      std::printf("%s\n", value.c_str());
    } else if (op == "has-abort") {
      const bool present =
          store.check({communicator_key(arg, loom::store::keys::abort_record())}).front();
      std::printf("%s\n", present ? "abort record" : "no abort record");
    } else if (op == "abort") {
      loom::base::AbortRecord record;
      record.kind = loom::base::AbortRecord::Kind::aborted;
      record.cause = "published by store_probe";
      store.set(communicator_key(arg, loom::store::keys::abort_record()), record.encode());
    } else {
      std::fprintf(stderr, "store_probe: unknown operation %s\n", op.c_str());
      return 2;
    }
  } catch (const loom::StoreError& e) {
    std::printf("refused: %s\n", e.what());
    return 3;
  } catch (const loom::TimeoutError& e) {
    std::printf("timed out: %s\n", e.what());
    return 4;
  } catch (const std::exception& e) {
    std::printf("failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
