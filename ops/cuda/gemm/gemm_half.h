// Native float16/bfloat16 GEMMs on Hopper: the model's own dtype on the tensor cores, float32
// accumulation, and an operator's epilogue applied to the float32 accumulators in registers,
// so that the intermediate y = x W^T is never written ("accurate" numerics: docs/MODELS.md).
//
// Pieces: the plain SM90 mainloop of sm90_gemm_types.cuh (TMA producer, 2 x 1 clusters,
// persistent) in its ping-pong form (two wgmma consumer warp groups on alternate 128 x 128 x 64
// tiles: one's epilogue overlaps the other's mainloop), instantiated for fp16 and bf16
// operands, and one epilogue per operator:
//   model 62  bias, GroupNorm, LeakyReLU, x2 (epilogue_groupnorm_sm90.cuh)
//   model 39  in training: y and its column moments by 128-row tiles (epilogue_moments_sm90.cuh,
//             on the cooperative 128 x 256 kernel: its 256 threads meet over a tile's columns)
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

// Model 39 in training: y = x W^T as float32 (M, N) row-major, and for each kMomentsTileRows-row
// tile its column means and sums of squared deviations from them, (ceil(M / 128), N) float32
// each (cuda/tile_moments.h; the BatchNorm pass merges them and reads y once, to normalize).
// N a multiple of 4; x, W as for half_groupnorm_gemm_sm90. Runs on the current device (sm_90).
void half_moments_gemm_sm90(HalfType type, const Fp16GemmShape& shape, const void* x,
                            const void* w, float* y, float* tile_mean, float* tile_m2,
                            cudaStream_t stream);

// Whether the group size suits the fused epilogue (the register reduction's layout rule).
inline bool half_groupnorm_group_ok(int64_t group_size) {
  return group_size >= 16 && group_size <= kHalfTileN && (group_size & (group_size - 1)) == 0;
}

}  // namespace fusedops::cuda::gemm
