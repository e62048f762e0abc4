// Native float16/bfloat16 GEMMs on Hopper: the model's own dtype on the tensor cores, float32
// accumulation, and an operator's epilogue applied to the float32 accumulators in registers,
// so that the intermediate y = x W^T is never written ("accurate" numerics: docs/MODELS.md).
//
// Pieces: the plain SM90 mainloop of sm90_gemm_types.cuh (TMA producer, 2 x 1 clusters,
// persistent) in its ping-pong form (two wgmma consumer warp groups on alternate 128 x 128 x 64
// tiles: one's epilogue overlaps the other's mainloop), instantiated for fp16 and bf16
// operands, and one epilogue per operator:
//   model 62  bias, GroupNorm, LeakyReLU, x2 (epilogue_groupnorm_sm90.cuh)
// ATen-free like the other sm90 entry points; the operator files check their tensors.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/gemm/mainloop_3xfp16_sm90.h"

namespace fusedops::cuda::gemm {

enum class HalfType { kFloat16, kBFloat16 };

// out = 2 * LeakyReLU(GroupNorm(x W^T + bias)), x (M, K) with leading dimension shape.lda and
// W (N, K) with shape.ldb in `type`; out (M, N) row-major and bias, gamma, beta (N) in `type`,
// or float32 (float32_out: the operator's autocast form). Requirements: group_size a power of
// two in [16, kHalfTileN] (half_groupnorm_group_ok), N a multiple of it, K and the leading
// dimensions multiples of 8 and the operands 16-byte aligned (TMA), the per-channel vectors
// and out aligned to two of their elements. Runs on the current device, which must be sm_90.
struct GroupNormEpilogueArgs {
  const void* bias;
  const void* gamma;
  const void* beta;
  int group_size;
  float eps;
  float negative_slope;
  void* out;
  bool float32_out = false;
};
void half_groupnorm_gemm_sm90(HalfType type, const Fp16GemmShape& shape, const void* x,
                              const void* w, const GroupNormEpilogueArgs& epilogue,
                              cudaStream_t stream);

// Whether the group size suits the fused epilogue (the register reduction's layout rule).
inline bool half_groupnorm_group_ok(int64_t group_size) {
  return group_size >= 16 && group_size <= kHalfTileN && (group_size & (group_size - 1)) == 0;
}

}  // namespace fusedops::cuda::gemm
