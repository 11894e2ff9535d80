#include <gtest/gtest.h>

#include "common/test_util.h"
#include "cuda/device.h"

namespace moefuse {
namespace {

TEST(Device, HopperPropertiesReadFromTheDevice) {
  MOEFUSE_REQUIRE_HOPPER();
  auto info = cuda::current_device();
  EXPECT_EQ(info.sm_major, 9);
  EXPECT_GT(info.num_sms, 0);
  EXPECT_GT(info.l2_bytes, 0);
  EXPECT_GE(info.max_smem_per_block_optin, 200 * 1024);
}

}  // namespace
}  // namespace moefuse
