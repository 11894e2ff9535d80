// The FP8 GEMMs of one expert MLP (DeepSeek-V3 recipe), as the layer calls them on the routed
// experts (forward_fp8.h, backward_fp8.h) and on the shared expert (shared_expert_fp8.h): the same
// calls on either's weights, offsets and rows.
#pragma once

#include <cuda_runtime.h>

#include "moefuse/config.h"
#include "moefuse/grouped_gemm_fp8_dgrad.h"
#include "moefuse/tensor.h"

namespace moefuse::layer {

// The MLP's weights as prepare_fp8_weights leaves them: e4m3 codes with 128x128 block scales,
// w1 [E, fc1, H] (GLU rows interleaved), w2 [E, H, F], and the transposes the dgrads read.
struct Fp8MlpWeights {
  TensorView w1, w1_scales, w2, w2_scales, w1t, w1t_scales, w2t, w2t_scales;
};

// Rows of e4m3 codes [M_cap, K] with their K-major 1x128 scales [ceil(K/128), fp8_scale_rows].
struct Fp8Rows {
  TensorView codes, scales;
};

// Column-wise grouped codes [N, 128·G] with their scales [G, N] (a wgrad operand).
struct Fp8Cols {
  TensorView codes, scales;
};

// w from the bf16 w1 [E, fc1, H] and w2 [E, H, F]: 128x128-block quantisation, then the byte
// transposes (prepare_fp8_weights).
void prepare_fp8_mlp_weights(const TensorView& w1, const TensorView& w2, const Fp8MlpWeights& w,
                             cudaStream_t stream);

// FC1 with the activation epilogue (+ b1 when present): act as E4M3 with K-major scales, FC2's
// operand, and the bf16 pre-activation into `pre` when present.
void fp8_fc1(const MoeConfig& config, const Fp8MlpWeights& w, const TensorView& offsets,
             const Fp8Rows& x, const TensorView& b1, const Fp8Rows& act, const TensorView& pre,
             cudaStream_t stream);

// FC1 with the linear epilogue (+ b1 when present) → pre bf16: the backward's recompute.
void fp8_fc1_pre(const Fp8MlpWeights& w, const TensorView& offsets, const Fp8Rows& x,
                 const TensorView& b1, const TensorView& pre, cudaStream_t stream);

// FC2 → out bf16, with the row scale and b2 when present.
void fp8_fc2(const Fp8MlpWeights& w, const TensorView& offsets, const Fp8Rows& act,
             const TensorView& row_scale, const TensorView& b2, const TensorView& out,
             cudaStream_t stream);

// The FC2 dgrad's arguments (grouped_gemm_fc2_dgrad_fp8: dys's codes on W2ᵀ, the dGLU epilogue
// from pre → d_pre, and act → scaled_act) without a row scale; the routed experts add theirs.
Fc2DgradFp8Args fp8_fc2_dgrad_args(const MoeConfig& config, const Fp8MlpWeights& w,
                                   const TensorView& offsets, const Fp8Rows& dys,
                                   const TensorView& pre, const TensorView& d_pre,
                                   const TensorView& scaled_act);

// FC1 dgrad: d_pre's codes on W1ᵀ → dxs bf16 [M_cap, H].
void fp8_fc1_dgrad(const Fp8MlpWeights& w, const TensorView& offsets, const Fp8Rows& d_pre,
                   const TensorView& dxs, cudaStream_t stream);

// d [E, N_a, N_b] (+)= Σ over each expert's rows of aᵀ·b, both operands column-wise.
void fp8_wgrad(const Fp8Cols& a, const Fp8Cols& b, const TensorView& offsets, const TensorView& d,
               bool accumulate, cudaStream_t stream);

}  // namespace moefuse::layer
