#include "bench/device_buffer.h"

#include <cuda_bf16.h>

#include <string>
#include <utility>

#include "cuda/check.h"
#include "moefuse/error.h"

namespace moefuse::bench {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  MOEFUSE_CUDA_CHECK(cudaMalloc(&ptr_, bytes ? bytes : 16));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  std::swap(ptr_, other.ptr_);
  std::swap(bytes_, other.bytes_);
  return *this;
}

TensorView DeviceBuffer::view(DType dtype, std::initializer_list<int64_t> shape) const {
  TensorView t = TensorView::contiguous(ptr_, dtype, shape, Device::kCuda);
  const size_t need = static_cast<size_t>(t.numel()) * dtype_bits(dtype) / 8;
  MOEFUSE_EXPECT(need <= bytes_, "view", "at most " + std::to_string(bytes_) + " bytes",
                 std::to_string(need) + " bytes");
  return t;
}

namespace {

__device__ float hash_uniform(uint64_t seed, uint64_t i) {
  // splitmix64 of (seed, i): independent streams per seed, no state.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

template <class T>
__global__ void fill_uniform_kernel(T* dst, size_t count, float lo, float hi, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x)
    dst[i] = static_cast<T>(lo + (hi - lo) * hash_uniform(seed, i));
}

template <class T>
void fill(void* dst, size_t count, float lo, float hi, uint64_t seed, cudaStream_t stream) {
  if (count == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((count + 255) / 256, 8192));
  fill_uniform_kernel<<<blocks, 256, 0, stream>>>(static_cast<T*>(dst), count, lo, hi, seed);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void fill_uniform_bf16(void* dst, size_t count, float lo, float hi, uint64_t seed,
                       cudaStream_t stream) {
  fill<__nv_bfloat16>(dst, count, lo, hi, seed, stream);
}

void fill_uniform_fp32(void* dst, size_t count, float lo, float hi, uint64_t seed,
                       cudaStream_t stream) {
  fill<float>(dst, count, lo, hi, seed, stream);
}

template <class T>
DeviceBuffer upload(const std::vector<T>& host) {
  DeviceBuffer buf(host.size() * sizeof(T));
  if (!host.empty())
    MOEFUSE_CUDA_CHECK(cudaMemcpy(buf.get(), host.data(), host.size() * sizeof(T),
                                  cudaMemcpyHostToDevice));
  return buf;
}

template DeviceBuffer upload(const std::vector<int32_t>&);
template DeviceBuffer upload(const std::vector<float>&);

}  // namespace moefuse::bench
