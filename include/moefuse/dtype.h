// Element types moefuse understands, with their sizes and names.
#pragma once

#include <cstdint>
#include <string_view>

namespace moefuse {

enum class DType : uint8_t {
  kFloat32,
  kBFloat16,
  kFloat16,
  kFloat8E4M3,  // OCP E4M3 "fn": max 448, no infinities, one NaN pattern per sign.
  kFloat8E5M2,  // OCP E5M2: max 57344, IEEE-like infinities and NaNs.
  kFloat8E8M0,  // UE8M0: unsigned power-of-two scale (MX formats), 0xFF is NaN.
  kFloat4E2M1,  // FP4 E2M1, two values packed per byte (low nibble first).
  kInt32,
  kInt64,
  kUInt8,  // opaque bytes: rows of mixed content (formats/fp8_row_record.h's FP8 row records)
};

// Storage size in bits of one element (4 for kFloat4E2M1).
constexpr int dtype_bits(DType t) {
  switch (t) {
    case DType::kFloat32: return 32;
    case DType::kBFloat16: return 16;
    case DType::kFloat16: return 16;
    case DType::kFloat8E4M3: return 8;
    case DType::kFloat8E5M2: return 8;
    case DType::kFloat8E8M0: return 8;
    case DType::kFloat4E2M1: return 4;
    case DType::kInt32: return 32;
    case DType::kInt64: return 64;
    case DType::kUInt8: return 8;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "fp32";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat16: return "fp16";
    case DType::kFloat8E4M3: return "fp8_e4m3";
    case DType::kFloat8E5M2: return "fp8_e5m2";
    case DType::kFloat8E8M0: return "e8m0";
    case DType::kFloat4E2M1: return "fp4_e2m1";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
  }
  return "unknown";
}

}  // namespace moefuse
