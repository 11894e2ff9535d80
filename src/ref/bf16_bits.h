// bf16 bit patterns in the reference backend: rounding to bf16 as the GPU epilogues do, and back.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace moefuse::ref {

// fp32(v) → bf16 bits, round to nearest even (a NaN stays a quiet NaN).
inline uint16_t bf16_bits(double v) {
  const float f = static_cast<float>(v);
  if (std::isnan(f)) return 0x7FC0;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_value(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace moefuse::ref
