// Pieces the low-precision layer references (ref/layer_fp8.h, ref/layer_mxfp8.h) share: each
// mirrors one stage of the GPU layer around its routed experts' GEMMs, so that the references
// differ only where their recipes do. Host vectors of fp32 values throughout; the expert part
// works in the GPU's interleaved GLU order (glu_rows converts).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "moefuse/config.h"
#include "moefuse/tensor.h"
#include "ref/layer.h"

namespace moefuse::ref {

// A contiguous host view of p (the references' inputs are read through it, never written).
TensorView host(const void* p, DType dtype, std::initializer_list<int64_t> shape);

// Rounding to bf16 as the GPU stores its intermediates (to_bf16: the bits; widen: back).
std::vector<uint16_t> to_bf16(const std::vector<float>& v);
std::vector<float> widen(const std::vector<uint16_t>& v);

// The values of a host fp32 tensor.
std::vector<float> copy_of(const TensorView& t);

// A GLU weight or bias [outer, fc1(, inner)] between the reference's [gate; up] rows and the
// GPU's interleaved ones (the identity for the other activations).
std::vector<float> glu_rows(const MoeConfig& c, std::vector<float> v,
                            std::initializer_list<int64_t> shape, bool interleave);

// row_prob[row_of[i]] = probs[i]: the routing probability of each expert row (FC2's row scale).
std::vector<float> row_probabilities(const LayerForward& f, int64_t rows);

// dys[r] = dy[token_of_row[r]] rounded to bf16: combine_backward's rows (the probability is
// FC2's row scale, so dys carries none).
std::vector<float> routed_dy(const LayerForward& f, const TensorView& dy, int64_t H);

// d [E, N_a, N_b] fp32 = Σ over each expert's rows of a[r]ᵀ·b[r] in fp64 (a [rows, N_a],
// b [rows, N_b]): the k-grouped wgrad of the given operand values.
void wgrad_fp64(const std::vector<float>& a, int64_t n_a, const std::vector<float>& b,
                int64_t n_b, const std::vector<int32_t>& offsets, float* d);

// y [T, H] = Σ_j ys[row_of[t, j]] + shared_y (the shared expert's output [T, H] in the
// recipe's precision, or empty without one).
std::vector<float> combine_routed(const MoeConfig& c, const LayerForward& f, int64_t T,
                                  const std::vector<float>& ys, const std::vector<float>& shared_y);

// The checks of a low-precision backward reference's arguments (ref::layer_backward's contract,
// forward from ref::layer_forward of the same x). Returns R, the routed rows.
int64_t check_routed_backward(const MoeConfig& c, const TensorView& x, const LayerForward& f,
                              const TensorView& dy, const LayerGrads& grads);

// The backward past the routed experts' GEMMs, given their results: d_w1 (interleaved on entry)
// stored in the reference order; dx = Σ_j dxs; with expert_bias, d_b1 = Σ d_pre and
// d_b2 = Σ p·dys (fp64 sums of the bf16 values, as segment_column_sum); dp gathered to d_probs
// and the router's backward (ref::router_backward). The shared expert's backward is the
// caller's, in its recipe's precision.
struct RoutedGrads {
  std::vector<float> dxs;     // [R, H]
  std::vector<float> d_w1;    // [E, fc1, H], interleaved
  std::vector<float> d_pre;   // [R, fc1], interleaved (bf16 values)
  std::vector<float> dys;     // [R, H] (bf16 values)
  std::vector<float> dp;      // [R]
};
void finish_layer_backward(const MoeConfig& c, const LayerWeights& w, const TensorView& x,
                           const LayerForward& f, RoutedGrads routed, const LayerGrads& grads);

}  // namespace moefuse::ref
