// The settings line each rank sends at init, and how a disagreement between ranks is named.
#include "core/settings_agreement.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

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
    EXPECT_NE(why.find("on ranks 0,2"), std::string::npos) << why;
    EXPECT_NE(why.find("on rank 1;"), std::string::npos) << why;
    EXPECT_NE(why.find("must be the same on every rank"), std::string::npos) << why;
  }
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
  // A rank that sent no line at all (a record of an older build) differs too.
  EXPECT_NE(settings_disagreement({line, ""}), "");
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

}  // namespace
}  // namespace loom::core
