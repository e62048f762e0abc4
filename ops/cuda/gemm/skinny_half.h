// The skinny-half engine: float32 y = x W^T for few rows of float16/bfloat16 x (small-batch
// serving), bound by reading W once, in one kernel of our own (no cuBLAS handle, math-mode or
// workspace calls on the host: a launch is the whole host cost). Kernel: gemv_half_kernel.cuh.
#pragma once

#include <ATen/core/Tensor.h>

#include "cuda/gemm/gemm_3xfp16.h"

namespace fusedops::cuda::gemm {

// The most rows of x it takes: with an operator's epilogue, two 8-row tiles; plain (y), four.
// The planner's thresholds (planner.h) are measured (bench/gemv_floor.cu, n = k = 8192, H100):
// at m = 1..16 the kernel took 0.0571-0.0592 ms against cuBLAS's 0.0592-0.0596 with L2 emptied
// by a write, 0.0519-0.0531 against 0.0491-0.0501 by a read (a plain read of W: 0.0529 and
// 0.0468); from 17 rows it loses at that width (0.066-0.074 against 0.050-0.060): its re-reads
// of x through L2 grow with the rows of x, where cuBLAS's tiles share them. A narrow W has
// few blocks to re-read x: there the plain form runs to 32 rows.
inline constexpr int64_t kSkinnyHalfFusedCapacity = 16;
inline constexpr int64_t kSkinnyHalfCapacity = 32;
// The float32 form's most rows (four 8-row tiles; its shapes: skinny_half.cu's launch_pair).
inline constexpr int64_t kSkinnyPairCapacity = 32;

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

// The operands of one call. False when a float32 weight fails the 3xFP16 range check: the
// caller then runs its plan's fallback. weight_key owns W's cached fold.
bool skinny_operands(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_key,
                     bool cache_folds, SkinnyOperands& out);

// y (M, N) float32. sm_count: the device's SMs, to size the split of K inside a block.
void skinny_half_linear(const SkinnyOperands& ops, at::Tensor& y, int sm_count);

// Model 62 at small batch, the whole operator in one kernel: out = 2 * LeakyReLU(GroupNorm(
// x W^T + bias)) (epilogue_groupnorm_skinny.cuh). group_size with skinny_half_group_ok (for
// x's dtype), N a multiple of it; bias, gamma, beta (N) and out (M, N) contiguous in x's
// dtype, or all float32 (the operator's autocast form, and float32 itself).
void skinny_half_groupnorm(const SkinnyOperands& ops, const at::Tensor& bias, int64_t group_size,
                           const at::Tensor& gamma, const at::Tensor& beta, double eps,
                           double negative_slope, at::Tensor& out, int sm_count);

// Model 39 in eval mode at small batch, the whole operator in one kernel: out = BatchNorm_eval(
// (x W^T + bias) * scale) (epilogue_batchnorm_skinny.cuh). scale (N,) with any stride; bias,
// gamma, beta, running_mean, running_var (N) contiguous and out (M, N), all in x's dtype or
// all float32 (the autocast form).
void skinny_half_batchnorm_eval(const SkinnyOperands& ops, const at::Tensor& bias,
                                const at::Tensor& scale, const at::Tensor& gamma,
                                const at::Tensor& beta, const at::Tensor& running_mean,
                                const at::Tensor& running_var, double eps, at::Tensor& out,
                                int sm_count);

// A block owns one whole group: 16, 32, 64 or 128 channels (the same rule as the Hopper half
// GEMM's fused epilogue, gemm_half.h's half_groupnorm_group_ok); in float32, whose block holds
// three sets of accumulators, 16 or 32 (more spill registers).
inline bool skinny_half_group_ok(int64_t group_size, bool float32) {
  return group_size == 16 || group_size == 32 ||
         (!float32 && (group_size == 64 || group_size == 128));
}

}  // namespace fusedops::cuda::gemm
