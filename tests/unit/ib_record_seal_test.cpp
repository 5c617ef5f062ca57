// Connection records tell a peer where it may RDMA-write: one that was not sealed with the job
// secret, for this job and this direction of this pair, is refused.
#include <gtest/gtest.h>

#include "transports/ibverbs/connection_record.hpp"

namespace loom::transport::ibverbs {
namespace {

ConnectionRecord sample() {
  ConnectionRecord r;
  r.lid = 0x1234;
  r.qpn = 0xabcde;
  r.psn = 0x654321;
  r.mtu = 5;
  r.slots_addr = 0x7f00'1234'5000;
  r.slots_rkey = 0xdeadbeef;
  r.slot_stride = 512 * 1024 + 64;
  r.slots = 8;
  return r;
}

constexpr RecordBinding kOneToTwo{0x1122334455667788ull, 1, 2};

TEST(IbRecordSeal, ARecordSealedForThisPairWithTheSecretIsAccepted) {
  std::string why;
  auto back = unseal(seal(sample(), "job-secret", kOneToTwo), "job-secret", kOneToTwo, &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(*back, sample());
}

TEST(IbRecordSeal, AnAlteredRecordIsRefused) {
  const std::string sealed = seal(sample(), "job-secret", kOneToTwo);
  // Every byte: the rkey and address of the slots among them.
  for (std::size_t i = 0; i < sealed.size(); ++i) {
    std::string altered = sealed;
    altered[i] = static_cast<char>(altered[i] ^ 0x01);
    std::string why;
    EXPECT_FALSE(unseal(altered, "job-secret", kOneToTwo, &why)) << "byte " << i;
    EXPECT_NE(why.find("HMAC mismatch"), std::string::npos) << why;
  }
}

TEST(IbRecordSeal, ARecordForgedWithoutTheSecretIsRefused) {
  ConnectionRecord forged = sample();
  forged.slots_rkey = 0x1badcafe;
  std::string why;
  EXPECT_FALSE(unseal(seal(forged, "a-guess", kOneToTwo), "job-secret", kOneToTwo, &why));
  EXPECT_NE(why.find("rank 1 -> rank 2"), std::string::npos) << why;
  EXPECT_FALSE(unseal(encode(forged), "job-secret", kOneToTwo, &why));  // not sealed at all
}

TEST(IbRecordSeal, ARecordIsGoodForItsOwnJobAndDirectionOnly) {
  const std::string sealed = seal(sample(), "job-secret", kOneToTwo);
  std::string why;
  EXPECT_FALSE(unseal(sealed, "job-secret", {kOneToTwo.job_token, 2, 1}, &why));
  EXPECT_FALSE(unseal(sealed, "job-secret", {kOneToTwo.job_token, 1, 3}, &why));
  EXPECT_FALSE(unseal(sealed, "job-secret", {kOneToTwo.job_token + 1, 1, 2}, &why));
}

}  // namespace
}  // namespace loom::transport::ibverbs
