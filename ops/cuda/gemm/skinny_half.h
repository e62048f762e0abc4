// The skinny-half engine: float32 y = x W^T for few rows of float16/bfloat16 x (small-batch
// serving), bound by reading W once, in one kernel of our own (no cuBLAS handle, math-mode or
// workspace calls on the host: a launch is the whole host cost). Kernel: gemv_half_kernel.cuh;
// launch with a fused epilogue: skinny_half_launch.cuh.
#pragma once

#include <ATen/core/Tensor.h>

#include "cuda/gemm/gemm_3xfp16.h"

namespace fusedops::cuda::gemm {

// The most rows of x it takes: with a fused epilogue, two 8-row tiles; plain (y), four. (The
// planner's thresholds below them are measured: planner.cpp.)
inline constexpr int64_t kSkinnyHalfFusedCapacity = 16;
inline constexpr int64_t kSkinnyHalfCapacity = 32;
// The float32 form's most rows (four 8-row tiles a block, two chunks of them; its shapes:
// heuristics.h).
inline constexpr int64_t kSkinnyPairCapacity = 64;

// What the kernel multiplies. float16/bfloat16: x and W as given, K a positive multiple of 8,
// 16-byte aligned base pointers (the planner's kSkinnyHalf rule). float32 (the planner's
// kSkinny3xFp16 rule, the exact-float32 contract): x and W as the 3xFP16 engine splits them
// (split_pair: W's fp16 pair from that engine's fold, x's per call with its rows' scales and
// guard), three products, any K.
struct SkinnyOperands {
  at::Tensor x, weight;  // the caller's, contiguous: (M, K) and (N, K), M at most the capacity
  SplitPair pair;        // float32 only
  bool is_pair() const { return pair.x_pair.defined(); }
};

// The operands of one call. False where the host knows a float32 weight failed the 3xFP16
// range check (gemm_3xfp16.h): the caller then runs its plan's fallback. weight_key owns W's cached fold.
bool skinny_operands(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_key,
                     bool cache_folds, SkinnyOperands& out);

// y (M, N) float32. sm_count: the device's SMs, to size the split of K inside a block.
void skinny_half_linear(const SkinnyOperands& ops, at::Tensor& y, int sm_count);

// For a row-reduction epilogue (the planner's skinny fused routes hosting
// plan::Epilogue::kRowReduction), which needs whole rows of y: the kernel split over K, and
// over chunks of rows past a block's tiles (heuristics.h's skinny_partials_shape), each block's
// sums left as a K-slice partial in Partials3xFp16's layout, for the epilogue to sum as it reads
// them (Partials3xFp16View; the float32 form's guarded rows are the epilogue's to recompute
// exactly, as on the 3xFP16 engine's partials). y is never written; any number of rows.
// skinny_half_launch.cuh's skinny_partials_then also runs the reader in the same launch.
void skinny_partials(const SkinnyOperands& ops, int sm_count, Partials3xFp16& out);

}  // namespace fusedops::cuda::gemm
