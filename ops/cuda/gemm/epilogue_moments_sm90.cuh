// The column-moments epilogue (plan::Epilogue::kColumnMoments) on a GEMM of fp16/bf16 operands
// (the 3xFP16 engine's main term alone, with its rows' scales alpha_r; or half operands as
// given, alpha null, 1): y = alpha_r * acc, stored as float32 from registers, and the column
// moments of the tile's rows: for each column j of the tile, its mean and the sum of squared
// deviations from that mean. A caller that needs column statistics over all rows merges the
// tiles' moments (cuda/tile_moments.h) and so reads y once after the GEMM instead of twice.
//
// One pass over the registers, shifted: d = y - c_j with c_j the tile's first row (a sample of
// the column, as the streaming moments pass shifts by y[0, j]), the sums of d and d^2, then
// mean = c + S1 / n and M2 = S2 - S1^2 / n. With c one of the column's values,
// S2 = M2 + n (mean - c)^2 <= (n + 1) M2, so the subtraction costs at most log2(129) = 7 of
// float's 24 bits, however large the mean is against the spread.
//
// The reduction follows wgmma's accumulator layout (CuTe's SM90 CLayout_64xN, as every register
// epilogue does): a thread holds, for each 8-column block v2, columns
// 8 v2 + 2 (lane % 4) + {0, 1} of rows lane / 4 and lane / 4 + 8 of its warp's 16; the 8 lanes
// with the same lane % 4 share those columns. So: the thread's 2 rows, then a reduce-scatter
// over those 8 lanes (three xor-shuffle steps, each halving the columns a lane keeps: 56
// shuffles for 64 columns, against 192 for three full butterflies), then the 8 warps' sums
// through shared memory. Fixed order everywhere: the moments are deterministic. Rows past M
// are left out; a tile's count is its rows in M. Included only by the SM90 .cu files (FUSEDOPS_SM90A).
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/epilogue/collective/detail.hpp"
#include "cuda/gemm/register_epilogue_sm90.cuh"

namespace fusedops::cuda::gemm::sm90 {

struct ScaledColumnMomentsArguments {
  const float* alpha = nullptr;  // (M): the rows' scales; null: 1
  float* ptr_D = nullptr;        // (M, N) row-major, leading dimension N
  RowMajorStride dD{};
  float* tile_mean = nullptr;  // (ceil(M / tile M), N): each tile's column means
  float* tile_m2 = nullptr;    // (ceil(M / tile M), N): ... sums of squared deviations
};

// kTileN: the tile's width; kWarps: the warps of the consumer warp groups, which share a tile
// (the cooperative schedule).
template <int kTileN, int kWarps>
class ScaledColumnMomentsEpilogue : public RegisterEpilogue<float, ScaledColumnMomentsArguments> {
 public:
  static constexpr int kThreads = 32 * kWarps;
  static_assert(kThreads == kTileN, "one thread a column of the tile when the warps' sums meet");
  // The tile's first row (the shift) and the warps' column sums of d and d^2. The kernel
  // carves it out of the mainloop's stages (StageCountAutoCarveout).
  struct SharedStorage {
    float shift[kTileN];
    float warp_sums[2][kWarps][kTileN];
  };
  using TensorStorage = SharedStorage;

  // N a multiple of 4: a thread's column pair is wholly inside or outside, and rows of y stay
  // 8-byte aligned.
  template <class ProblemShape>
  static bool can_implement(const ProblemShape& shape, const Arguments& args) {
    return cute::get<1>(shape) % 4 == 0 && args.ptr_D && args.tile_mean && args.tile_m2;
  }

