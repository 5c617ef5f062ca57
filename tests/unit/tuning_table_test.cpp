// The tuning table file: entries kept by machine, transport and shape, replaced in place.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "core/tuning_table.hpp"
#include "loom/loom.hpp"

namespace loom::core {
namespace {

std::string temp_path(const char* name) {
  return ::testing::TempDir() + "/" + std::to_string(::getpid()) + "/" + name;
}

TEST(TuningTable, EntriesAreReplacedByMachineTransportAndShape) {
  const std::string path = temp_path("cache/loom/tune.txt");  // folders made on the way
  const MachineKey here = this_machine();
  EXPECT_FALSE(here.cpu.empty());
  EXPECT_GE(here.cores, 1);
  EXPECT_TRUE(read_tuning_table(path).empty());
  write_tuning_entry(path, {here, "shm", "4x1", "allreduce:ring@128K:1M-"}, "first");
  write_tuning_entry(path, {here, "tcp", "4x1", "allreduce:ring@512K:"}, "");
  write_tuning_entry(path, {here, "shm", "2x1", ""}, "");
  write_tuning_entry(path, {here, "shm", "4x1", "allreduce:one_shot:0-64K"}, "second");
  const auto entries = read_tuning_table(path);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].transport, "tcp");
  EXPECT_EQ(entries[1].shape, "2x1");
  EXPECT_EQ(entries[1].rules, "");
  EXPECT_EQ(entries[2].rules, "allreduce:one_shot:0-64K");
  EXPECT_EQ(entries[2].machine, here);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find("first"), std::string::npos) << text;  // the replaced entry's comment too
  EXPECT_NE(text.find("second"), std::string::npos) << text;
}

TEST(TuningTable, MalformedLinesAreSkipped) {
  const std::string path = temp_path("bad.txt");
  write_tuning_entry(path, {this_machine(), "shm", "2x1", "ring"});
  {
    std::ofstream out(path, std::ios::app);
    out << "not a table line\n"
        << "cpu\tzero\tAVX2\tshm\t2x1\tring\n";
  }
  const auto entries = read_tuning_table(path);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].rules, "ring");
}

TEST(TuningTable, AnUnwritablePathIsAnErrorNamingIt) {
  try {
    write_tuning_entry("/proc/loom-no/tune.txt", {this_machine(), "shm", "2x1", ""});
    ADD_FAILURE() << "wrote into /proc";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/loom-no"), std::string::npos) << e.what();
  }
}

TEST(TuningTable, ShapesAreRanksPerHostTimesHosts) {
  EXPECT_EQ(job_shape({{0, 1, 2, 3}}), "4x1");
  EXPECT_EQ(job_shape({{0, 1}, {2, 3}}), "2x2");
  EXPECT_EQ(job_shape({{0, 1}, {2}}), "");
}

}  // namespace
}  // namespace loom::core
