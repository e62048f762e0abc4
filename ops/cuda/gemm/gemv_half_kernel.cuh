// The weight-streaming kernel for few rows in float16/bfloat16 (the skinny-half engine,
// skinny_half.h): y (m, n) = x (m, k) W (n, k)^T with m <= 8 kTiles, float32 accumulation. At
// such m the GEMM is a read of W (128 MiB at 8192 x 8192: 40 us at 3.35 TB/s), which cuBLAS
// measured at 57% of HBM bandwidth (59 us at m = 1..64, H100, L2 flushed by a write). Kept free
// of ATen so a standalone benchmark can include it.
//
// The product runs on the tensor cores (mma.sync m16n8k16, float accumulators) with W as the
// 16-row operand and 8 rows of x as the other, so one MMA serves 16 rows of W for up to 8 rows
// of x. Each thread loads W and x in 16-byte vectors: the K order inside an MMA is free as long
// as both operands use the same one, so a thread's 8 consecutive k of one W row feed two MMAs
// (their k slots 2t, 2t+1, 2t+8, 2t+9, t = lane % 4), and the same 8 k of one x row are its B
// fragment. A block of kWarps warps owns 16 x kRowTiles rows of W and splits K between its warps in
// interleaved 32-wide steps (a block of 8 reads 256 contiguous k of each row per round), then sums
// the warps' partial results in shared memory in warp order: deterministic, no workspace, one
// kernel. Rows of W or x past the end are clamped to the last one (read, never stored); k past
// the end reads nothing (K a multiple of 8). The block's tile of y, summed in shared memory, is
// handed to an epilogue (StoreFloatY below, or an operator's: epilogue_groupnorm_skinny.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace fusedops::cuda::gemm {

template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#endif
}

// The plain epilogue: the tile as float32 y (m, n). Consecutive threads take consecutive rows
// of W: coalesced stores along a row of y.
struct StoreFloatY {
  float* y;

  template <int kRows, int kCols>
  __device__ __forceinline__ void apply(float* tile, int row0, int m, int n, int threads) const {
    for (int i = threadIdx.x; i < kRows * kCols; i += threads) {
      const int r = i % kRows, c = i / kRows;
      if (row0 + r < n && c < m) y[static_cast<int64_t>(c) * n + row0 + r] = tile[r * kCols + c];
    }
  }
};

// Shared memory of one block: its warps' partial sums.
template <int kWarps, int kTiles, int kRowTiles>
constexpr int gemv_half_smem_bytes() {
  return kWarps * 16 * kRowTiles * 8 * kTiles * static_cast<int>(sizeof(float));
}

// kWarps: warps of a block, splitting K; kTiles: 8-row tiles of x (m <= 8 kTiles);
// kRowTiles: 16-row tiles of W a block owns; kUnroll: 32-wide k steps a warp has in flight.
template <typename T, int kWarps, int kTiles, int kRowTiles, int kUnroll, typename Epilogue>
__global__ void __launch_bounds__(32 * kWarps)
gemv_half_kernel(const T* __restrict__ x, const T* __restrict__ w, int m, int n, int k,
                 Epilogue epilogue) {
  extern __shared__ float partial[];  // [warp][16 kRowTiles][8 kTiles]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * 16 * kRowTiles;
  const uint4* wrow[kRowTiles][2];
#pragma unroll
  for (int a = 0; a < kRowTiles; ++a) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = min(row0 + 16 * a + 8 * h + g, n - 1);
      wrow[a][h] = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(row) * k);
    }
  }
  const uint4* xrow[kTiles];
#pragma unroll
  for (int b = 0; b < kTiles; ++b) {
    xrow[b] = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(min(8 * b + g, m - 1)) * k);
  }
  float acc[kRowTiles][kTiles][4] = {};
  constexpr int kRound = kWarps * 32;  // k a block reads per round
  // The loop runs on the warp's first k, the same in every lane: mma.sync is a warp-wide
  // instruction, which must not run on part of a warp. A lane whose own k is past the end
  // loads zeros. (Per-lane k0 < k hung the GPU wherever K left part of a warp's 32-wide step,
  // e.g. in_features 80 or 264.)
  for (int kw = warp * 32; kw < k; kw += kRound * kUnroll) {
    const int k0 = kw + t * 8;
    uint4 wv[kUnroll][kRowTiles][2];
    uint4 xv[kUnroll][kTiles];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int kk = k0 + u * kRound;
      const bool in = kk < k;
#pragma unroll
      for (int a = 0; a < kRowTiles; ++a) {
#pragma unroll
        for (int h = 0; h < 2; ++h) wv[u][a][h] = in ? __ldcs(wrow[a][h] + kk / 8) : uint4{};
      }
#pragma unroll
      for (int b = 0; b < kTiles; ++b) xv[u][b] = in ? __ldg(xrow[b] + kk / 8) : uint4{};
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int a = 0; a < kRowTiles; ++a) {
        const uint4& lo = wv[u][a][0];
        const uint4& hi = wv[u][a][1];
        const uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y};  // k slots of step 0: 8-byte half 0
        const uint32_t a1[4] = {lo.z, hi.z, lo.w, hi.w};  // step 1: 8-byte half 1
#pragma unroll
        for (int b = 0; b < kTiles; ++b) {
          mma_m16n8k16<T>(acc[a][b], a0, xv[u][b].x, xv[u][b].y);
          mma_m16n8k16<T>(acc[a][b], a1, xv[u][b].z, xv[u][b].w);
        }
      }
    }
  }
  constexpr int kCols = 8 * kTiles, kRows = 16 * kRowTiles;
  float* mine = partial + warp * kRows * kCols;
#pragma unroll
  for (int a = 0; a < kRowTiles; ++a) {
#pragma unroll
    for (int b = 0; b < kTiles; ++b) {
      const int r = 16 * a + g, c = 8 * b + 2 * t;
      mine[r * kCols + c] = acc[a][b][0];
      mine[r * kCols + c + 1] = acc[a][b][1];
      mine[(r + 8) * kCols + c] = acc[a][b][2];
      mine[(r + 8) * kCols + c + 1] = acc[a][b][3];
    }
  }
  __syncthreads();
  // The warps' sums in warp order, into warp 0's slots (each thread reads and writes only its
  // own elements), then the epilogue on that tile.
  for (int i = threadIdx.x; i < kRows * kCols; i += 32 * kWarps) {
    float s = 0.f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) s += partial[v * kRows * kCols + i];
    partial[i] = s;
  }
  __syncthreads();
  epilogue.template apply<kRows, kCols>(partial, row0, m, n, 32 * kWarps);
}

}  // namespace fusedops::cuda::gemm
