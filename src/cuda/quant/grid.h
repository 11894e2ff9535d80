// Grid sizing of the quantisation kernels, which loop over their work (grid-stride): enough CTAs
// to fill every SM at full occupancy, no more, so a large tensor runs as one balanced wave.
#pragma once

#include <cstdint>

namespace moefuse::cuda::quant {

// CTAs an SM can hold at most for the kernels' 256-thread CTAs (2048 threads an SM on Hopper; a
// kernel whose registers allow fewer simply runs the rest as a second, equally loaded wave).
inline constexpr int kMaxCtasPerSm = 8;

// CTAs for `items` work items taken `items_per_cta` at a time by a grid-stride loop: one CTA per
// `items_per_cta` items, at most kMaxCtasPerSm per SM, and at least one (so a kernel with a
// side effect besides its items, NVFP4's tensor scale, still runs for an empty tensor).
int64_t grid_stride_ctas(int64_t items, int64_t items_per_cta, int sms);

}  // namespace moefuse::cuda::quant
