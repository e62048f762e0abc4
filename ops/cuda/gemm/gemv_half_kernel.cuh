// The weight-streaming kernel for few rows in float16/bfloat16 (the skinny-half engine,
// skinny_half.h): y (m, n) = x (m, k) W (n, k)^T with m <= 8 kTiles, float32 accumulation. At
// such m the GEMM is a read of W, which cuBLAS's kernels do well below HBM bandwidth
// (bench/gemv_floor.cu). Kept free of ATen so that benchmark can include it.
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
// handed to an epilogue (StoreFloatY below, or a fused one: ops/cuda/epilogues/*_skinny.cu).
//
// The float32 form (kPair): x and W as the 3xFP16 engine splits them (gemm_3xfp16.h, the three
// products there); the main term is promoted into float registers after every round of kUnroll
// steps. Rows the split's guard listed are recomputed in the block (exact_dot) before the
// epilogue: the fused epilogues see whole, exact tiles.
//
// Split over K and rows (heuristics.h's skinny_partials_shape and skinny_pair_shape): a block
// reads the K slice blockIdx.y of one chunk of 8 kTiles rows of x. The chunks of one group of W's
// rows are consecutive blocks of grid x (blockIdx.x = group * chunks + chunk): dispatched
// together, they read those rows of W at about the same time, so one read comes from HBM and the
// others from L2 (with the chunk in grid z, each chunk would stream all of W from HBM again). An
// epilogue that takes the terms (TakesTerms) gets the block's sums as they are, main term and
// cross terms apart, unscaled and unguarded: a K-slice partial, combined by its reader
// (Partials3xFp16View); any other epilogue gets its chunk's tile of y (rows chunk0 on of x).
// With one slice and one chunk the kernel is the unsplit one.
//
// An epilogue that also finishes the grid's work (FinishesGrid: a reduction of the partials
// the whole grid wrote) runs its finish() in every block after a grid-wide barrier: one launch
// where a second kernel would cost a launch on the host and a gap on the GPU. The barrier
// needs every block resident at once: such a kernel is launched cooperatively
// (skinny_half_launch.cuh), which refuses a grid that cannot be.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/gemm/epilogue_3xfp16.cuh"

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
// of W: coalesced stores along a row of y. An epilogue's apply gets the block's tile (rows row0
// on of W, kCols rows of x from chunk0 on, m of them real) and writes rows chunk0 + c of y.
struct StoreFloatY {
  static constexpr int kMaxRows = 32;
  static constexpr int kMaxBlockRows = 16;
  float* y;

  template <int kRows, int kCols>
  __device__ __forceinline__ void apply(float* tile, int row0, int chunk0, int m, int n,
                                        int threads) const {
    for (int i = threadIdx.x; i < kRows * kCols; i += threads) {
      const int r = i % kRows, c = i / kRows;
      if (row0 + r < n && c < m) {
        y[static_cast<int64_t>(chunk0 + c) * n + row0 + r] = tile[r * kCols + c];
      }
    }
  }
};

// Whether an epilogue takes a block's raw K-slice sums (apply_terms) instead of its tile of y.
template <typename E, typename = void>
struct TakesTerms : std::false_type {};
template <typename E>
struct TakesTerms<E, std::void_t<decltype(E::kTerms)>> : std::bool_constant<E::kTerms> {};

// Whether an epilogue finishes the grid's work after a grid-wide barrier (finish<threads>()).
template <typename E, typename = void>
struct FinishesGrid : std::false_type {};
template <typename E>
struct FinishesGrid<E, std::void_t<decltype(E::kFinishesGrid)>>
    : std::bool_constant<E::kFinishesGrid> {};

// The float32 form's scales and exact operands (kPair); unused otherwise.
struct PairArgs {
  const float* alpha = nullptr;  // (m): the rows' main-term scales, 0 for a guarded row
  const float* beta = nullptr;   // (m): the cross terms' scales
  const float* x = nullptr;      // float32 x (m, k) and W (n, k): the guarded rows' exact path
  const float* w = nullptr;
  int k = 0;
};

// The 16-byte vectors a thread loads for one 32-wide k step: two rows (g, g + 8) of each of W's
// 16-row tiles and one row of each of x's 8-row tiles, each in both halves of the float32 form.
template <int kTiles, int kRowTiles, bool kPair>
__host__ __device__ constexpr int gemv_step_vectors() {
  return (2 * kRowTiles + kTiles) * (kPair ? 2 : 1);
}

