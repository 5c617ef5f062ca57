// Launcher detection: loomrun, torchrun-style, Open MPI and Slurm environments, read through a
// map instead of the process environment.
#include "core/launch_env.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <map>

#include "loom/loom.hpp"

namespace loom::core {
namespace {

using Env = std::map<std::string, std::string>;

LaunchEnv detect(const Env& env) {
  return detect_launch_env([&env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

std::string error_of(const Env& env) {
  try {
    detect(env);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

TEST(SlurmHostlist, ExpandsRangesListsPaddingAndProducts) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_hostlist("node7"), V{"node7"});
  EXPECT_EQ(expand_slurm_hostlist("node[1-3,7]"), (V{"node1", "node2", "node3", "node7"}));
  EXPECT_EQ(expand_slurm_hostlist("a,b[01-02],c"), (V{"a", "b01", "b02", "c"}));
  EXPECT_EQ(expand_slurm_hostlist("n[08-11]"), (V{"n08", "n09", "n10", "n11"}));
  EXPECT_EQ(expand_slurm_hostlist("r[1-2]n[3,5]"), (V{"r1n3", "r1n5", "r2n3", "r2n5"}));
  EXPECT_EQ(expand_slurm_hostlist("gpu[2]-ib"), (V{"gpu2-ib"}));
  EXPECT_EQ(expand_slurm_hostlist("10.0.0.[1-2]"), (V{"10.0.0.1", "10.0.0.2"}));
  for (const char* bad : {"node[1-", "node[3-1]", "node[]", "node[a-b]", "n]", "n[[1]]", ""})
    EXPECT_THROW(expand_slurm_hostlist(bad), InvalidArgument) << bad;
}

TEST(SlurmHostlist, TaskCountsExpandRepeats) {
  EXPECT_EQ(expand_slurm_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_slurm_tasks_per_node("4"), (std::vector<int>{4}));
  EXPECT_THROW(expand_slurm_tasks_per_node("2(x"), InvalidArgument);
  EXPECT_THROW(expand_slurm_tasks_per_node("x"), InvalidArgument);
}

TEST(LaunchEnv, LoomrunAndTorchrunStyle) {
  auto l = detect({{"RANK", "3"},
                   {"WORLD_SIZE", "4"},
                   {"LOCAL_RANK", "1"},
                   {"LOCAL_WORLD_SIZE", "2"},
                   {"NODE_RANK", "1"},
                   {"MASTER_ADDR", "h0"},
                   {"MASTER_PORT", "1234"},
                   {"LOOM_STORE_HOSTED", "1"}});
  EXPECT_EQ(l.launcher, "loomrun");
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(l.world_size, 4);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_world_size, 2);
  EXPECT_EQ(l.node_rank, 1);
  EXPECT_EQ(l.master_addr, "h0");
  EXPECT_EQ(l.master_port, 1234);
  EXPECT_TRUE(l.store_hosted_by_launcher);

  auto t = detect({{"RANK", "0"},
                   {"WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "h0"},
                   {"MASTER_PORT", "29400"},
                   {"GROUP_RANK", "0"}});
  EXPECT_EQ(t.launcher, "env");
  EXPECT_FALSE(t.store_hosted_by_launcher);
  EXPECT_EQ(t.init_method, "env://");

  auto f = detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOOM_INIT_METHOD", "file:///tmp/s"}});
  EXPECT_EQ(f.init_method, "file:///tmp/s");

  EXPECT_NE(error_of({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}).find("RANK"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}).find("MASTER_ADDR"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}).find("rank 2"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x'"), std::string::npos);
  EXPECT_NE(error_of({}).find("no launcher"), std::string::npos);
}

TEST(LaunchEnv, OpenMpiNeedsAnAddressOrAStoreUrl) {
  Env env{{"OMPI_COMM_WORLD_RANK", "2"},       {"OMPI_COMM_WORLD_SIZE", "4"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
          {"OMPI_COMM_WORLD_NODE_RANK", "1"},  {"MASTER_ADDR", "10.1.0.1"}};
  auto o = detect(env);
  EXPECT_EQ(o.launcher, "openmpi");
  EXPECT_EQ(o.rank, 2);
  EXPECT_EQ(o.world_size, 4);
  EXPECT_EQ(o.local_world_size, 2);
  EXPECT_EQ(o.node_rank, -1);  // Open MPI does not say
  EXPECT_EQ(o.master_addr, "10.1.0.1");
  EXPECT_EQ(o.master_port, 29500);
  // mpirun inside a Slurm allocation: Open MPI's variables win.
  env["SLURM_PROCID"] = "0";
  env["SLURM_NTASKS"] = "1";
  EXPECT_EQ(detect(env).launcher, "openmpi");
  env.erase("MASTER_ADDR");
  EXPECT_NE(error_of(env).find("MASTER_ADDR"), std::string::npos);
  env["LOOM_INIT_METHOD"] = "file:///shared/store";
  EXPECT_EQ(detect(env).init_method, "file:///shared/store");
}

TEST(LaunchEnv, SlurmTakesTheFirstNodeAndAPortFromTheJob) {
  Env env{{"SLURM_PROCID", "5"},
          {"SLURM_NTASKS", "6"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "2"},
          {"SLURM_JOB_ID", "4242"},
          {"SLURM_STEP_ID", "3"},
          {"SLURM_JOB_NODELIST", "big[1-9]"},
          {"SLURM_STEP_NODELIST", "node[07-09]"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x3)"}};
  auto s = detect(env);
  EXPECT_EQ(s.launcher, "slurm");
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.world_size, 6);
  EXPECT_EQ(s.local_rank, 1);
  EXPECT_EQ(s.local_world_size, 2);
  EXPECT_EQ(s.node_rank, 2);
  EXPECT_EQ(s.master_addr, "node07");
  EXPECT_EQ(s.master_port, slurm_store_port("4242", "3", ::getuid()));
  env["MASTER_ADDR"] = "login1";
  env["MASTER_PORT"] = "3333";
  s = detect(env);
  EXPECT_EQ(s.master_addr, "login1");
  EXPECT_EQ(s.master_port, 3333);
  env.erase("MASTER_ADDR");
  env.erase("SLURM_STEP_NODELIST");
  EXPECT_EQ(detect(env).master_addr, "big1");
  env["SLURM_JOB_NODELIST"] = "big[1-";
  EXPECT_NE(error_of(env).find("host list"), std::string::npos);
  EXPECT_NE(error_of({{"SLURM_PROCID", "0"}}).find("SLURM_NTASKS"), std::string::npos);
}

Env slurm_job(long long job, int step) {
  return {{"SLURM_PROCID", "0"},
          {"SLURM_NTASKS", "2"},
          {"SLURM_JOB_NODELIST", "node1"},
          {"SLURM_JOB_ID", std::to_string(job)},
          {"SLURM_STEP_ID", std::to_string(step)}};
}

// Two jobs that meet in one store (a port both took, one secret for both) must not touch each
// other's keys: init() keeps a job's keys under the name its launcher gives it.
TEST(LaunchEnv, TheJobIsNamedWhereTheLauncherNamesIt) {
  Env slurm = slurm_job(4242, 3);
  EXPECT_EQ(detect(slurm).job, "slurm-4242.3");
  slurm.erase("SLURM_STEP_ID");
  EXPECT_EQ(detect(slurm).job, "slurm-4242.-");
  Env torchrun{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
  EXPECT_EQ(detect(torchrun).job, "");
  torchrun["TORCHELASTIC_RUN_ID"] = "none";  // torchrun's and loomrun's default: no name
  EXPECT_EQ(detect(torchrun).job, "");
  torchrun["TORCHELASTIC_RUN_ID"] = "train-7";
  EXPECT_EQ(detect(torchrun).job, "train-7");
}

// The port was 20000 + (job * 7 + step) % 20000: job J step 7 and job J+1 step 0 shared it.
TEST(LaunchEnv, SlurmStorePortsOfNeighbouringJobsAndStepsDiffer) {
  for (long long job : {1LL, 4242LL, 123456LL, 2147483646LL}) {
    EXPECT_NE(detect(slurm_job(job, 7)).master_port, detect(slurm_job(job + 1, 0)).master_port)
        << "job " << job;
    EXPECT_NE(detect(slurm_job(job, 0)).master_port, detect(slurm_job(job, 1)).master_port)
        << "job " << job;
  }
  EXPECT_NE(slurm_store_port("4242", "3", 1000), slurm_store_port("4242", "3", 1001))
      << "two users' jobs of the same number (two clusters) meet on one port";
}

TEST(LaunchEnv, SlurmStorePortStaysBelowTheEphemeralRange) {
  for (long long job = 0; job < 2000; ++job)
    for (int step = 0; step < 4; ++step) {
      const int port = detect(slurm_job(job * 7919, step)).master_port;
      ASSERT_GE(port, kSlurmPortLow) << "job " << job * 7919 << " step " << step;
      ASSERT_LE(port, kSlurmPortHigh) << "job " << job * 7919 << " step " << step;
    }
}

}  // namespace
}  // namespace loom::core
