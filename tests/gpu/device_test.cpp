#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "common/test_util.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "gpu/layer_test_fixture.h"
#include "moefuse/error.h"
#include "moefuse/health.h"
#include "moefuse/layer.h"

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
// also while the stream is being captured, and while another stream of this thread is captured in
// the global mode (which forbids the stream-device query: the check must neither throw nor
// invalidate that capture).
TEST(Device, EntryPointsAcceptStreamsOfTheCurrentDevice) {
  MOEFUSE_REQUIRE_HOPPER();
  HealthFlag health;
  cudaStream_t stream = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (cudaStream_t s : {cudaStream_t{nullptr}, cudaStreamLegacy, cudaStreamPerThread, stream})
    EXPECT_NO_THROW(reset_health_flags(health.view(), s)) << "stream " << s;
  MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));

  cudaStream_t other = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  EXPECT_NO_THROW(reset_health_flags(health.view(), stream)) << "during capture";
  EXPECT_NO_THROW(reset_health_flags(health.view(), other)) << "while another stream captures";
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess) << "the capture was invalidated";
  ASSERT_NE(graph, nullptr);
  MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(other));
  cudaGraphExec_t exec = nullptr;
  MOEFUSE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  MOEFUSE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  EXPECT_EQ(read_health_flags(health.view(), stream), 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(other);
  cudaStreamDestroy(stream);
}

struct TwoDevices {
  int count = 0, current = 0, other = -1;  // other: a device that is not current; -1 if none
};

TwoDevices two_devices() {
  TwoDevices d;
  MOEFUSE_CUDA_CHECK(cudaGetDeviceCount(&d.count));
  MOEFUSE_CUDA_CHECK(cudaGetDevice(&d.current));
  if (d.count >= 2) d.other = d.current == 0 ? 1 : 0;
  return d;
}

// A stream created on device 1 passed while device 0 is current: InvalidArgument naming
// "stream", before anything is enqueued. Needs two GPUs.
TEST(Device, EntryPointsRejectAStreamOfAnotherDevice) {
  MOEFUSE_REQUIRE_HOPPER();
  const TwoDevices devices = two_devices();
  if (devices.other < 0) GTEST_SKIP() << "needs two GPUs, found " << devices.count;
  const int current = devices.current, other = devices.other;
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

// A MoeLayer created on one device and called with another current: its cuBLAS handle, second
// stream and events belong to the first, so the pass is refused up front (InvalidArgument naming
// "current device") instead of failing halfway. Needs two GPUs.
TEST(Device, LayerRefusesAnotherCurrentDevice) {
  MOEFUSE_REQUIRE_HOPPER();
  const TwoDevices devices = two_devices();
  if (devices.other < 0) GTEST_SKIP() << "needs two GPUs, found " << devices.count;
  const int current = devices.current, other = devices.other;
  const MoeConfig c = test::scaled_preset("qwen3-30b-a3b");
  test::DeviceLayer d(c, {}, 64);
  MoeLayer layer(c);
  MOEFUSE_CUDA_CHECK(cudaSetDevice(other));
  try {
    d.forward(layer, nullptr);
    ADD_FAILURE() << "no InvalidArgument with device " << other << " current";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "current device") << e.what();
    EXPECT_EQ(e.actual(), "device " + std::to_string(other)) << e.what();
  }
  MOEFUSE_CUDA_CHECK(cudaSetDevice(current));
}

}  // namespace
}  // namespace moefuse
