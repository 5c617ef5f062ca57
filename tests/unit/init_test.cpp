// init() without a launcher that hosts the store: rank 0 hosts it on MASTER_ADDR, guarded by the
// same secret as the data connections.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <map>
#include <optional>
#include <string>

#include "../support/ranks.hpp"
#include "base/abort_record.hpp"
#include "loom/loom.hpp"
#include "loom/store.hpp"
#include "store/keys.hpp"

namespace loom {
namespace {

using namespace std::chrono_literals;

// Sets the launch environment of a one-rank job for the test's lifetime; clears what would
// change init()'s choices (a launcher, a secret, a restart count).
class LaunchEnvironment {
 public:
  explicit LaunchEnvironment(const std::string& master_addr, int port) {
    set("RANK", "0");
    set("WORLD_SIZE", "1");
    set("MASTER_ADDR", master_addr);
    set("MASTER_PORT", std::to_string(port));
    for (const char* name : {"LOOM_SECRET", "LOOM_SECRET_FILE", "LOOM_STORE_HOSTED",
                             "LOOM_INIT_METHOD", "LOOM_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT",
                             "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"})
      set(name, std::nullopt);
  }
  ~LaunchEnvironment() {
    for (const auto& [name, value] : saved_)
      value ? ::setenv(name.c_str(), value->c_str(), 1) : ::unsetenv(name.c_str());
  }

 private:
  void set(const std::string& name, const std::optional<std::string>& value) {
    const char* old = std::getenv(name.c_str());
    saved_.emplace(name, old ? std::optional<std::string>(old) : std::nullopt);
    value ? ::setenv(name.c_str(), value->c_str(), 1) : ::unsetenv(name.c_str());
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

// The communicator's own keys: its job token, and the abort record every rank watches.
std::string communicator_key(const std::string& key) {
  return "loom/" + store::keys::generation_prefix("", 1) + "/" + key;
}

TEST(Init, OptionsSecretGuardsTheStoreRankZeroHosts) {
  const int port = testing::free_port();
  LaunchEnvironment env("127.0.0.1", port);
  Options options;
  options.secret = "the job's secret";
  options.timeout = 20s;
  Communicator comm = init(options);

  const std::string token = communicator_key(store::keys::job_token());
  const std::string abort_key = communicator_key(store::keys::abort_record());
  // A client without the secret: TcpStore connects (and authenticates) as it is built.
  auto stranger = [port] {
    return TcpStore("127.0.0.1", static_cast<std::uint16_t>(port), 5s, std::string());
  };
  EXPECT_THROW(stranger().get(token, 1s), StoreError) << "a client without the secret read a key";
  base::AbortRecord forged;
  forged.kind = base::AbortRecord::Kind::aborted;
  forged.cause = "forged";
  EXPECT_THROW(stranger().set(abort_key, forged.encode()), StoreError)
      << "a client without the secret published an abort record";

  TcpStore member("127.0.0.1", static_cast<std::uint16_t>(port), 5s, *options.secret);
  EXPECT_EQ(member.check({token, abort_key}), (std::vector<bool>{true, false}));
  float x = 2;
  comm.all_reduce(&x, &x, 1, DataType::f32, ReduceOp::sum);
  EXPECT_EQ(x, 2);
}

// Two jobs with one secret whose stores took one port meet in one store: their keys must not
// (each would bump the other's generation counters and take its job token). A job the launcher
// names keeps its keys under that name.
TEST(Init, AJobsKeysLieUnderTheNameItsLauncherGives) {
  const int port = testing::free_port();
  LaunchEnvironment env("127.0.0.1", port);
  ::setenv("TORCHELASTIC_RUN_ID", "a", 1);
  Options options;
  options.secret = "one secret for two jobs";
  options.timeout = 20s;
  Communicator comm = init(options);
  ::unsetenv("TORCHELASTIC_RUN_ID");
  TcpStore member("127.0.0.1", static_cast<std::uint16_t>(port), 5s, *options.secret);
  const std::string named =
      "loom/job-a/" + store::keys::generation_prefix("", 1) + "/" + store::keys::job_token();
  EXPECT_EQ(member.check({named, communicator_key(store::keys::job_token())}),
            (std::vector<bool>{true, false}));
}

// 192.0.2.1 (TEST-NET-1) is an address of no host here.
TEST(Init, RankZeroWithoutSecretRefusesToServeOnEveryInterfaceNamingTheAddress) {
  const int port = testing::free_port();
  LaunchEnvironment env("192.0.2.1", port);
  Options options;
  options.timeout = 2s;
  try {
    init(options);
    FAIL() << "init() succeeded with a MASTER_ADDR of another host";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("192.0.2.1:" + std::to_string(port)), std::string::npos) << what;
    EXPECT_NE(what.find("no address of this host"), std::string::npos) << what;
  }
}

TEST(Init, RankZeroWithSecretServesOnEveryInterfaceWhenMasterAddrIsNotThisHosts) {
  const int port = testing::free_port();
  LaunchEnvironment env("192.0.2.1", port);
  Options options;
  options.secret = "the job's secret";
  options.timeout = 3s;
  // init() serves, then cannot reach the store at 192.0.2.1 itself and times out.
  auto attempt = std::async(std::launch::async, [&] { init(options); });
  TcpStore member("127.0.0.1", static_cast<std::uint16_t>(port), 2s, *options.secret);
  EXPECT_EQ(member.check({"absent"}), std::vector<bool>{false});
  EXPECT_THROW(attempt.get(), TimeoutError);
}

// A rank whose own settings are invalid goes on to the store only to tell its peers; where the
// store cannot be reached (rank 0 never came), it still raises its own error, not the store's.
TEST(Init, ARankWithInvalidSettingsRaisesItsOwnErrorWhereTheStoreCannotBeReached) {
  LaunchEnvironment env("127.0.0.1", testing::free_port());
  ::setenv("RANK", "1", 1);  // restored with the rest by env
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("LOOM_SLOTS", "1", 1);
  Options options;
  options.timeout = 2s;
  try {
    init(options);
    ADD_FAILURE() << "init() succeeded with LOOM_SLOTS=1";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("init: rank 1/2: configuration: LOOM_SLOTS='1'"), std::string::npos)
        << what;
  } catch (const Error& e) {
    ADD_FAILURE() << "the store's error instead of the settings': " << e.what();
  }
  ::unsetenv("LOOM_SLOTS");
}

}  // namespace
}  // namespace loom
