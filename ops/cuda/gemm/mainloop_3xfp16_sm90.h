// The two tensor-core GEMMs of the 3xFP16 engine (gemm_3xfp16.cu composes them), built from
// CUTLASS's SM90 pieces: TMA producer warp group, two wgmma consumer warp groups (cooperative),
// an mbarrier pipeline, and a stream-K/split-K tile scheduler.
//
// Operands are fp16, K-contiguous rows: a (M, K) with leading dimension lda, b (N, K) with ldb;
// d (M, N) float32, row-major, leading dimension N.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fusedops::cuda::gemm {

struct Fp16GemmShape {
  int m, n, k;
  int64_t lda, ldb;
  int splits;  // split-K factor (1: data-parallel tiles); see choose_splits in gemm_3xfp16.cu
};

// Output tiles (why: see mainloop_3xfp16_sm90.cu): the promoted GEMM's, and the cross GEMM's,
// twice as wide (it keeps one accumulator set, so a 128 x 256 tile fits the registers).
inline constexpr int kTileM = 128;
inline constexpr int kTileK = 64;
inline constexpr int kPromotedTileN = 128;
inline constexpr int kCrossTileN = 256;

// d = a . b^T, plain fp16 products with the tensor cores' float32 accumulation over all of K.
// For the 3xFP16 cross terms, which sit 2^-11 below the main term: their accumulation error
// does not show.
void cross_gemm_sm90(const Fp16GemmShape& shape, const void* a, const void* b, float* d,
                     void* workspace, size_t workspace_bytes, cudaStream_t stream);

// d = alpha * (a . b^T) + beta * c, with alpha and beta read from device memory (the scales are
// computed on the GPU: no host round trip). The product is "promoted": the tensor cores'
// partial of every 64-wide K step is added into a float32 register accumulator, which keeps
// the long sum as accurate as float32 arithmetic (issue 11: 9.7e-6 without, under 4e-7 with).
void promoted_gemm_sm90(const Fp16GemmShape& shape, const void* a, const void* b, const float* c,
                        float* d, const float* alpha, const float* beta, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream);

// Device workspace the scheduler needs for a split-K reduction of this shape (bytes).
size_t cross_gemm_workspace(const Fp16GemmShape& shape);
size_t promoted_gemm_workspace(const Fp16GemmShape& shape);

// Whether this build holds the sm_90a kernels (CUTLASS headers found, 90a in the arch list).
bool sm90_kernels_built();

}  // namespace fusedops::cuda::gemm
