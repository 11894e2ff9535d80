#include "cuda/quant/grid.h"

#include <algorithm>

namespace moefuse::cuda::quant {

int64_t grid_stride_ctas(int64_t items, int64_t items_per_cta, int sms) {
  const int64_t wanted = (items + items_per_cta - 1) / items_per_cta;
  return std::max<int64_t>(1, std::min<int64_t>(wanted, int64_t(sms) * kMaxCtasPerSm));
}

}  // namespace moefuse::cuda::quant
