// Native float16/bfloat16 GEMMs on Hopper: the operands' own dtype on the tensor cores, float32
// accumulation, and an epilogue on the float32 accumulators, so that nothing is rounded to the
// operands' dtype before it ("accurate" numerics: docs/MODELS.md). The engine with any register
// epilogue: sm90_register_gemm.cuh (its users: ops/cuda/epilogues/*_sm90.cu). Here the one it
// hosts for every caller, the column moments. ATen-free like the other sm90 entry points; the
// operator files check their tensors.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/gemm/sm90_kernels.h"

namespace fusedops::cuda::gemm {

enum class HalfType { kFloat16, kBFloat16 };

// y = x W^T as float32 (M, N) row-major, and for each kTileM-row tile its column means and
// sums of squared deviations from them, (ceil(M / kTileM), N) float32 each (cuda/tile_moments.h),
// on the cooperative kMomentsTileN-wide tile (epilogue_moments_sm90.cuh). x (M, K) and W (N, K)
// in `type`, K and the leading dimensions multiples of 8, 16-byte aligned (TMA); N a multiple
// of 4. Runs on the current device (sm_90).
void half_moments_gemm_sm90(HalfType type, const Fp16GemmShape& shape, const void* x,
                            const void* w, float* y, float* tile_mean, float* tile_m2,
                            cudaStream_t stream);

}  // namespace fusedops::cuda::gemm
