// The 3xFP16 engine's tensor-core GEMMs (gemm_3xfp16.cu composes them), built from CUTLASS's
// SM90 pieces: TMA producer warp group, two wgmma consumer warp groups (cooperative), an
// mbarrier pipeline, a persistent tile scheduler. One kernel a file (sm90_*.cu), so that a
// build compiles them in parallel; their common types are in sm90_gemm_types.cuh.
//
// Operands are fp16 with K contiguous: a (M, K) with leading dimension lda, b (N, K) with ldb;
// d (M, N) float32, row-major with leading dimension N. `batches` > 1 runs independent GEMMs
// whose a and b start batch_stride_ab values apart (consecutive K-slices of one operand: the
// engine's split-K) and whose outputs lie batch_stride_d floats apart.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/gemm/heuristics.h"

namespace fusedops::cuda::gemm {

struct Fp16GemmShape {
  int m, n, k;
  int batches;
  int64_t lda, ldb;
  int64_t batch_stride_ab, batch_stride_d;
  int sm_count;  // the device's SMs (plan::DeviceFacts): the persistent grid's size
};

// d = a . b^T, plain fp16 products with the tensor cores' float32 accumulation over all of K.
// For the 3xFP16 cross terms, which sit 2^-11 below the main term: their accumulation error
// does not show.
void cross_gemm_sm90(const Fp16GemmShape& shape, const void* a, const void* b, float* d,
                     cudaStream_t stream);

// d[r] = alpha[r] * (a . b^T)[r] + beta[r] * c[r] (batches == 1; c may be d), with alpha and
// beta per row (M floats each, 16-byte aligned) in device memory: the per-row scales of x's
// split, computed on the GPU. The product is "promoted": the tensor cores' partial of every
// 64-wide K step is added into a float32 register accumulator, which keeps the long sum as
// accurate as float32 arithmetic (issue 11: error 9.7e-6 at K = 8192 without, 2.5e-7 with).
void promoted_gemm_sm90(const Fp16GemmShape& shape, const void* a, const void* b, const float* c,
                        float* d, const float* alpha, const float* beta, cudaStream_t stream);

// d[r] = alpha[r] * (a . b^T)[r] (batches == 1), without promotion (its accumulation error sits
// far below the operands' fp16 rounding): the main term alone, for the engine's one-product
// form (gemm_3xfp16.h); the cross GEMM's tile (kCrossTileN wide).
void scaled_gemm_sm90(const Fp16GemmShape& shape, const void* a, const void* b, float* d,
                      const float* alpha, cudaStream_t stream);

// scaled_gemm_sm90 with the column-moments epilogue (epilogue_moments_sm90.cuh): d as there,
// and for each tile of kTileM rows its column means and sums of squared deviations from them,
// (ceil(M / kTileM), N) float32 each (tile_mean, tile_m2). N a multiple of 4.
void scaled_moments_gemm_sm90(const Fp16GemmShape& shape, const void* a, const void* b, float* d,
                              const float* alpha, float* tile_mean, float* tile_m2,
                              cudaStream_t stream);

// d = a . b^T with the same promotion, no epilogue arithmetic: the split-K partials.
void promoted_partial_gemm_sm90(const Fp16GemmShape& shape, const void* a, const void* b,
                                float* d, cudaStream_t stream);

// Whether this build holds the sm_90a kernels (CUTLASS headers found, 90a in the arch list).
bool sm90_kernels_built();

}  // namespace fusedops::cuda::gemm
