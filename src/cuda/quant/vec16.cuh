// The unit every quantisation kernel moves: 16 consecutive elements per thread, read and written
// with 16-byte (or, for 16 FP4 codes, 8-byte) accesses. Callers guarantee the alignment
// (16-byte-aligned bases, rows a multiple of 16 elements; validate.h checks it).
//
// The elements stay in registers as loaded (Raw16: 8 words for bf16, 16 for fp32) and are widened
// to fp32 where used, so a thread can keep several vectors in flight cheaply. The per-element
// work is kept to a few instructions, because at HBM speed an SM has only ~10 integer-pipe
// instructions per bf16 element to spend: the amax is one fmaxf (|x| bits order like the floats,
// and fmaxf skips NaN, exactly as formats::amax_bits), E4M3 codes come from the hardware
// conversion (two per instruction), E2M1 codes from e2m1_fast.h.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/quant/e2m1_fast.h"
#include "formats/bits.h"

namespace moefuse::cuda::quant {

inline constexpr int kVec = 16;

template <class T>
struct Raw16;
template <>
struct Raw16<__nv_bfloat16> {
  uint32_t w[8];  // element 2i in the low half of w[i], 2i + 1 in the high half
};
template <>
struct Raw16<float> {
  float f[16];
};

// Vectors a thread keeps in flight: 128 bytes of input either way (4 bf16 or 2 fp32 vectors).
template <class T>
inline constexpr int kInFlight = 8 / sizeof(T);

__device__ __forceinline__ void load16(const __nv_bfloat16* p, Raw16<__nv_bfloat16>& r) {
  const uint4* p4 = reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint4 u = __ldg(p4 + i);
    r.w[4 * i] = u.x, r.w[4 * i + 1] = u.y, r.w[4 * i + 2] = u.z, r.w[4 * i + 3] = u.w;
  }
}

__device__ __forceinline__ void load16(const float* p, Raw16<float>& r) {
  const float4* p4 = reinterpret_cast<const float4*>(p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 f = __ldg(p4 + i);
    r.f[4 * i] = f.x, r.f[4 * i + 1] = f.y, r.f[4 * i + 2] = f.z, r.f[4 * i + 3] = f.w;
  }
}

// 8 + 8 bf16 held as two 16-byte words (lo: elements 0-7); hi zero for a vector of 8, whose zeros
// change no amax.
__device__ __forceinline__ Raw16<__nv_bfloat16> raw16_of(uint4 lo, uint4 hi = {}) {
  return Raw16<__nv_bfloat16>{{lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w}};
}

// Zeros: what a lane past the end of a row contributes to its group's amax.
template <class T>
__device__ __forceinline__ void zero16(Raw16<T>& r) {
  r = Raw16<T>{};
}

// Element k as fp32 (bf16 -> fp32 is exact: the bf16 bits are the high half of the fp32 bits).
__device__ __forceinline__ float element(const Raw16<__nv_bfloat16>& r, int k) {
  const uint32_t w = r.w[k / 2];
  return formats::bits_float(k % 2 == 0 ? w << 16 : w & 0xFFFF0000u);
}
__device__ __forceinline__ float element(const Raw16<float>& r, int k) { return r.f[k]; }

// max |x| over the 16 elements, NaN ignored; +0 for all-zero or all-NaN.
template <class T>
__device__ __forceinline__ float amax16(const Raw16<T>& r) {
  float a = 0.0f;
#pragma unroll
  for (int k = 0; k < kVec; ++k) a = fmaxf(a, fabsf(element(r, k)));
  return a;
}

// Max over aligned groups of `kLanes` consecutive lanes (a power of two <= 32); every lane of the
// warp must call it.
template <int kLanes>
__device__ __forceinline__ float group_max(float a) {
#pragma unroll
  for (int o = kLanes / 2; o >= 1; o /= 2) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
  return a;
}