// Shared memory of one block: its warps' partial sums (two sets in the float32 form); staged
// (kStaged), at least the two-step ring of every thread's vectors, which the sums reuse.
template <int kWarps, int kTiles, int kRowTiles, bool kPair = false, bool kStaged = false>
constexpr int gemv_half_smem_bytes() {
  const int sums =
      (kPair ? 2 : 1) * kWarps * 16 * kRowTiles * 8 * kTiles * static_cast<int>(sizeof(float));
  const int ring = kStaged ? 2 * 32 * kWarps * gemv_step_vectors<kTiles, kRowTiles, kPair>() * 16
                           : 0;
  return sums > ring ? sums : ring;
}

// A 16-byte copy from global to shared memory that does not wait (cp.async, L2 only): where
// `in` is false it reads nothing and writes zeros.
__device__ __forceinline__ void copy_async_16(uint4* dst, const uint4* src, bool in) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(src),
               "r"(in ? 16 : 0));
#endif
}
__device__ __forceinline__ void copy_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int kPending>
__device__ __forceinline__ void copy_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

// kWarps: warps of a block, splitting K; kTiles: 8-row tiles of x (m <= 8 kTiles);
// kRowTiles: 16-row tiles of W a block owns; kUnroll: 32-wide k steps a warp has in flight;
// kPair: the float32 form (k is then kp, the pairs' padded K, and rows are 2 kp long);
// kStaged: the loads go through a two-step ring in shared memory (cp.async), one step in flight
// while the warp multiplies the other (kUnroll 1): where a block's accumulators leave no
// registers for a second step, a warp would otherwise wait out each step's loads before its MMAs
// (on an H200 the float32 form's 64-row blocks read W at 2.2-2.5 TB/s that way);
// slice_k: the k of a slice (k itself unsplit; a multiple of 8); chunks: x's chunks of 8 kTiles
// rows (grid x is W's groups of 16 kRowTiles rows times chunks).
template <typename T, int kWarps, int kTiles, int kRowTiles, int kUnroll, bool kPair,
          bool kStaged, typename Epilogue>
__global__ void __launch_bounds__(32 * kWarps)
gemv_half_kernel(const T* __restrict__ x, const T* __restrict__ w, int m, int n, int k,
                 int slice_k, int chunks, Epilogue epilogue, PairArgs pair) {
  static_assert(!kStaged || kUnroll == 1, "the ring holds one step in flight");
  extern __shared__ float partial[];  // [set][warp][16 kRowTiles][8 kTiles]; first the ring
  constexpr bool kTerms = TakesTerms<Epilogue>::value;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int row0 = static_cast<int>(blockIdx.x / chunks) * 16 * kRowTiles;
  const int64_t ld = kPair ? 2 * static_cast<int64_t>(k) : k;  // a row's length
  // This block's chunk of x's rows and slice of K.
  const int chunk0 = static_cast<int>(blockIdx.x % chunks) * 8 * kTiles;
  x += chunk0 * ld;
  m = min(m - chunk0, 8 * kTiles);
  if constexpr (kPair) {
    pair.alpha += chunk0;
    pair.beta += chunk0;
    pair.x += static_cast<int64_t>(chunk0) * pair.k;
  }
  const int k_begin = blockIdx.y * slice_k, k_end = min(k, k_begin + slice_k);
  // The second half of a row, in 16-byte vectors (kPair: W's hi half, x's lo half).
  const int second_half = kPair ? k / 8 : 0;
  const uint4* wrow[kRowTiles][2];
#pragma unroll
  for (int a = 0; a < kRowTiles; ++a) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = min(row0 + 16 * a + 8 * h + g, n - 1);
      wrow[a][h] = reinterpret_cast<const uint4*>(w + row * ld);
    }
  }
  const uint4* xrow[kTiles];
