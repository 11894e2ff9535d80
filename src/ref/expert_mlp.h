// CPU reference of the expert MLPs over expert-contiguous rows, and of the activations.
//
// For the rows [offsets[e], offsets[e+1]) of expert e:
//   pre = xs · W1[e]^T (+ b1[e])    [rows, fc1]   fc1 = 2F for GLU kinds ([gate; up]), F otherwise
//   act = activation(pre)           [rows, F]
//   ys  = act · W2[e]^T (+ b2[e])   [rows, H]
// Weights in the reference layout: W1 [E, fc1, H] with the gate half in rows [0, F) and the up
// half in [F, 2F); W2 [E, H, F]. Optional biases are empty views (data == nullptr, rank 0) when
// the config has expert_bias == false. Rows outside every expert's range are left untouched.
#pragma once

#include "moefuse/config.h"
#include "moefuse/tensor.h"

namespace moefuse::ref {

struct ExpertWeights {
  TensorView w1;  // [E, fc1, H]
  TensorView b1;  // [E, fc1] or empty
  TensorView w2;  // [E, H, F]
  TensorView b2;  // [E, H] or empty
};

// Same shapes as ExpertWeights; every view written (overwritten, not accumulated).
using ExpertGrads = ExpertWeights;

// One row of the activation: out [F] from pre [fc1]; and its backward: d_pre [fc1] from d_out [F].
// fp64 throughout; the scalar definitions are in config.h (Activation).
void activation_forward(const MoeConfig& config, const double* pre, double* out);
void activation_backward(const MoeConfig& config, const double* pre, const double* d_out,
                         double* d_pre);

// pre, act and ys for all rows of all experts.
void expert_mlp_forward(const MoeConfig& config, const TensorView& xs, const TensorView& offsets,
                        const ExpertWeights& weights, const TensorView& pre,
                        const TensorView& act, const TensorView& ys);

// dxs [R, H] and the weight gradients from dys [R, H] and the saved pre [R, fc1].
void expert_mlp_backward(const MoeConfig& config, const TensorView& xs, const TensorView& offsets,
                         const ExpertWeights& weights, const TensorView& pre,
                         const TensorView& dys, const TensorView& dxs, const ExpertGrads& grads);

}  // namespace moefuse::ref
