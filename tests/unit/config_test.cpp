// LOOM_* environment parsing, names of types and ops, and init()'s environment checks.
#include <gtest/gtest.h>

#include "../support/scoped_env.hpp"
#include "base/config.hpp"
#include "loom/loom.hpp"

namespace loom {
namespace {

using testing::ScopedEnv;

TEST(Config, SizesAcceptBinarySuffixes) {
  EXPECT_EQ(base::parse_size("4096"), 4096u);
  EXPECT_EQ(base::parse_size("4K"), 4096u);
  EXPECT_EQ(base::parse_size("4M"), 4u << 20);
  EXPECT_EQ(base::parse_size("1G"), 1u << 30);
  EXPECT_EQ(base::parse_size("2MB"), 2u << 20);
  EXPECT_FALSE(base::parse_size(""));
  EXPECT_FALSE(base::parse_size("-1"));
  EXPECT_FALSE(base::parse_size("4X"));
  EXPECT_FALSE(base::parse_size("99999999999999999999G"));
}

TEST(Config, EnvironmentSetsDefaultsAndOptionsWin) {
  ScopedEnv t("LOOM_TIMEOUT", "7"), s("LOOM_NSOCKS", "3"), b("LOOM_BUFFSIZE", "1M"),
      a("LOOM_ALGO", "ring");
  base::Config c = base::Config::resolve({}, 4);
  EXPECT_EQ(c.timeout, std::chrono::seconds(7));
  EXPECT_EQ(c.link.sockets_per_peer, 3);
  EXPECT_EQ(c.link.buffer_bytes, 1u << 20);
  EXPECT_EQ(c.selection.algorithm, "ring");
  Options o;
  o.timeout = std::chrono::milliseconds(1500);
  o.sockets_per_peer = 1;
  c = base::Config::resolve(o, 4);
  EXPECT_EQ(c.timeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(c.link.sockets_per_peer, 1);
}

TEST(Config, BadValuesNameTheVariable) {
  {
    ScopedEnv t("LOOM_TIMEOUT", "soon");
    try {
      base::Config::resolve({}, 2);
      ADD_FAILURE();
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("LOOM_TIMEOUT"), std::string::npos);
    }
  }
  {
    ScopedEnv n("LOOM_NSOCKS", "0");
    EXPECT_THROW(base::Config::resolve({}, 2), InvalidArgument);
  }
  {
    ScopedEnv b("LOOM_BUFFSIZE", "1K");  // slots of 128 bytes are too small
    EXPECT_THROW(base::Config::resolve({}, 2), InvalidArgument);
  }
}

TEST(Config, SpinWindowShrinksWhenRanksOutnumberCores) {
  ScopedEnv l("LOCAL_WORLD_SIZE", "4096"), s("LOOM_SPIN_US", nullptr);
  base::Config many = base::Config::resolve({}, 4096);
  ScopedEnv l1("LOCAL_WORLD_SIZE", "1");
  base::Config one = base::Config::resolve({}, 1);
  EXPECT_LT(many.pacing.spin_us, one.pacing.spin_us);
}

TEST(Names, DataTypesParseShortAndLongNames) {
  EXPECT_EQ(parse_data_type("f32"), DataType::f32);
  EXPECT_EQ(parse_data_type("float32"), DataType::f32);
  EXPECT_EQ(parse_data_type("BFLOAT16"), DataType::bf16);
  EXPECT_EQ(parse_data_type("int8"), DataType::i8);
  EXPECT_EQ(parse_data_type("uint64"), DataType::u64);
  EXPECT_EQ(parse_data_type("double"), DataType::f64);
  EXPECT_FALSE(parse_data_type("f8"));
  EXPECT_EQ(parse_reduce_op("avg"), ReduceOp::avg);
  EXPECT_FALSE(parse_reduce_op("xor"));
  for (auto t : {DataType::f32, DataType::f16, DataType::i64})
    EXPECT_EQ(parse_data_type(to_string(t)), t);
  EXPECT_EQ(size_of(DataType::bf16), 2u);
  EXPECT_EQ(size_of(static_cast<DataType>(77)), 0u);
}

TEST(Init, MissingLauncherVariablesAreNamed) {
  ScopedEnv r("RANK", nullptr), w("WORLD_SIZE", "2");
  try {
    init();
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("RANK"), std::string::npos) << e.what();
  }
  ScopedEnv r2("RANK", "0"), m("MASTER_ADDR", nullptr), im("LOOM_INIT_METHOD", nullptr);
  try {
    init();
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos) << e.what();
  }
  ScopedEnv bad("LOOM_INIT_METHOD", "carrier-pigeon://x");
  EXPECT_THROW(init(), InvalidArgument);
  ScopedEnv badport("LOOM_INIT_METHOD", "tcp://localhost:notaport");
  EXPECT_THROW(init(), InvalidArgument);
}

}  // namespace
}  // namespace loom
