// MOEFUSE_HD marks the scalar codecs `__host__ __device__` under nvcc and expands to nothing in
// plain C++, so one definition serves the CPU reference and the GPU kernels (bit-identical by
// construction).
#pragma once

#if defined(__CUDACC__)
#define MOEFUSE_HD __host__ __device__ __forceinline__
#else
#define MOEFUSE_HD inline
#endif