#pragma unroll
  for (int b = 0; b < kTiles; ++b) {
    xrow[b] = reinterpret_cast<const uint4*>(x + min(8 * b + g, m - 1) * ld);
  }
  float acc[kRowTiles][kTiles][4] = {};  // the product (kPair: the main term, promoted)
  constexpr int kCrossTiles = kPair ? kTiles : 1;
  float cross[kRowTiles][kCrossTiles][4] = {};  // kPair: hi.lo + lo.hi
  constexpr int kRound = kWarps * 32;  // k a block reads per round
  // The loop runs on the warp's first k, the same in every lane: mma.sync is a warp-wide
  // instruction, which must not run on part of a warp (a per-lane k0 < k hung the GPU wherever
  // K left part of a step). A lane whose own k is past the end loads zeros.
  constexpr int kHalves = kPair ? 2 : 1;  // the W (x) vectors of a step: [lo | hi] ([hi | lo])
  // The staged ring: [step % 2][vector][thread], each thread reading back only what it copied
  // itself (cp.async.wait_group makes a thread's own copies visible to it: no barrier).
  constexpr int kThreads = 32 * kWarps, kVectors = gemv_step_vectors<kTiles, kRowTiles, kPair>();
  [[maybe_unused]] uint4* const ring = reinterpret_cast<uint4*>(partial) + threadIdx.x;
  [[maybe_unused]] const auto stage_step = [&](int kw, int stage) {
    const int kk = kw + t * 8;
    const bool in = kk < k_end;
    const int at = in ? kk / 8 : 0;  // a lane past the end copies nothing from its row's start
    uint4* to = ring + stage * kVectors * kThreads;
#pragma unroll
    for (int a = 0; a < kRowTiles; ++a) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int p = 0; p < kHalves; ++p) {
          copy_async_16(to, wrow[a][h] + p * second_half + at, in);
          to += kThreads;
        }
      }
    }
#pragma unroll
    for (int b = 0; b < kTiles; ++b) {
#pragma unroll
      for (int p = 0; p < kHalves; ++p) {
        copy_async_16(to, xrow[b] + p * second_half + at, in);
        to += kThreads;
      }
    }
  };
  [[maybe_unused]] int stage = 0;
  if constexpr (kStaged) {
    if (k_begin + warp * 32 < k_end) stage_step(k_begin + warp * 32, 0);
    copy_async_commit();
  }
  for (int kw = k_begin + warp * 32; kw < k_end; kw += kRound * kUnroll) {
    uint4 wv[kUnroll][kRowTiles][2][kHalves];
    uint4 xv[kUnroll][kTiles][kHalves];
    if constexpr (kStaged) {
      // The next step's copies first (an empty group past the end keeps the count), then this
      // step's, waited for and read back.
      if (kw + kRound < k_end) stage_step(kw + kRound, stage ^ 1);
      copy_async_commit();
      copy_async_wait<1>();
      const uint4* from = ring + stage * kVectors * kThreads;
#pragma unroll
      for (int a = 0; a < kRowTiles; ++a) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int p = 0; p < kHalves; ++p) {
            wv[0][a][h][p] = *from;
            from += kThreads;
          }
        }
      }
#pragma unroll
      for (int b = 0; b < kTiles; ++b) {
#pragma unroll
        for (int p = 0; p < kHalves; ++p) {
          xv[0][b][p] = *from;
          from += kThreads;
        }
      }
      stage ^= 1;
    } else {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int kk = kw + t * 8 + u * kRound;
        const bool in = kk < k_end;
#pragma unroll
        for (int a = 0; a < kRowTiles; ++a) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int p = 0; p < kHalves; ++p) {
              wv[u][a][h][p] = in ? __ldcs(wrow[a][h] + p * second_half + kk / 8) : uint4{};
            }
          }
        }
