// An activation row in FP8 as one contiguous record, for moving rows between GPUs (FP8
// dispatch, docs/ep.md): the row's H E4M3 codes (blockwise 1x128 groups along H, the DeepSeek-V3
// recipe of formats/recipes.h), then its ceil(H/128) fp32 group scales, then zero bytes up to a
// multiple of 16. A row and its scales travel together, so the transport moves opaque 16-byte
// vectors and the receiver needs no second index: about H + H/32 bytes against bf16's 2H.
// H must be a multiple of 16 (16-byte code vectors; the scales then sit 4-byte aligned).
#pragma once

#include <cstdint>

#include "formats/host_device.h"
#include "formats/recipes.h"

namespace moefuse::formats {

MOEFUSE_HD constexpr int64_t fp8_record_groups(int64_t hidden) {
  return (hidden + kBlockwiseGroup - 1) / kBlockwiseGroup;
}
// Byte offset of the scales in a record: right after the codes.
MOEFUSE_HD constexpr int64_t fp8_record_scales_offset(int64_t hidden) { return hidden; }
MOEFUSE_HD constexpr int64_t fp8_record_bytes(int64_t hidden) {
  return (hidden + 4 * fp8_record_groups(hidden) + 15) / 16 * 16;
}

}  // namespace moefuse::formats
