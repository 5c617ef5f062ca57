#include "key_audit.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "recording_store.hpp"

namespace loom::testing {
namespace {

bool rewritten_by_design(const std::string& key) {
  // A rank's progress counter (".../progress/<digits>") is rewritten on purpose.
  const auto slash = key.rfind('/');
  if (slash == std::string::npos || slash + 1 == key.size()) return false;
  const std::string_view digits = std::string_view(key).substr(slash + 1);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  const std::string_view head = std::string_view(key).substr(0, slash);
  constexpr std::string_view kProgress = "progress";
  return head.size() >= kProgress.size() &&
         head.substr(head.size() - kProgress.size()) == kProgress &&
         (head.size() == kProgress.size() || head[head.size() - kProgress.size() - 1] == '/');
}

}  // namespace

void audit_keys(int world, const std::function<void(Communicator&)>& body, RunOptions opts) {
  run_ranks_raw(
      world,
      [&body](RankContext& ctx) {
        auto recording = std::make_shared<RecordingStore>(ctx.store);
        // The keys are checked whatever the job's fate: a collision often breaks it.
        try {
          Communicator comm(recording, ctx.rank, ctx.size);
          body(comm);
          comm.destroy();
        } catch (const Error& e) {
          ADD_FAILURE() << "rank " << ctx.rank << ": " << e.what();
        }
        std::string mine;
        for (const auto& k : recording->keys_set()) mine += k + "\n";
        ctx.store->set("audit/" + std::to_string(ctx.rank), mine);
        if (ctx.rank != 0) return;
        std::vector<std::string> all;
        for (int r = 0; r < ctx.size; ++r) {
          std::istringstream in(
              ctx.store->get_string("audit/" + std::to_string(r), std::chrono::seconds(60)));
          for (std::string line; std::getline(in, line);) all.push_back(line);
        }
        EXPECT_FALSE(all.empty());
        for (const auto& k : keys_set_twice(all, rewritten_by_design))
          ADD_FAILURE() << "the key '" << k << "' was set more than once in one job";
      },
      std::move(opts));
}

}  // namespace loom::testing