#pragma unroll
        for (int b = 0; b < kTiles; ++b) {
#pragma unroll
          for (int p = 0; p < kHalves; ++p) {
            xv[u][b][p] = in ? __ldg(xrow[b] + p * second_half + kk / 8) : uint4{};
          }
        }
      }
    }
    [[maybe_unused]] float round_main[kRowTiles][kTiles][4] = {};  // kPair: the round's main term
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int a = 0; a < kRowTiles; ++a) {
        // k slots of step 0 (8-byte half 0 of each row's vector) and step 1 (half 1); in the
        // float32 form p = 0 is W's lo half and p = kHalves - 1 its hi half.
        uint32_t a0[kHalves][4], a1[kHalves][4];
#pragma unroll
        for (int p = 0; p < kHalves; ++p) {
          const uint4& r0 = wv[u][a][0][p];
          const uint4& r8 = wv[u][a][1][p];
          a0[p][0] = r0.x; a0[p][1] = r8.x; a0[p][2] = r0.y; a0[p][3] = r8.y;
          a1[p][0] = r0.z; a1[p][1] = r8.z; a1[p][2] = r0.w; a1[p][3] = r8.w;
        }
#pragma unroll
        for (int b = 0; b < kTiles; ++b) {
          const uint4& xh = xv[u][b][0];  // x's hi half (its only one in float16/bfloat16)
          if constexpr (!kPair) {
            mma_m16n8k16<T>(acc[a][b], a0[0], xh.x, xh.y);
            mma_m16n8k16<T>(acc[a][b], a1[0], xh.z, xh.w);
          } else {
            mma_m16n8k16<T>(round_main[a][b], a0[1], xh.x, xh.y);  // W hi . x hi
            mma_m16n8k16<T>(round_main[a][b], a1[1], xh.z, xh.w);
            const uint4& xl = xv[u][b][1];
            mma_m16n8k16<T>(cross[a][b], a0[1], xl.x, xl.y);  // W hi . x lo
            mma_m16n8k16<T>(cross[a][b], a1[1], xl.z, xl.w);
            mma_m16n8k16<T>(cross[a][b], a0[0], xh.x, xh.y);  // W lo . x hi
            mma_m16n8k16<T>(cross[a][b], a1[0], xh.z, xh.w);
          }
        }
      }
    }
    if constexpr (kPair) {
#pragma unroll
      for (int a = 0; a < kRowTiles; ++a) {
#pragma unroll
        for (int b = 0; b < kTiles; ++b) {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[a][b][e] += round_main[a][b][e];
        }
      }
    }
  }
  constexpr int kCols = 8 * kTiles, kRows = 16 * kRowTiles, kTile = kRows * kCols;
  if constexpr (kStaged) {
    copy_async_wait<0>();  // nothing left in flight (the last groups are empty)
    __syncthreads();       // every thread's ring read before the sums overwrite it
  }
#pragma unroll
  for (int set = 0; set < kHalves; ++set) {
    float* mine = partial + (set * kWarps + warp) * kTile;
#pragma unroll
    for (int a = 0; a < kRowTiles; ++a) {
#pragma unroll
      for (int b = 0; b < kTiles; ++b) {
        const float* v = set == 0 ? acc[a][b] : cross[a][kPair ? b : 0];
        const int r = 16 * a + g, c = 8 * b + 2 * t;
        mine[r * kCols + c] = v[0];
        mine[r * kCols + c + 1] = v[1];
        mine[(r + 8) * kCols + c] = v[2];
        mine[(r + 8) * kCols + c + 1] = v[3];
      }
    }
  }
  __syncthreads();
  // The warps' sums in warp order, into warp 0's slots (each thread reads and writes only its
  // own elements); in the float32 form, y from the two terms and the rows' scales.
  for (int i = threadIdx.x; i < kTile; i += 32 * kWarps) {
    float s = 0.f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) s += partial[v * kTile + i];
    if constexpr (kPair && kTerms) {  // the cross terms into their set's first slots
      float c = 0.f;
#pragma unroll
      for (int v = 0; v < kWarps; ++v) c += partial[(kWarps + v) * kTile + i];
      partial[kWarps * kTile + i] = c;
    } else if constexpr (kPair) {
      float c = 0.f;
#pragma unroll
      for (int v = 0; v < kWarps; ++v) c += partial[(kWarps + v) * kTile + i];
      const int col = min(i % kCols, m - 1);
      s = pair.alpha[col] * s + pair.beta[col] * c;
    }
    partial[i] = s;
  }
  __syncthreads();
  if constexpr (kTerms) {
    epilogue.template apply_terms<kRows, kCols>(partial, kPair ? partial + kWarps * kTile : nullptr,
                                                row0, chunk0, m, n, 32 * kWarps);
    if constexpr (FinishesGrid<Epilogue>::value) {
      cooperative_groups::this_grid().sync();  // every block's partials written and visible
      epilogue.template finish<32 * kWarps>();
    }
  } else {
    if constexpr (kPair) {
      // Guarded rows of x (rare: inf/nan, or a range fp16 pairs cannot carry): their column of
      // the tile exactly, a warp per row of W. The test is the same in every thread.
      for (int col = 0; col < m && col < kCols; ++col) {
        if (pair.alpha[col] != 0.0f) continue;
        for (int r = warp; r < kRows; r += kWarps) {
          if (row0 + r >= n) break;
          const float v = exact_dot(pair.x + static_cast<int64_t>(col) * pair.k,
                                    pair.w + static_cast<int64_t>(row0 + r) * pair.k, pair.k,
                                    lane);
          if (lane == 0) partial[r * kCols + col] = v;
        }
      }
      __syncthreads();
    }
    epilogue.template apply<kRows, kCols>(partial, row0, chunk0, m, n, 32 * kWarps);
  }
}

}  // namespace fusedops::cuda::gemm
