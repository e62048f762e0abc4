// The 3xFP16 GEMM engine: float32-accurate y = x W^T at the fp16 tensor-core rate on Hopper.
//
// Each float32 operand v is scaled by a power of two (exact) so that its largest value sits in
// [2^14, 2^15): x row by row (each row of x its own scale, so that one row's magnitude never
// costs another row bits), W as a whole. Each scaled value is split into two fp16 numbers:
// hi = fp16(v) and lo = fp16((v - hi) * 2^11), together 22 significant bits. Then, for row r,
//   y[r] = alpha_r * (x_hi W_hi^T + 2^-11 (x_hi W_lo^T + x_lo W_hi^T))[r],  alpha_r = 2^-(sx_r+sw),
// computed as two fp16 GEMMs: the cross terms as one GEMM over 2K ([x_hi | x_lo] against
// [W_lo | W_hi]), and the main term x_hi W_hi^T with per-K-step promotion into float32 registers,
// whose epilogue applies the per-row alpha and beta = alpha 2^-11 (sm90_kernels.h).
// Error at 1024 x 8192 x 8192: see docs/PERFORMANCE.md.
//
// Pieces, each named:
//   weight preparation  prepare_weight_3xfp16: range check, scale and split of W, all on the
//                       GPU (no host sync: a training step refolds every call), cached as ONE
//                       fold of the engine's own kind (the fp16 pair is one W's bytes).
//   activation split    per call, on the GPU, one pass over x: a block reads its row's range,
//                       then splits the row (the second read hits L2); no host sync.
//   range guard         rows of x the split cannot carry at float32 accuracy (inf/nan; a row
//                       whose nonzero values span more than 2^30; a row whose scale would leave
//                       float32's normal range) get alpha = 0 and are recomputed exactly in
//                       float64 afterwards: listed on the GPU for fixup_rows where the engine
//                       writes y, found by their alpha in the fused epilogue of an operator
//                       (epilogue_3xfp16.cuh). A weight that fails the
//                       same check guards every row until its verdict, copied to the host
//                       asynchronously, is there; from then on its GEMMs take the exact cuBLAS
//                       path instead (the plan's fallback, cuda/linear.cu).
//   mainloops           sm90_kernels.h (CUTLASS SM90 pieces).
//   epilogues           y itself (per-row alpha/beta in the promoted GEMM's epilogue, or the
//                       split-K combination), or the raw K-slice partials for an operator that
//                       fuses its own epilogue (linear_nt_3xfp16_partials).
//
// The one-product form (Products::kOne) runs the main term alone, alpha_r x_hi W_hi^T, with the
// same scales, guard and weight fold: each operand rounded once to fp16's 11 significant bits,
// as TF32 rounds it to its 11, at twice TF32's rate: the GEMM for torch's float32 matmul
// precision "high" (plan/planner.cpp). x's split writes its hi part alone, and the GEMM is
// unpromoted (scaled_gemm_sm90: its accumulation error is far below that rounding); the
// split-K partials of few output tiles stay promoted.
//
// The two-product form (Products::kTwo) adds the cross term x_hi W_lo (one GEMM over kp):
// alpha_r (x_hi W_hi^T + 2^-11 x_hi W_lo^T). x is rounded as TF32 rounds it, W is carried to
// 22 bits: for a folded weight (a pooled row stands for the mean of several of the reference's
// rows, whose TF32 roundings the reference averages), TF32's accuracy needs W kept exact.
#pragma once

#include <ATen/core/Tensor.h>

#include "cuda/gemm/epilogue_3xfp16.cuh"
#include "cuda/gemm/heuristics.h"
#include "cuda/tile_moments.h"

namespace fusedops::cuda::gemm {

// When the engine can run is the planner's rule (plan/planner.cpp: an sm_90 device with this
// build's sm_90a kernels, N a multiple of 4, 32-bit sizes).
//
// y (M, N) float32 = x (M, K) W (N, K)^T. x and weight contiguous float32 on the current
// device; weight_key owns the cached fold; sm_count: the device's SMs (plan::DeviceFacts), for
// the split-K slices and the grids (heuristics.h). Returns false (y untouched) when the host
// knows the weight failed the range check (its fold's verdict arrived), or, during a CUDA-graph
// capture, when its fold is not made yet (folds are not made in a capture): the caller then
// runs its exact path.
bool linear_nt_3xfp16(const at::Tensor& x, const at::Tensor& weight,
                      const at::Tensor& weight_key, bool cache_folds, Products products,
                      int sm_count, at::Tensor& y);

// The one-product form with a column-moments epilogue (epilogue_moments_sm90.cuh): y as
// linear_nt_3xfp16 writes it and, from the GEMM's epilogue, each kMomentsTileRows-row tile's
// column means and sums of squared deviations from them, into `moments` (made for
// kMomentsTileRows). Only where the GEMM runs unsplit (the planner's kFp16x1Fused rule,
// heuristics.h's slices). Their `changed_rows` is the engine's guard (its count first): the rows
// recomputed exactly after the moments were taken. Returns false where linear_nt_3xfp16 does
// (y untouched).
inline constexpr int64_t kMomentsTileRows = kTileM;
bool linear_nt_1xfp16_moments(const at::Tensor& x, const at::Tensor& weight,
                              const at::Tensor& weight_key, bool cache_folds, int sm_count,
                              at::Tensor& y, TileMoments& moments);

// The product left before its combination, for a row-reduction epilogue, which needs whole
// rows of y and so combines the K-slices itself, in the same pass (Partials3xFp16View reads
// them; guarded rows, alpha 0, are the epilogue's to recompute exactly): y is never written.
struct Partials3xFp16 {
  at::Tensor partials;  // float32, (cross_slices + main_slices) slices of M x N, cross first
                        // (no cross slices in the one-product form)
  at::Tensor guard;     // per-row alpha and beta (GuardLayout; no list: alpha 0 marks a row)
  Partials3xFp16View view;  // y's values as an epilogue reads them (pointers into the above)
};

// As linear_nt_3xfp16, but leaves `out` instead of y. Returns false where linear_nt_3xfp16
// does (out untouched).
bool linear_nt_3xfp16_partials(const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& weight_key, bool cache_folds, Products products,
                               int sm_count, Partials3xFp16& out);

// x and W split for another engine's kernel (the skinny kernel's float32 form, skinny_half.h):
// each row two fp16 halves kp (K padded to the engine's K step) apart. Returns false where
// linear_nt_3xfp16 does (nothing split).
struct SplitPair {
  at::Tensor x_pair;  // (M, 2 kp) fp16: [hi | lo], each row scaled by its own power of two
  at::Tensor w_pair;  // (N, 2 kp) fp16: [lo | hi], scaled once (W's cached fold)
  at::Tensor guard;   // the rows' alpha and beta (GuardLayout; no list: alpha 0 marks a row)
  int64_t kp = 0;
};
bool split_pair(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_key,
                bool cache_folds, SplitPair& out);

}  // namespace fusedops::cuda::gemm
