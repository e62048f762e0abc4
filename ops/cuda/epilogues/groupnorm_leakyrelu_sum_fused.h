// GroupNorm -> LeakyReLU -> x2 inside a GEMM, y never written (a group-statistics epilogue:
// plan::Epilogue::kGroupStatistics), on the two engines that host it:
//   the Hopper half GEMM (groupnorm_leakyrelu_sum_sm90.cu): a group reduced in registers;
//   the skinny-half kernel at few rows (groupnorm_leakyrelu_sum_skinny.cu): a block owns whole
//   groups in its shared-memory tile.
// The math is math/groupnorm_leakyrelu_sum.h, as in the unfused pass. ATen-free (the sm90
// file includes it beside CUTLASS): tensors are only named here.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/gemm/gemm_half.h"

namespace at {
class Tensor;
}

namespace fusedops::cuda {
namespace gemm {
struct SkinnyOperands;
}

// out = 2 * LeakyReLU(GroupNorm(x W^T + bias)), x (M, K) and W (N, K) in `type` (shape's
// leading dimensions); out (M, N) row-major and bias, gamma, beta (N) in `type`, or float32
// (float32_out: the operator's autocast form). group_size with sm90_group_ok, N a multiple of
// it, K and the leading dimensions multiples of 8, the operands 16-byte aligned (TMA), the
// per-channel vectors and out aligned to two of their elements. Current device sm_90.
struct GroupNormGemmArgs {
  const void* bias;
  const void* gamma;
  const void* beta;
  int group_size;
  float eps;
  float negative_slope;
  void* out;
  bool float32_out = false;
};
void groupnorm_leakyrelu_sum_gemm_sm90(gemm::HalfType type, const gemm::Fp16GemmShape& shape,
                                       const void* x, const void* w, const GroupNormGemmArgs& e,
                                       cudaStream_t stream);

// The register reduction's layout rule: a power of two from one 16-column block to the tile.
inline bool sm90_group_ok(int64_t group_size) {
  return group_size >= 16 && group_size <= gemm::kHalfTileN &&
         (group_size & (group_size - 1)) == 0;
}

// The same at few rows, on the skinny-half kernel's tile: group_size with skinny_group_ok (for
// x's dtype), N a multiple of it; bias, gamma, beta (N) and out (M, N) contiguous in x's dtype,
// or all float32 (the autocast form, and float32 itself).
void groupnorm_leakyrelu_sum_skinny(const gemm::SkinnyOperands& ops, const at::Tensor& bias,
                                    int64_t group_size, const at::Tensor& gamma,
                                    const at::Tensor& beta, double eps, double negative_slope,
                                    at::Tensor& out, int sm_count);

// A block owns one whole group: the sm90 rule's groups; in float32, whose block holds three
// sets of accumulators, 16 or 32 (more spill registers).
inline bool skinny_group_ok(int64_t group_size, bool float32) {
  return group_size == 16 || group_size == 32 ||
         (!float32 && (group_size == 64 || group_size == 128));
}

}  // namespace fusedops::cuda