  CUTLASS_HOST_DEVICE
  ScaledColumnMomentsEpilogue(const Params& params, const SharedStorage& = SharedStorage())
      : params_(params) {}

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine,
            class FrgLayout, class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl,
                                 const cute::Tensor<FrgEngine, FrgLayout>& accumulators,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char* smem) {
    using namespace cute;
    static_assert(size<0, 0>(FrgLayout{}) == 2 && size<0, 1>(FrgLayout{}) == 2,
                  "moments epilogue: expects wgmma's 64xN float32 accumulator layout");
    constexpr int kV = size<0, 2>(FrgLayout{});
    static_assert(size<1>(FrgLayout{}) == 1 && size<2>(FrgLayout{}) == 1,
                  "moments epilogue: one 64-row wgmma atom a warp group, across the tile's N");
    static_assert(8 * kV == kTileN, "moments epilogue: the atom spans the tile's N");
    constexpr int kSlots = 2 * kV;  // a thread's columns: slot 2 v2 + v0
    SharedStorage& shared = *reinterpret_cast<SharedStorage*>(smem);

    const int m_total = get<0>(problem_shape_mnkl);
    const int n_total = get<1>(problem_shape_mnkl);
    auto [m_coord, n_coord, k_coord, l_coord] = blk_coord_mnkl;
    const auto tc = accumulator_coords(problem_shape_mnkl, blk_shape_mnk, blk_coord_mnkl,
                                       tiled_mma, thread_idx);
    const int m0 = static_cast<int>(m_coord) * get<0>(blk_shape_mnk);
    const int n0 = static_cast<int>(n_coord) * kTileN;
    // CUTLASS's persistent scheduler rounds the tiles in M up to whole clusters (2 x 1), so with
    // an odd number of 128-row tiles one tile lies wholly past M: it has no row of tile_mean
    // to write (its moments landed in whatever memory followed tile_m2: found with m = 1100,
    // where they overwrote the guard's list). The whole tile returns, all its threads alike.
    if (m0 >= m_total || n0 >= n_total) return;
    const int warp = thread_idx / 32, lane = thread_idx % 32;

    // The thread's two rows (the same for every column block) and their scales; 0 past M.
    float alpha[2];
    bool in_m[2];
    CUTLASS_PRAGMA_UNROLL
    for (int v1 = 0; v1 < 2; ++v1) {
      const int row = get<0>(tc(make_coord(0, v1, 0), 0, 0));
      in_m[v1] = row < m_total;
      alpha[v1] = !in_m[v1] ? 0.0f : params_.alpha != nullptr ? params_.alpha[row] : 1.0f;
    }
    auto y = [&](int v0, int v1, int v2) {
      return alpha[v1] * accumulators(make_coord(v0, v1, v2), 0, 0);
    };

    // The previous tile's last reads of shared memory are done before this tile writes it.
    cutlass::arch::NamedBarrier::sync(kThreads, kBarrier);
    store_y(y, m0 + 16 * warp, n0, m_total, n_total, warp, lane, shared);
    // The shift: the tile's first row (row m0: warp 0, lanes 0-3, v1 = 0), always in M.
    if (warp == 0 && lane < 4) {
      CUTLASS_PRAGMA_UNROLL
      for (int v2 = 0; v2 < kV; ++v2) {
        CUTLASS_PRAGMA_UNROLL
        for (int v0 = 0; v0 < 2; ++v0) shared.shift[8 * v2 + 2 * lane + v0] = y(v0, 0, v2);
      }
    }
    cutlass::arch::NamedBarrier::sync(kThreads, kBarrier);
    float s1[kSlots], s2[kSlots];
    CUTLASS_PRAGMA_UNROLL
    for (int v2 = 0; v2 < kV; ++v2) {
      CUTLASS_PRAGMA_UNROLL
      for (int v0 = 0; v0 < 2; ++v0) {
        const float c = shared.shift[8 * v2 + 2 * (lane % 4) + v0];
        float a = 0.0f, b = 0.0f;
        CUTLASS_PRAGMA_UNROLL
        for (int v1 = 0; v1 < 2; ++v1) {
          const float d = in_m[v1] ? y(v0, v1, v2) - c : 0.0f;
          a += d;
          b += d * d;
        }
        s1[2 * v2 + v0] = a;
        s2[2 * v2 + v0] = b;
      }
    }
    // Reduce-scatter over the 8 lanes sharing these columns: lane bit 2, 3, 4 in turn keeps
    // the lower or upper half of what is left and adds its partner's copy of that half.
    reduce_scatter<kSlots, 4>(s1, s2, lane);
    reduce_scatter<kSlots / 2, 8>(s1, s2, lane);
    reduce_scatter<kSlots / 4, 16>(s1, s2, lane);
    // This lane now holds slots base .. base + kSlots / 8 of its column group.
    const int base = (lane & 4 ? kSlots / 2 : 0) + (lane & 8 ? kSlots / 4 : 0) +
                     (lane & 16 ? kSlots / 8 : 0);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kSlots / 8; ++i) {
      const int slot = base + i;
      const int col = 8 * (slot / 2) + 2 * (lane % 4) + slot % 2;
      shared.warp_sums[0][warp][col] = s1[i];
      shared.warp_sums[1][warp][col] = s2[i];
    }
    cutlass::arch::NamedBarrier::sync(kThreads, kBarrier);
    float t1 = 0.0f, t2 = 0.0f;
    CUTLASS_PRAGMA_UNROLL
    for (int w = 0; w < kWarps; ++w) {
      t1 += shared.warp_sums[0][w][thread_idx];
      t2 += shared.warp_sums[1][w][thread_idx];
    }
    if (n0 + thread_idx < n_total) {
      const float count =
          static_cast<float>(min(m_total - m0, static_cast<int>(get<0>(blk_shape_mnk))));
      const int64_t at = static_cast<int64_t>(m_coord) * n_total + n0 + thread_idx;
      params_.tile_mean[at] = shared.shift[thread_idx] + t1 / count;
      params_.tile_m2[at] = fmaxf(t2 - t1 * t1 / count, 0.0f);
    }
  }

 private:
  // A named barrier of the consumer threads only (the producer warp group is elsewhere): the
  // first id CUTLASS leaves to users.
  static constexpr uint32_t kBarrier = 0;

  // y through shared memory, each warp its own 16 rows in chunks of kChunkCols columns, in a
  // region of warp_sums (free until the warps' sums are written, after a barrier): written in
  // the accumulator layout, read back as float4 rows, so that a warp's store covers 4 rows of
  // 128 contiguous bytes (stored straight from the accumulator layout, each warp store covered
  // 8 rows of 32 bytes: a tenth of the GEMM's time went to the epilogue). The column XOR
  // (row % 4) * 8 puts rows 0-3 of a float2 write in different banks.
  static constexpr int kChunkCols = 32;
  template <class Y>
  CUTLASS_DEVICE void store_y(const Y& y, int row0, int n0, int m_total, int n_total, int warp,
                              int lane, SharedStorage& shared) const {
    static_assert(sizeof(shared.warp_sums) >= kWarps * 16 * kChunkCols * sizeof(float),
                  "a warp's chunk of y fits its share of warp_sums");
    float* stage = &shared.warp_sums[0][0][0] + warp * 16 * kChunkCols;
    const auto at = [](int row, int col) { return row * kChunkCols + (col ^ ((row % 4) * 8)); };
    const int r = lane / 4, q = lane % 4;
    CUTLASS_PRAGMA_UNROLL
    for (int chunk = 0; chunk < kTileN / kChunkCols; ++chunk) {
      CUTLASS_PRAGMA_UNROLL
      for (int b = 0; b < kChunkCols / 8; ++b) {
        const int v2 = chunk * (kChunkCols / 8) + b;
        CUTLASS_PRAGMA_UNROLL
        for (int v1 = 0; v1 < 2; ++v1) {
          *reinterpret_cast<float2*>(stage + at(r + 8 * v1, 8 * b + 2 * q)) =
              make_float2(y(0, v1, v2), y(1, v1, v2));
        }
      }
      __syncwarp();
      const int col = n0 + chunk * kChunkCols + 4 * (lane % 8);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < 4; ++i) {
        const int rr = lane / 8 + 4 * i;
        if (row0 + rr < m_total && col < n_total) {
          float* d = params_.ptr_D + static_cast<int64_t>(row0 + rr) * cute::get<0>(params_.dD) + col;
          *reinterpret_cast<float4*>(d) =
              *reinterpret_cast<const float4*>(stage + at(rr, 4 * (lane % 8)));
        }
      }
      __syncwarp();  // read before the next chunk overwrites it
    }
  }

  // One reduce-scatter step over lanes kOffset apart: of kCount values in a and b, a lane keeps
  // the lower half (its kOffset bit clear) or the upper half, plus its partner's copy of it.
  template <int kCount, int kOffset>
  CUTLASS_DEVICE static void reduce_scatter(float* a, float* b, int lane) {
    const bool upper = (lane & kOffset) != 0;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kCount / 2; ++i) {
      const float send_a = upper ? a[i] : a[i + kCount / 2];
      const float send_b = upper ? b[i] : b[i + kCount / 2];
      const float keep_a = upper ? a[i + kCount / 2] : a[i];
      const float keep_b = upper ? b[i + kCount / 2] : b[i];
      a[i] = keep_a + __shfl_xor_sync(0xffffffffu, send_a, kOffset);
      b[i] = keep_b + __shfl_xor_sync(0xffffffffu, send_b, kOffset);
    }
  }

  Params params_;
};

}  // namespace fusedops::cuda::gemm::sm90
