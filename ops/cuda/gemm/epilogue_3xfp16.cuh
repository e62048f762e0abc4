// The 3xFP16 engine's epilogue pieces in device code: the per-call guard's layout, the
// combination of split-K partials into y, and the exact recomputation of guarded rows. Shared by
// the engine's own kernels (gemm_3xfp16.cu) and by operators that fuse their epilogue with the
// combination (a row-reduction epilogue, plan::Epilogue::kRowReduction).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/cuda_helpers.cuh"

namespace fusedops::cuda::gemm {

// The guard: one int32 tensor per call, written by the activation split.
//   [0]                      number of guarded rows (zeroed before the split)
//   [1, 4)                   unused: keeps what follows 16-byte aligned (CUTLASS's per-row
//                            broadcast loads 4 floats at a time)
//   alpha  (M, padded to 4)  per-row 2^-(sx_r + sw) as float bits; 0 for a guarded row
//   beta   (M, padded to 4)  alpha 2^-11, the cross terms' weight
//   rows   (M)               the guarded rows, the first [0] of them valid
struct GuardLayout {
  int64_t m;
  __host__ __device__ int64_t padded() const { return (m + 3) / 4 * 4; }
  __host__ __device__ int64_t alpha() const { return 4; }
  __host__ __device__ int64_t beta() const { return 4 + padded(); }
  __host__ __device__ int64_t rows() const { return 4 + 2 * padded(); }
  __host__ __device__ int64_t size() const { return 4 + 2 * padded() + m; }
};

// Reads y out of split-K partials: the slices summed in slice order (deterministic), then
// alpha_r * main + beta_r * cross (what the unsplit path does in the promoted GEMM's epilogue).
// 0 for a guarded row. No alpha (the skinny-half engine's float16/bfloat16 partials): the
// main term itself, no row guarded.
struct Partials3xFp16View {
  const float* partials;
  int cross_slices, main_slices;
  int64_t n;      // columns of y
  int64_t count;  // M * N: the stride between slices
  const float* alpha;
  const float* beta;

  __device__ __forceinline__ bool guarded(int64_t row) const {
    return alpha != nullptr && alpha[row] == 0.0f;
  }

  // y[row, col .. col + 3], 16-byte loads (N a multiple of 4, as the engine requires). No cross
  // slices: the one-product form, alpha_r * main.
  __device__ __forceinline__ float4 at4(int64_t row, int64_t col) const {
    const int64_t i = row * n + col;
    float4 c = cross_slices > 0 ? load(i) : make_float4(0.f, 0.f, 0.f, 0.f);
    float4 m = load(cross_slices * count + i);
    // Unrolled so that a thread's loads of several slices are in flight together (a loop of
    // load-then-add waits out one L2 round trip per slice); the adds stay in slice order.
#pragma unroll 8
    for (int s = 1; s < cross_slices; ++s) add(c, load(s * count + i));
#pragma unroll 8
    for (int s = 1; s < main_slices; ++s) add(m, load((cross_slices + s) * count + i));
    if (alpha == nullptr) return m;
    const float a = alpha[row], b = beta[row];
    return make_float4(fmaf(a, m.x, b * c.x), fmaf(a, m.y, b * c.y), fmaf(a, m.z, b * c.z),
                       fmaf(a, m.w, b * c.w));
  }

 private:
  __device__ __forceinline__ float4 load(int64_t i) const {
    return *reinterpret_cast<const float4*>(partials + i);
  }
  __device__ __forceinline__ static void add(float4& a, float4 b) {
    a.x += b.x; a.y += b.y; a.z += b.z; a.w += b.w;
  }
};

// The exact path for a guarded row, one warp an output: sum_c x[c] w[c] in float64 (IEEE
// semantics for inf and nan, as the reference's SGEMM), rounded once; every lane gets it.
// float64, not float32: a guarded row can be one whose sum cancels heavily, where any float32
// order other than cuBLAS's lands a few 1e-4 off (measured on a row spanning 2^-40 .. 2^40).
// w_step: the distance between w's values (1, or W's row count where W is given transposed).
__device__ __forceinline__ float exact_dot(const float* __restrict__ x, const float* __restrict__ w,
                                           int64_t k, int lane, int64_t w_step = 1) {
  double acc = 0.0;
  for (int64_t c = lane; c < k; c += kWarpSize) {
    acc = fma(static_cast<double>(x[c]), static_cast<double>(w[c * w_step]), acc);
  }
  return static_cast<float>(warp_sum(acc));
}

}  // namespace fusedops::cuda::gemm