// E4M3 codes of a, b, c, d (a in the low byte), = formats::e4m3_from_float of each: the hardware
// conversion rounds to nearest even and saturates finite values and Inf to +-448 like the
// reference; a NaN's code may carry its sign (0xFF), which the reference drops (0x7F), so bytes
// equal to 0xFF (never a finite code) are turned into 0x7F.
__device__ __forceinline__ uint32_t e4m3x4(float a, float b, float c, float d) {
  uint32_t w;
  asm("{\n .reg .b16 lo, hi;\n"
      " cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      " cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      " mov.b32 %0, {lo, hi};\n}"
      : "=r"(w)
      : "f"(a), "f"(b), "f"(c), "f"(d));
  const uint32_t nan_ff = w & ((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u;
  return w ^ nan_ff;
}

// The E4M3 code of a in the low byte and zeros above (the conversion's other operand is 0, whose
// code is 0): = formats::e4m3_from_float(a) for every a but NaN, whose code may carry its sign.
__device__ __forceinline__ uint32_t e4m3_code(float a) {
  uint16_t c;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, 0f00000000, %1;" : "=h"(c) : "f"(a));
  return c;
}

// The four E4M3 codes of w (byte k is element k) as floats, = formats::e4m3_to_float of each:
// the hardware conversion to f16 is exact (every E4M3 value is an fp16 value) and NaN stays NaN.
__device__ __forceinline__ void e4m3x4_to_float(uint32_t w, float (&f)[4]) {
  asm("{\n .reg .b16 p0, p1, h0, h1, h2, h3;\n .reg .b32 f01, f23;\n"
      " mov.b32 {p0, p1}, %4;\n"
      " cvt.rn.f16x2.e4m3x2 f01, p0;\n"
      " cvt.rn.f16x2.e4m3x2 f23, p1;\n"
      " mov.b32 {h0, h1}, f01;\n"
      " mov.b32 {h2, h3}, f23;\n"
      " cvt.f32.f16 %0, h0;\n cvt.f32.f16 %1, h1;\n cvt.f32.f16 %2, h2;\n cvt.f32.f16 %3, h3;\n}"
      : "=f"(f[0]), "=f"(f[1]), "=f"(f[2]), "=f"(f[3])
      : "r"(w));
}

// The E4M3 codes of elements k0 .. k0 + 7 of x * multiplier (element k0 in the low byte).
template <class T>
__device__ __forceinline__ uint2 e4m3x8(const Raw16<T>& r, int k0, float multiplier) {
  uint32_t w[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int k = k0 + 4 * i;
    w[i] = e4m3x4(element(r, k) * multiplier, element(r, k + 1) * multiplier,
                  element(r, k + 2) * multiplier, element(r, k + 3) * multiplier);
  }
  return make_uint2(w[0], w[1]);
}

// 16 E4M3 codes of x * multiplier, one 16-byte store (element k in byte k).
template <class T>
__device__ __forceinline__ void store16_e4m3(uint8_t* q, const Raw16<T>& r, float multiplier) {
  const uint2 lo = e4m3x8(r, 0, multiplier), hi = e4m3x8(r, 8, multiplier);
  *reinterpret_cast<uint4*>(q) = make_uint4(lo.x, lo.y, hi.x, hi.y);
}

// The first 8 elements' E4M3 codes of x * multiplier, one 8-byte store (for a vector holding 8).
template <class T>
__device__ __forceinline__ void store8_e4m3(uint8_t* q, const Raw16<T>& r, float multiplier) {
  *reinterpret_cast<uint2*>(q) = e4m3x8(r, 0, multiplier);
}

// 16 E2M1 codes of x * multiplier, one 8-byte store (element k in nibble k: low nibble first).
template <class T>
__device__ __forceinline__ void store16_e2m1(uint8_t* q, const Raw16<T>& r, float multiplier) {
  uint32_t w[2] = {0, 0};
#pragma unroll
  for (int k = 0; k < kVec; ++k) w[k / 8] |= e2m1_code_fast(element(r, k) * multiplier) << (4 * (k % 8));
  *reinterpret_cast<uint2*>(q) = make_uint2(w[0], w[1]);
}

// The bf16 form packs 8 codes at a time from the raw pairs (e2m1x8_bf16), which takes the signs
// from the bf16 words and so needs a positive, non-NaN multiplier (nvfp4_value_multiplier's).
template <>
__device__ __forceinline__ void store16_e2m1(uint8_t* q, const Raw16<__nv_bfloat16>& r,
                                             float multiplier) {
  const uint32_t lo[4] = {r.w[0], r.w[1], r.w[2], r.w[3]};
  const uint32_t hi[4] = {r.w[4], r.w[5], r.w[6], r.w[7]};
  *reinterpret_cast<uint2*>(q) =
      make_uint2(e2m1x8_bf16(lo, multiplier), e2m1x8_bf16(hi, multiplier));
}

}  // namespace moefuse::cuda::quant
