// Ragged-M grouped GEMM with FP8 operands, DeepSeek-V3 recipe (Hopper, sm_90a): E4M3 values,
// activations scaled per 1x128 group along K, weights per 128x128 block, fp32 scales, fp32
// accumulation promoted into fp32 registers once per 128 of K (one scale group).
//
//   a         [M_cap, K]                       e4m3  rows of all experts, expert-contiguous
//   a_scales  [ceil(K/128), fp8_scale_rows(M_cap)] fp32  K-major ("transposed"): entry [g, r]
//                                                    scales a[r, 128g .. 128g+127]
//   b         [E, N, K]                        e4m3  one weight per expert, K contiguous
//   b_scales  [E, ceil(N/128), ceil(K/128)]    fp32  entry [e, i, g] scales the 128x128 block
//                                                    b[e, 128i.., 128g..]
//   offsets   [E+1]                            int32 device; expert e owns rows
//                                                    [offsets[e], offsets[e+1])
//   d         [M_cap, N_out]                   bf16, fp32 or e4m3; N_out = N / 2 for GLU, N
//                                                    otherwise
//   d_scales  [ceil(N_out/128), fp8_scale_rows(M_cap)] fp32  e4m3 d only, K-major as a_scales
//
// With deq(a)[r, k] = a[r, k] · a_scales[k/128, r] and deq(b)[e, n, k] = b[e, n, k] ·
// b_scales[e, n/128, k/128], for every row r of expert e:
//   h = deq(a)[r] · deq(b)[e]ᵀ (+ bias[e]);   D[r] = epilogue(h) (· row_scale[r]).
// A last group shorter than 128 (K or N not a multiple of 128) is a group of its own. These are
// the scales moefuse::quantize_fp8_blockwise_1x128 / _128x128 (moefuse/quant.h) produce, except
// that the activation scales are stored K-major: transpose_fp8_activation_scales converts.
//
// Why K-major activation scales (as DeepGEMM): the kernel loads the 128 scales of a tile's rows
// for one K group with a single TMA box, which needs them contiguous; the row stride of that
// tensor must be a multiple of 16 bytes, hence fp8_scale_rows(M_cap) = M_cap rounded up to 4
// (the padding entries are never read).
//
// Epilogues as in moefuse/grouped_gemm.h (GemmEpilogue, Activation; GLU weights column-interleaved
// by glu_interleaved_row: interleave the weight, then quantise it, so that the 128x128 blocks and
// their scales are those of the interleaved rows). Optional per-expert fp32 bias [E, N], added to h
// before the activation (in h's column order, so interleaved for GLU), as the BF16 kernel's.
// Rows outside [offsets[0], offsets[E]) of D (and of pre_activation) are never written; no
// per-expert padding is needed. With bf16 d and an activation, h (+ bias) is rounded to bf16
// before the activation and row scale (as in the BF16 grouped GEMM: the saved pre-activation);
// the linear epilogue rounds once, after the row scale; with fp32 d nothing is rounded.
// Optional pre-activation output (kActivation with bf16 or e4m3 d, as grouped_gemm's
// pre_activation): [M_cap, N] bf16 = bf16(h + bias) in h's column order (interleaved for GLU),
// exactly the values the activation reads, written by the same epilogue; the layer caches it for
// the backward.
//
// E4M3 output (d e4m3 with d_scales; kDeepSeek only): D quantised in 1x128 groups along its
// columns, ready to be the `a` and `a_scales` of the next FP8 GEMM (FC1's act for FC2) with no
// pass over a bf16 copy. The codes and scales are bit for bit quantize_fp8_blockwise_1x128 of the
// bf16 D the same call would write, its scales transposed to the K-major layout (scales of rows
// outside the experts, and the padding columns, are not written). With a GLU a group spans two
// n-blocks of the kernel's 128-column tiles; the two CTAs of a cluster compute them side by side
// and exchange each row's amax through distributed shared memory (src/cuda/gemm/fp8/
// e4m3_drain.cuh). Extra requirement (InvalidArgument names "d"): N_out % 16 == 0.
//
// Requirements (validated, InvalidArgument names the argument): K > 0 and K % 16 == 0 (TMA's
// 16-byte row stride of e4m3); N > 0 and N % 8 == 0 (N % 16 == 0 for GLU); contiguous tensors,
// a, a_scales, b and d 16-byte aligned; 1 <= E <= kGroupedGemmMaxExperts.
//
// MXFP8 recipe (recipe = Fp8Recipe::kMxfp8; OCP MX: E4M3 values, one UE8M0 power-of-two scale
// per 32 consecutive elements along K for both operands). Only the scale tensors change:
//   a_scales  [K/32, mxfp8_scale_rows(M_cap)]  e8m0  K-major: entry [g, r] scales a[r, 32g .. 32g+31]
//   b_scales  [E, K/32, N]                     e8m0  K-major per expert: entry [e, g, n] scales
//                                                    b[e, n, 32g .. 32g+31]
// deq(a)[r, k] = a[r, k] · 2^(a_scales[k/32, r] - 127), deq(b)[e, n, k] = b[e, n, k] ·
// 2^(b_scales[e, k/32, n] - 127), and D as above. quantize_mxfp8 writes row-major scales
// ([rows, K/32]); transpose_mxfp8_activation_scales / transpose_mxfp8_weight_scales convert.
// Why K-major (chosen for a native FP8 kernel, which the emulation below replaces; it keeps the
// layout): a stage (128 rows × 128 of K) needs its 4 × 128 scales of A and of B as single TMA
// boxes [4, 128] of bytes; the row stride of a TMA tensor must be a multiple of 16 bytes, hence
// M_cap rounded up to 16 for A (padding never read) and N % 16 == 0 for B.
// Extra requirements (InvalidArgument names "b"): K % 32 == 0 (whole MX blocks), N % 16 == 0;
// bias, if given, 16-byte aligned (the bf16 GEMM below loads it so).
//
// How the GPU computes the MXFP8 recipe. Hopper's tensor cores have no block-scaled MMA, and
// emulating the per-32 scales with FP8 wgmma means a promotion every 32 of K with a per-column
// weight scale (two fp32 operations per accumulator per 32 of K, several times the DeepSeek
// recipe's promotion work, whose loop is already issue-bound). Instead the emulation is exact:
// an E4M3 value (4 significant bits) times a power of two is a bf16 value (8 significant bits,
// fp32's exponent range), so grouped_gemm_fp8 runs
//   1. two dequantise passes into `workspace`: bf16 deq(a) [M_cap, K] (all M_cap rows) and bf16
//      deq(b) [E, N, K], reading the K-major scale layouts above as they are;
//   2. the BF16 grouped GEMM (moefuse/grouped_gemm.h) on them with the same epilogue, bias, row
//      scale and pre-activation.
// Every product of the GEMM is then exact and accumulates in the tensor cores' fp32-range
// accumulator (not IEEE fp32 summation: groups of products aligned and truncated): D is the
// reference's (the fp64 sum of the exact dequantised products, src/ref/grouped_gemm_fp8.h) up to
// that accumulation, with bf16 d rounded like the BF16 GEMM's. Cost: the passes move M_cap·K·3
// and E·N·K·3 bytes (read e4m3, write bf16) and the GEMM runs at BF16 tensor-core speed, not FP8's; the
// workspace holds M_cap·K·2 + E·N·K·2 bytes (grouped_gemm_fp8_workspace_size).
// The range ends, where bf16 (like fp32) cannot hold deq(x) exactly and the fp64 reference can;
// quantize_mxfp8's output reaches them only in blocks holding a value within about 3 % of
// FLT_MAX (x / 2^120 rounds up to 256) or with amax below about 2^-113:
//   - |deq(x)| >= 2^128 (e.g. 448 · 2^127) is ±Inf, as in fp32 and in dequantize_mxfp8; D then
//     holds ±Inf or NaN in that row (of a) or column (of b) where the reference may be finite;
//   - |deq(x)| < 2^-126 is a bf16 subnormal (spacing 2^-133, where fp32's is 2^-149): exact when a
//     multiple of 2^-133 (always from 2^-130 up), else rounded to nearest even, to 0 at or below
//     2^-134 (e.g. 2^-9 · 2^-127 = 2^-136); the reference keeps it exactly;
//   - NaN codes (E4M3 S.1111.111, UE8M0 0xFF) give NaN, as in the reference.
//
// Workspace (kMxfp8 on the GPU only; the CPU reference and kDeepSeek ignore it): at least
// grouped_gemm_fp8_workspace_size(args) bytes, 256-byte aligned, the bytes written (below)
// overlapping no tensor of args (validated: InvalidArgument names "workspace"). After the call it
// holds deq(a) [M_cap, K] bf16 at offset 0 and deq(b) [E, N, K] bf16 at M_cap·K·2 rounded up to
// 256 bytes.
//
// grouped_gemm_fp8 is asynchronous on `stream`, allocates nothing, never synchronises and reads
// no device memory on the host: CUDA-graph safe, like grouped_gemm.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "moefuse/config.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/tensor.h"
#include "moefuse/workspace.h"

