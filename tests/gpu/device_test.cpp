#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/test_util.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "moefuse/error.h"
#include "moefuse/health.h"

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

// The [1] int32 health flag: the smallest entry point (reset_health_flags) makes the same
// device and stream checks as every kernel-launching one.
struct HealthFlag {
  int32_t* ptr = nullptr;
  HealthFlag() { MOEFUSE_CUDA_CHECK(cudaMalloc(&ptr, sizeof(int32_t))); }
  ~HealthFlag() { cudaFree(ptr); }
  TensorView view() const {
    return TensorView::contiguous(ptr, DType::kInt32, {1}, Device::kCuda);
  }
};

// The default, legacy and per-thread streams and a created stream of the current device pass,
// also while the stream is being captured (the check only queries the device and the stream).
TEST(Device, EntryPointsAcceptStreamsOfTheCurrentDevice) {
  MOEFUSE_REQUIRE_HOPPER();
  HealthFlag health;
  cudaStream_t stream = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (cudaStream_t s : {cudaStream_t{nullptr}, cudaStreamLegacy, cudaStreamPerThread, stream})
    EXPECT_NO_THROW(reset_health_flags(health.view(), s)) << "stream " << s;
  MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));

  cudaGraph_t graph = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  EXPECT_NO_THROW(reset_health_flags(health.view(), stream)) << "during capture";
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess) << "the capture was invalidated";
  ASSERT_NE(graph, nullptr);
  cudaGraphExec_t exec = nullptr;
  MOEFUSE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  MOEFUSE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  EXPECT_EQ(read_health_flags(health.view(), stream), 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// A stream created on device 1 passed while device 0 is current: InvalidArgument naming
// "stream", before anything is enqueued. Needs two GPUs.
TEST(Device, EntryPointsRejectAStreamOfAnotherDevice) {
  MOEFUSE_REQUIRE_HOPPER();
  int count = 0;
  MOEFUSE_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (count < 2) GTEST_SKIP() << "needs two GPUs, found " << count;
  int current = 0;
  MOEFUSE_CUDA_CHECK(cudaGetDevice(&current));
  const int other = current == 0 ? 1 : 0;
  HealthFlag health;
  cudaStream_t foreign = nullptr;
  MOEFUSE_CUDA_CHECK(cudaSetDevice(other));
  MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&foreign, cudaStreamNonBlocking));
  MOEFUSE_CUDA_CHECK(cudaSetDevice(current));
  try {
    reset_health_flags(health.view(), foreign);
    ADD_FAILURE() << "no InvalidArgument for a stream of device " << other;
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "stream") << e.what();
    EXPECT_EQ(e.actual(), "one of device " + std::to_string(other)) << e.what();
  }
  cudaStreamDestroy(foreign);
}

}  // namespace
}  // namespace moefuse
