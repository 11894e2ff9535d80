// CPU reference of the FP8 row records (formats/fp8_row_record.h): packing is the 1x128
// quantiser reference (ref/quant.h) with each row's codes and scales laid out in one record, and
// unpacking its dequantiser, so the GPU's records are checked against the very codes and scales
// the stand-alone quantiser produces.
#pragma once

#include "moefuse/tensor.h"

namespace moefuse::ref {

// x [M, H] fp32 (H % 16 == 0) -> records [M, fp8_record_bytes(H)] uint8: per row the E4M3 codes
// of quantize_fp8_blockwise_1x128, its scales, zero padding. A row whose token_of_row entry is
// -1 (token_of_row may be empty: every row owned) is all zero bytes, as the fused permute leaves
// a padding row. Host views; InvalidArgument names a bad one.
void pack_fp8_records(const TensorView& x, const TensorView& records,
                      const TensorView& token_of_row = {});

// records [M, fp8_record_bytes(H)] uint8 -> x [M, H] fp32: e4m3 value · its group's scale.
void unpack_fp8_records(const TensorView& records, const TensorView& x);

}  // namespace moefuse::ref