namespace moefuse {

inline constexpr int64_t kFp8ScaleGroup = 128;  // 1x128 activation groups, 128x128 weight blocks

// Columns of the K-major activation-scale tensor for M_cap rows: a multiple of 4 (16 bytes).
constexpr int64_t fp8_scale_rows(int64_t m_cap) { return (m_cap + 3) / 4 * 4; }

// Scale groups along an extent: ceil(extent / 128).
constexpr int64_t fp8_scale_groups(int64_t extent) {
  return (extent + kFp8ScaleGroup - 1) / kFp8ScaleGroup;
}

// Which block-scaling recipe the operands carry (the header comment describes both).
enum class Fp8Recipe : uint8_t {
  kDeepSeek,  // 1x128 activation groups, 128x128 weight blocks, fp32 scales
  kMxfp8,     // 1x32 blocks along K for both operands, UE8M0 scales
};

inline constexpr int64_t kMxfp8ScaleGroup = 32;  // elements of K per MXFP8 scale

// Columns of the K-major MXFP8 activation-scale tensor for M_cap rows: a multiple of 16 (bytes).
constexpr int64_t mxfp8_scale_rows(int64_t m_cap) { return (m_cap + 15) / 16 * 16; }

struct GroupedGemmFp8Args {
  TensorView a;         // [M_cap, K] e4m3
  TensorView a_scales;  // [ceil(K/128), fp8_scale_rows(M_cap)] fp32, K-major
  TensorView b;         // [E, N, K] e4m3 (GLU: interleaved rows, quantised after interleaving)
  TensorView b_scales;  // [E, ceil(N/128), ceil(K/128)] fp32
  TensorView offsets;   // [E+1] int32
  TensorView d;         // [M_cap, N_out] bf16, fp32 or e4m3 (E4M3 output, header comment)

