// The settings line each rank sends at init, and how a disagreement between ranks is named.
#include "core/settings_agreement.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "base/stable_hash.hpp"
#include "loom/store.hpp"

namespace loom::core {
namespace {

TEST(SettingsAgreement, EqualLinesAgreeAndEachFieldThatDiffersIsNamed) {
  base::Config a;
  const std::string line = settings_line(a);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(settings_disagreement({line, line, line}), "");
  EXPECT_EQ(settings_disagreement({line}), "");

  struct Case {
    void (*change)(base::Config&);
    std::string name;
  };
  const std::vector<Case> cases = {
      {[](base::Config& c) { c.transport = "tcp"; }, "the transport (LOOM_TRANSPORT"},
      {[](base::Config& c) { c.selection.algorithm = "allreduce:ring"; }, "LOOM_ALGO"},
      {[](base::Config& c) { c.selection.trials = false; }, "LOOM_TRIALS"},
      {[](base::Config& c) { c.link.slots = 4; }, "LOOM_SLOTS"},
      {[](base::Config& c) { c.link.buffer_bytes = 1 << 20; }, "LOOM_BUFFSIZE"},
      {[](base::Config& c) { c.link.sockets_per_peer = 4; }, "LOOM_NSOCKS"},
      {[](base::Config& c) { c.link.cuda_ipc = false; }, "LOOM_CUDA_IPC"},
      {[](base::Config& c) { c.selection.cuda_direct = false; }, "LOOM_CUDA_DIRECT"},
      {[](base::Config& c) { c.link.cuda_buffer_bytes = 1 << 20; }, "LOOM_CUDA_BUFFSIZE"},
  };
  for (const auto& c : cases) {
    base::Config b;
    c.change(b);
    const std::string why = settings_disagreement({line, settings_line(b), line});
    EXPECT_EQ(why.rfind(c.name, 0), 0u) << why;
    EXPECT_NE(why.find("on ranks 0,2;"), std::string::npos) << why;
    EXPECT_NE(why.find("on rank 1;"), std::string::npos) << why;
    EXPECT_NE(why.find("must be the same on every rank"), std::string::npos) << why;
  }
}

// The CUDA switches shape only what runs within a host: hosts may differ, the ranks of one may
// not. Every other setting is compared across hosts.
TEST(SettingsAgreement, TheCudaSwitchesAreComparedWithinEachHost) {
  base::Config a, b;
  b.link.cuda_ipc = false;
  b.link.cuda_buffer_bytes = 1 << 20;
  b.selection.cuda_direct = false;
  const std::string x = settings_line(a), y = settings_line(b);
  EXPECT_EQ(settings_disagreement({x, x, y, y}, {}, {"h1", "h1", "h2", "h2"}), "");
  const std::string why = settings_disagreement({x, y, y, y}, {}, {"h1", "h1", "h2", "h2"});
  EXPECT_EQ(why.rfind("LOOM_CUDA_IPC differs between ranks of one host: '1' on rank 0; '0' on "
                      "rank 1; it must be the same on every rank of a host",
                      0),
            0u)
      << why;
  // Without hosts, all ranks are one host's.
  EXPECT_NE(settings_disagreement({x, x, y, y}), "");
  base::Config c = b;
  c.link.slots = 4;
  EXPECT_EQ(settings_disagreement({x, x, settings_line(c), settings_line(c)}, {},
                                  {"h1", "h1", "h2", "h2"})
                .rfind("LOOM_SLOTS", 0),
            0u);
}

// Runs of consecutive ranks are ranges; `among` says who must agree.
TEST(SettingsAgreement, RanksAreListedAsRanges) {
  base::Config a, b;
  b.selection.trials = false;
  const std::string x = settings_line(a), y = settings_line(b);
  const std::string why =
      settings_disagreement({x, x, x, x, y, x, x, y}, {}, {}, "every member of the child");
  EXPECT_NE(why.find("'1' on ranks 0-3,5,6; '0' on ranks 4,7; it must be the same on every "
                     "member of the child"),
            std::string::npos)
      << why;
}

// Values with a tab or a newline stay on their line; ranks are named by the numbers given.
TEST(SettingsAgreement, ValuesStayOnTheLineAndRanksTakeTheirNumbers) {
  base::Config a, b;
  b.selection.algorithm = "allreduce:ring\tx\ny";
  const std::string line = settings_line(b);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const std::string why = settings_disagreement({settings_line(a), line}, {5, 7});
  EXPECT_NE(why.find("'' on rank 5; 'allreduce:ring x y' on rank 7"), std::string::npos) << why;
}

// A field this build does not know differs: another build on some rank, said so.
TEST(SettingsAgreement, AFieldThisBuildDoesNotKnowIsStillADisagreement) {
  const std::string line = settings_line(base::Config{});
  const std::string why = settings_disagreement({line, line + "\tcompression=on"});
  EXPECT_NE(why.find("another version of Loom"), std::string::npos) << why;
  // A rank that sent no line at all (a record of an older build) is named as such, not by the
  // first setting it did not send.
  const std::string silent = settings_disagreement({line, "", line});
  EXPECT_EQ(silent.rfind("rank 1 sent no settings to compare (another version of Loom?)", 0), 0u)
      << silent;
}

// A rank whose own settings were invalid sends its error instead: every rank names it, and the
// ranks sharing one error are listed once.
TEST(SettingsAgreement, ARankWhoseSettingsWereInvalidIsNamedWithItsError) {
  const std::string line = settings_line(base::Config{});
  const std::string bad = refused_line("configuration: slots 1 not in [2, 64]\tx");
  EXPECT_EQ(bad.find('\t'), std::string::npos);
  const std::string why = settings_disagreement({line, line, bad, bad, "", line});
  EXPECT_EQ(why,
            "the settings of ranks 2,3 are invalid: 'configuration: slots 1 not in [2, 64] x' on "
            "ranks 2,3; every rank stops");
}

// The split's fingerprints: equal settings give this rank's own line back; a differing field
// shows as another value.
TEST(SettingsAgreement, AFingerprintGivesTheLineBackOrNamesTheFieldThatDiffers) {
  base::Config mine, theirs;
  EXPECT_EQ(settings_fingerprint(mine).size(), kSettingsFields);
  EXPECT_EQ(line_from_fingerprint(mine, settings_fingerprint(mine).data()), settings_line(mine));
  theirs.link.slots = 16;
  const std::string other = line_from_fingerprint(mine, settings_fingerprint(theirs).data());
  EXPECT_NE(other.find("slots=(another value)"), std::string::npos) << other;
  const std::string why = settings_disagreement({settings_line(mine), other}, {0, 3});
  EXPECT_EQ(why.rfind("LOOM_SLOTS", 0), 0u) << why;
  EXPECT_NE(why.find("'8' on rank 0; '(another value)' on rank 3"), std::string::npos) << why;
}

// On a disagreement the ranks other than 0 say they have read the records and raise at once;
// rank 0, the store's host under env:// and tcp://, raises once they all have (or its bounded
// wait ends), so that it does not take the store away from a rank still reading.
TEST(SettingsAgreement, RankZeroRaisesOnlyOnceTheOthersHaveReadTheRecords) {
  const std::string path =
      ::testing::TempDir() + "/settings-agreement-" + std::to_string(::getpid());
  FileStore store(path);
  base::Config a, b;
  b.link.slots = 4;
  Topology t;
  t.settings_of_rank = {settings_line(a), settings_line(b), settings_line(a)};
  t.host_of_rank = {"h", "h", "h"};
  using Clock = std::chrono::steady_clock;
  auto raise_time = [&](int rank, std::chrono::milliseconds timeout) {
    const auto start = Clock::now();
    EXPECT_THROW(check_settings_agree(store, rank, t, timeout, true), InvalidArgument);
    return Clock::now() - start;
  };
  // Rank 0 alone: it waits out its (short) timeout for ranks 1 and 2; where it does not serve
  // the store, it has nothing to keep for them and raises at once.
  EXPECT_GE(raise_time(0, std::chrono::milliseconds(300)), std::chrono::milliseconds(300));
  {
    const auto start = Clock::now();
    EXPECT_THROW(check_settings_agree(store, 0, t, std::chrono::seconds(20), false),
                 InvalidArgument);
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  }
  EXPECT_LT(raise_time(1, std::chrono::seconds(20)), std::chrono::seconds(5));
  EXPECT_LT(raise_time(2, std::chrono::seconds(20)), std::chrono::seconds(5));
  // Both have said so: rank 0 raises at once.
  EXPECT_LT(raise_time(0, std::chrono::seconds(20)), std::chrono::seconds(5));
  // Ranks that agree: nothing raised, nothing waited for.
  t.settings_of_rank = {settings_line(a), settings_line(a), settings_line(a)};
  EXPECT_NO_THROW(check_settings_agree(store, 0, t, std::chrono::seconds(20), true));
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());
}

// create_group's wait: a member that stops while others have not come marks their slots; each
// of them, coming later, raises PeerError naming the rank the stopping member's error named (the
// one at fault, not the late member, which may be only slow), and never builds the child.
TEST(SettingsAgreement, ALateMemberFindsAStopMarkAndNamesTheRankAtFault) {
  const std::string path = ::testing::TempDir() + "/group-stop-" + std::to_string(::getpid());
  FileStore space(path);
  const std::vector<int> members = {3, 5, 7};  // ranks of the parent
  const std::vector<std::string> hosts = {"h", "h", "h"};
  const std::string line = settings_line(base::Config{});
  int checked = 0;
  auto dead_seven = [&](const std::vector<int>& absent) {
    ++checked;
    EXPECT_EQ(absent, (std::vector<int>{5, 7}));
    throw PeerError("rank 7 ended", 7);
  };
  try {
    (void)group_settings_disagreement(space, 0, members, hosts, line, std::chrono::seconds(20),
                                      dead_seven);
    ADD_FAILURE() << "the member went on without the others";
  } catch (const PeerError& e) {
    EXPECT_EQ(e.peer(), 7) << e.what();
    EXPECT_STREQ(e.what(), "rank 7 ended");  // its own error, unchanged
  }
  EXPECT_EQ(checked, 1);
  // Member 5 comes late, healthy: its slot is marked; it raises, naming rank 7, without waiting.
  auto never = [](const std::vector<int>&) { ADD_FAILURE() << "a late member waited"; };
  for (const int late : {1, 2}) {
    const auto start = std::chrono::steady_clock::now();
    try {
      (void)group_settings_disagreement(space, late, members, hosts, line, std::chrono::seconds(20),
                                        never);
      ADD_FAILURE() << "member " << late << " built the child without the one that stopped";
    } catch (const PeerError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.peer(), 7) << what;
      EXPECT_NE(what.find(fmt::format("rank {} of the parent came too late", members[late])),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("rank 3 of the parent stopped waiting for it: rank 7 ended"),
                std::string::npos)
          << what;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());
}

// What ranks derive apart (a child's key space and token, a setting's fingerprint) must agree
// whatever their standard library: FNV-1a's published values, not std::hash's.
TEST(SettingsAgreement, TheStableHashIsFnv1a) {
  EXPECT_EQ(base::stable_hash(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(base::stable_hash("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(base::stable_hash("foobar"), 0x85944171f73967e8ull);
}

}  // namespace
}  // namespace loom::core
