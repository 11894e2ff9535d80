// The receiving end of the FP8 dispatch (docs/ep.md): FP8 row records (formats/fp8_row_record.h)
// back to bf16 rows for the bf16 expert GEMMs.
#pragma once

#include <cuda_runtime_api.h>

#include "moefuse/tensor.h"

namespace moefuse::cuda {

// x[r] = bf16(e4m3 · scale) of records[r] (the fp32 product of ref::unpack_fp8_records, rounded
// to nearest even) for the rows r in [row_offsets[first], min(row_offsets[end], capacity)):
// row_offsets is read on the device only (the EP receive offsets; first..end a range of local
// experts), rows outside the range are left untouched. records [capacity, fp8_record_bytes(H)]
// uint8, x [capacity, H] bf16, both 16-byte aligned; row_offsets int32 [>= end + 1].
// Asynchronous on `stream`, no allocation: CUDA-graph safe.
void unpack_fp8_records(const TensorView& records, const TensorView& row_offsets, int first,
                        int end, const TensorView& x, cudaStream_t stream);

}  // namespace moefuse::cuda