  GemmEpilogue epilogue = GemmEpilogue::kLinear;
  Activation activation = Activation::kSwiGLU;  // used with kActivation
  ClampedSwiGLUParams clamped_swiglu{};          // used with Activation::kClampedSwiGLU

  TensorView row_scale;  // optional [M_cap] fp32: multiplies the final output (routing prob.)
  TensorView bias;       // optional [E, N] fp32: added to h before the epilogue's activation
  // optional [M_cap, N] bf16 (kActivation, bf16 or e4m3 d): bf16(h + bias), h's (interleaved)
  // columns
  TensorView pre_activation;

  // kMxfp8: a_scales and b_scales are the e8m0 tensors described in the header comment.
  Fp8Recipe recipe = Fp8Recipe::kDeepSeek;
  // kMxfp8 on the GPU: scratch for the bf16 operands (header comment, "Workspace").
  Workspace workspace{};

  // e4m3 d only: [ceil(N_out/128), fp8_scale_rows(M_cap)] fp32, D's 1x128 scales, K-major
  TensorView d_scales{};
};

// Bytes of GroupedGemmFp8Args::workspace: 0 for kDeepSeek; for kMxfp8 the bf16 copies of a
// ([M_cap, K]) and b ([E, N, K]), each rounded up to 256 bytes. Reads the recipe and the shapes
// of a and b only (InvalidArgument names "recipe", or "a" / "b" for a wrong rank); no CUDA call.
size_t grouped_gemm_fp8_workspace_size(const GroupedGemmFp8Args& args);

// kDeepSeek: the fused kernel (TMA + FP8 wgmma, persistent grid, promotion per 128 of K, epilogue
// in registers). kMxfp8: the exact bf16 emulation above. All tensors Device::kCuda.
void grouped_gemm_fp8(const GroupedGemmFp8Args& args, cudaStream_t stream);

// Validates args as grouped_gemm_fp8 does, with every tensor on `device` (the CPU reference
// validates kCpu views with the same rules). No CUDA call. Throws InvalidArgument.
void validate_grouped_gemm_fp8(const GroupedGemmFp8Args& args, Device device = Device::kCuda);

// Row-major activation scales [M, ceil(K/128)] (as quantize_fp8_blockwise_1x128 writes them) to
// the K-major layout [ceil(K/128), fp8_scale_rows(M)]; the padding columns are set to 1. Host
// tensors (Device::kCpu) only; src and dst must not alias.
void transpose_fp8_activation_scales(const TensorView& src, const TensorView& dst);

// MXFP8 scales from quantize_mxfp8's row-major layout to the GEMM's K-major ones (host tensors,
// e8m0, not aliasing): activations [M, K/32] -> [K/32, mxfp8_scale_rows(M)], padding columns
// set to 2^0; weights [E, N, K/32] -> [E, K/32, N].
void transpose_mxfp8_activation_scales(const TensorView& src, const TensorView& dst);
void transpose_mxfp8_weight_scales(const TensorView& src, const TensorView& dst);

}  // namespace moefuse
