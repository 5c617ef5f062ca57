// A call's tag names the call whole: two calls that differ in any argument, the root included,
// have different tags, so a rank that receives another call's bytes raises CollectiveMismatch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "algorithms/collective.hpp"
#include "loom/store.hpp"

namespace loom::algorithms {
namespace {

Collective broadcast_from(int root) {
  Collective c;
  c.kind = Kind::broadcast;
  c.seq = 7;
  c.dtype = DataType::f32;
  c.count = 1024;
  c.root = root;
  return c;
}

TEST(Tag, BroadcastsFromDifferentRootsHaveDifferentTagsForEveryRootAllowed) {
  const int last = kMaxWorldSize - 1;
  const std::vector<int> roots = {0, 1, 2, 1 << 10, (1 << 19) + 5, last - 1, last};
  std::set<std::uint64_t> words;
  for (int root : roots) {
    const transport::Tag tag = broadcast_from(root).tag();
    words.insert(tag.word);
    EXPECT_NE(describe_tag(tag).find(fmt::format("root {})", root)), std::string::npos)
        << describe_tag(tag);
  }
  EXPECT_EQ(words.size(), roots.size());
}

TEST(Tag, ACommunicatorLargerThanTheTagsRootFieldIsRefused) {
  // A root r and r + 2^20 would have one tag: such a communicator must not exist.
  const auto path =
      std::filesystem::temp_directory_path() / ("loom-tag-test-" + std::to_string(::getpid()));
  auto store = std::make_shared<FileStore>(path.string());
  Options o;
  o.timeout = std::chrono::seconds(1);
  EXPECT_THROW(Communicator(store, 0, kMaxWorldSize + 1, o), InvalidArgument);
  EXPECT_THROW(Communicator(store, kMaxWorldSize + 5, kMaxWorldSize + 6, o), InvalidArgument);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace loom::algorithms
