// Order-preserving integer keys of the router's selection scores, identical on host and device
// (unit-tested on the CPU against the reference's tie rule: tests/cpu/router_ordered_key_test.cpp).
//
// The fused router's arg-max runs on these keys with the warp's integer reductions (max key,
// then the lowest expert index holding it), so the key order must be exactly the reference's
// comparison of scores: a > b as doubles, and a == b a tie that the lower index wins. Hence:
//   * -0 and +0 compare equal, so both get the key of +0 (their raw bit patterns would rank +0
//     above -0 and break the tie rule; softmax logits are -0 whenever the GEMM rounds to it);
//   * every NaN gets the one key kNaNKey, below -inf: a NaN score never displaces a number, and
//     equal-key ties still give distinct, lowest-index experts (the health flag reports the NaN);
//   * key 0 (kNoCandidateKey) is never produced: it marks lanes that hold no candidate.
#pragma once

#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

#include "formats/host_device.h"

namespace moefuse::cuda {

inline constexpr uint64_t kNoCandidateKey = 0;
inline constexpr uint64_t kNaNKey = 1;

// The raw bits of an fp32 or fp64 value (Bits: uint32_t or uint64_t), and back.
template <class Bits, class F>
MOEFUSE_HD Bits bits_of(F v) {
  static_assert(sizeof(Bits) == sizeof(F));
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(F) == 8) return static_cast<Bits>(__double_as_longlong(v));
  else return static_cast<Bits>(__float_as_uint(v));
#else
  return std::bit_cast<Bits>(v);
#endif
}
MOEFUSE_HD double bits_double(uint64_t bits) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(bits));
#else
  return std::bit_cast<double>(bits);
#endif
}

template <class Bits>
inline constexpr Bits kSignBit = Bits{1} << (8 * sizeof(Bits) - 1);
template <class Bits>
inline constexpr Bits kInfinityBits = sizeof(Bits) == 8 ? Bits(0x7FF0000000000000ull)
                                                        : Bits(0x7F800000u);

// The key of a value's bits. Unsigned order of the result == the tie rule's order of the value
// (see the file comment). Integer tests on the bits, so no compiler flag about NaNs or signed
// zeros can change the result.
template <class Bits>
MOEFUSE_HD Bits ordered_key_of_bits(Bits bits) {
  const Bits magnitude = bits & ~kSignBit<Bits>;
  if (magnitude > kInfinityBits<Bits>) return Bits{kNaNKey};
  if (magnitude == 0) return kSignBit<Bits>;  // -0 and +0: the key of +0
  // Negative: flip all bits (larger magnitude, smaller key); -inf maps above kNaNKey.
  // Non-negative: set the sign bit, above every negative.
  return (bits & kSignBit<Bits>) ? ~bits : (bits | kSignBit<Bits>);
}

MOEFUSE_HD uint64_t ordered_key(double v) { return ordered_key_of_bits(bits_of<uint64_t>(v)); }

// The same order for an fp32 score, in 32 bits: the softmax router's scores are its fp32 logits,
// and widening an fp32 value to double keeps its order, so ordered_key32(a) and
// ordered_key(double(a)) order any two fp32 scores alike (tests/cpu/router_ordered_key_test.cpp),
// with the same kNoCandidateKey (0) and kNaNKey (1). A round of arg-max on them takes two warp
// reductions instead of three.
MOEFUSE_HD uint32_t ordered_key32(float v) { return ordered_key_of_bits(bits_of<uint32_t>(v)); }

// The score of a key (inverse of ordered_key; NaN for kNaNKey and kNoCandidateKey).
MOEFUSE_HD double key_value(uint64_t key) {
  if (key <= kNaNKey) return bits_double(kInfinityBits<uint64_t> | (uint64_t{1} << 51));  // qNaN
  return bits_double((key & kSignBit<uint64_t>) ? (key & ~kSignBit<uint64_t>) : ~key);
}

}  // namespace moefuse::cuda
