// Model 62's epilogue inside the GEMM: bias, GroupNorm, LeakyReLU and x2 on the float32
// accumulators, in registers; the GEMM writes only the model's output (float16/bfloat16): y is
// neither stored nor read back by a second kernel (the unfused path's cost).
//
// Why it fits: a group is a few consecutive channels of one row (16 at the default sizes), and
// an output tile row (kHalfTileN = 128 wide, gemm/heuristics.h) holds whole groups when the
// group size divides it, so no statistic leaves the warp group that owns the tile. wgmma's
// accumulator layout (CuTe's SM90 CLayout_64xN) gives each thread, for each of its rows, 2
// adjacent columns of every 8-column block, and the 4 lanes of a quad (lane / 4 equal) share
// their rows and cover the 8 columns between them. So:
//   - each thread sums its 4 values of every 16-column block of a row (2 blocks of 8),
//   - two xor-shuffles (1, 2) finish the block sum in all 4 lanes of the quad,
//   - a group of 16 b columns adds b block sums (a butterfly over blocks; the same additions in
//     every lane, so every lane holds the bit-identical group sum: deterministic).
// Variance is the two-pass form over the values held in registers (no E[v^2] - E[v]^2
// cancellation); the statistics and the per-channel chain are math/groupnorm_leakyrelu_sum.h,
// as in the unfused kernels. Included only by the SM90 .cu files (FUSEDOPS_SM90A).
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/layout.hpp"
#include "cutlass/epilogue/collective/detail.hpp"
#include "cutlass/epilogue/dispatch_policy.hpp"
#include "cutlass/numeric_conversion.h"

#include "common/store.h"
#include "cuda/gemm/register_epilogue_sm90.cuh"
#include "math/groupnorm_leakyrelu_sum.h"

namespace fusedops::cuda::gemm::sm90 {

template <class Element>
struct GroupNormEpilogueArguments {
  const Element* bias = nullptr;   // (N): the Linear bias
  const Element* gamma = nullptr;  // (N): GroupNorm's affine weight
  const Element* beta = nullptr;   // (N): GroupNorm's affine bias
  int group_size = 0;              // a power of two, 16 .. the tile's N (can_implement)
  float eps = 0.f;
  float negative_slope = 0.f;
  Element* ptr_D = nullptr;  // (M, N) row-major, leading dimension N
  RowMajorStride dD{};
};

// Element: the output's and the per-channel parameters' type: the model's dtype
// (cutlass::half_t, cutlass::bfloat16_t), or float for the operator's autocast form.
template <class Element>
class GroupNormLeakyReluSumEpilogue
    : public RegisterEpilogue<Element, GroupNormEpilogueArguments<Element>> {
 public:
  using Base = RegisterEpilogue<Element, GroupNormEpilogueArguments<Element>>;
  using typename Base::Arguments;
  using typename Base::Params;
  struct SharedStorage {};
  using TensorStorage = SharedStorage;

  // Channels per 16-column block: the unit the shuffles reduce (see above).
  static constexpr int kBlock = 16;

  // The caller (groupnorm_leakyrelu_sum_sm90.cu) checks the group size against the tile first;
  // here the facts the register reduction rests on, for any other caller.
  template <class ProblemShape>
  static bool can_implement(const ProblemShape& shape, const Arguments& args) {
    const int n = cute::get<1>(shape);
    const int g = args.group_size;
    return g >= kBlock && (g & (g - 1)) == 0 && n % g == 0 && args.bias && args.gamma &&
           args.beta && args.ptr_D;
  }

  CUTLASS_HOST_DEVICE
  GroupNormLeakyReluSumEpilogue(const Params& params, const SharedStorage& = SharedStorage())
      : params_(params) {}

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine,
            class FrgLayout, class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl,
                                 const cute::Tensor<FrgEngine, FrgLayout>& accumulators,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    using namespace cute;
    // The accumulator fragment of one thread: ((2 columns, 2 rows 8 apart, V 8-column blocks),
    // MMA_M, MMA_N), CuTe's SM90 CLayout_64xN per wgmma atom.
    static_assert(size<0, 0>(FrgLayout{}) == 2 && size<0, 1>(FrgLayout{}) == 2,
                  "GroupNorm epilogue: expects wgmma's 64xN float32 accumulator layout");
    constexpr int kV = size<0, 2>(FrgLayout{});
    static_assert(kV % 2 == 0, "GroupNorm epilogue: an atom of whole 16-column blocks");
    constexpr int kBlocks = kV / 2;  // 16-column blocks per atom row
    constexpr int kMmaM = size<1>(FrgLayout{});
    constexpr int kMmaN = size<2>(FrgLayout{});
    // A group may not span atoms: its blocks must sit in one thread's V range.
    static_assert(kMmaN == 1, "GroupNorm epilogue: one wgmma atom across the tile's N");
    // The 8-column blocks whose gamma and beta pass 3 loads at once, before their stores. A load
    // placed beside the stores waits for them (the compiler cannot tell that the parameters do
    // not alias the output): loaded a block at a time, the epilogue paid a memory round trip
    // per block, 16 a tile (measured: docs/PERFORMANCE.md, "Session of 2026-12-01"). Half
    // parameters: every block at once (32 registers); float ones (the autocast form) four at a
    // time, as all at once spilled.
    constexpr int kParamChunk = sizeof(Element) == 2 ? kV : 4;
    static_assert(kV % kParamChunk == 0, "GroupNorm epilogue: whole parameter chunks");

    const int m_total = get<0>(problem_shape_mnkl);
    const int n_total = get<1>(problem_shape_mnkl);
    const auto tc = accumulator_coords(problem_shape_mnkl, blk_shape_mnk, blk_coord_mnkl,
                                       tiled_mma, thread_idx);

    Tensor y = make_fragment_like<float>(accumulators);
    const int blocks_per_group = params_.group_size / kBlock;
    // 1 / group size, exact: the group size is a power of two (can_implement).
    const float inv_count = 1.0f / static_cast<float>(params_.group_size);
    const epilogues::GroupNormLeakyReluSum<float> chain{params_.eps, params_.negative_slope};

    // The bias of the thread's columns, loaded before anything is stored (as kParamChunk's).
    Pair bias[kV];
    CUTLASS_PRAGMA_UNROLL
    for (int v2 = 0; v2 < kV; ++v2) {
      bias[v2] = load_pair(params_.bias, get<1>(tc(make_coord(0, 0, v2), 0, 0)), n_total);
    }
    // Pass 1: y = acc + bias; the group means.
    CUTLASS_PRAGMA_UNROLL
    for (int v2 = 0; v2 < kV; ++v2) {
      CUTLASS_PRAGMA_UNROLL
      for (int mm = 0; mm < kMmaM; ++mm) {
        CUTLASS_PRAGMA_UNROLL
        for (int v1 = 0; v1 < 2; ++v1) {
          CUTLASS_PRAGMA_UNROLL
          for (int v0 = 0; v0 < 2; ++v0) {
            y(make_coord(v0, v1, v2), mm, 0) = accumulators(make_coord(v0, v1, v2), mm, 0) +
                                               static_cast<float>(bias[v2][v0]);
          }
        }
      }
    }
    float mean[kMmaM][2][kBlocks];
    group_sums(y, blocks_per_group, mean, [](float v) { return v; });
    for_each_sum(mean, [&](float& v) { v = chain.mean_pow2(v, inv_count); });
    // Pass 2: centre the values, then the group variances.
    CUTLASS_PRAGMA_UNROLL
    for (int v2 = 0; v2 < kV; ++v2) {
      CUTLASS_PRAGMA_UNROLL
      for (int mm = 0; mm < kMmaM; ++mm) {
        CUTLASS_PRAGMA_UNROLL
        for (int v1 = 0; v1 < 2; ++v1) {
          CUTLASS_PRAGMA_UNROLL
          for (int v0 = 0; v0 < 2; ++v0) y(make_coord(v0, v1, v2), mm, 0) -= mean[mm][v1][v2 / 2];
        }
      }
    }
    float rstd[kMmaM][2][kBlocks];
    group_sums(y, blocks_per_group, rstd, [](float v) { return v * v; });
    finish_across_quad(rstd, [&](float sum) { return chain.rstd_pow2(sum, inv_count); });
    // Pass 3: affine, LeakyReLU, x2 (exact), rounded once to the model's dtype and stored, a
    // chunk of 8-column blocks at a time, each chunk's gamma and beta loaded before its stores
    // (see kParamChunk).
    CUTLASS_PRAGMA_UNROLL
    for (int c0 = 0; c0 < kV; c0 += kParamChunk) {
      Pair gamma[kParamChunk], beta[kParamChunk];
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < kParamChunk; ++c) {
        const int col = get<1>(tc(make_coord(0, 0, c0 + c), 0, 0));
        gamma[c] = load_pair(params_.gamma, col, n_total);
        beta[c] = load_pair(params_.beta, col, n_total);
      }
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < kParamChunk; ++c) {
        const int v2 = c0 + c;
        const int col = get<1>(tc(make_coord(0, 0, v2), 0, 0));
        CUTLASS_PRAGMA_UNROLL
        for (int mm = 0; mm < kMmaM; ++mm) {
          CUTLASS_PRAGMA_UNROLL
          for (int v1 = 0; v1 < 2; ++v1) {
            const int row = get<0>(tc(make_coord(0, v1, v2), mm, 0));
            float out[2];
            CUTLASS_PRAGMA_UNROLL
            for (int v0 = 0; v0 < 2; ++v0) {
              out[v0] = chain.template output<Unrounded>(
                  y(make_coord(v0, v1, v2), mm, 0), rstd[mm][v1][v2 / 2],
                  static_cast<float>(gamma[c][v0]), static_cast<float>(beta[c][v0]));
            }
            if (row < m_total) store_pair(row, col, n_total, out);
          }
        }
      }
    }
  }

 private:
  using Pair = cutlass::Array<Element, 2>;

  // Two adjacent channels' parameters (col is even: CLayout's column pairs); zero past N.
  CUTLASS_DEVICE static Pair load_pair(const Element* p, int col, int n) {
    Pair pair;
    pair.clear();
    if (col + 1 < n) {  // n is a multiple of 16, col even: aligned to a pair (checked by the caller)
      pair = *reinterpret_cast<const Pair*>(p + col);
    }
    return pair;
  }

  CUTLASS_DEVICE void store_pair(int row, int col, int n, const float (&v)[2]) const {
    if (col + 1 < n) {
      cutlass::Array<Element, 2> pair;
      pair[0] = static_cast<Element>(v[0]);
      pair[1] = static_cast<Element>(v[1]);
      Element* d = params_.ptr_D + static_cast<int64_t>(row) * cute::get<0>(params_.dD) + col;
      *reinterpret_cast<cutlass::Array<Element, 2>*>(d) = pair;
    }
  }

  // sums[mm][v1][blk] = the sum of f(y) over the group holding 16-column block blk of the
  // thread's row (mm, v1), identical in every lane of the quad and every block of the group.
  template <class Frg, int kMmaM, int kBlocks, class F>
  CUTLASS_DEVICE static void group_sums(const Frg& y, int blocks_per_group,
                                        float (&sums)[kMmaM][2][kBlocks], F f) {
    using namespace cute;
    CUTLASS_PRAGMA_UNROLL
    for (int mm = 0; mm < kMmaM; ++mm) {
      CUTLASS_PRAGMA_UNROLL
      for (int v1 = 0; v1 < 2; ++v1) {
        CUTLASS_PRAGMA_UNROLL
        for (int blk = 0; blk < kBlocks; ++blk) {
          float s = 0.f;
          CUTLASS_PRAGMA_UNROLL
          for (int half = 0; half < 2; ++half) {
            CUTLASS_PRAGMA_UNROLL
            for (int v0 = 0; v0 < 2; ++v0) s += f(y(make_coord(v0, v1, 2 * blk + half), mm, 0));
          }
          s += __shfl_xor_sync(0xffffffffu, s, 1);
          s += __shfl_xor_sync(0xffffffffu, s, 2);
          sums[mm][v1][blk] = s;
        }
        // Blocks of one group: a butterfly, so every block of the group ends with the same sum.
        CUTLASS_PRAGMA_UNROLL
        for (int width = 1; width < kBlocks; width *= 2) {
          if (width < blocks_per_group) {
            float next[kBlocks];
            CUTLASS_PRAGMA_UNROLL
            for (int blk = 0; blk < kBlocks; ++blk) {
              next[blk] = sums[mm][v1][blk] + sums[mm][v1][blk ^ width];
            }
            CUTLASS_PRAGMA_UNROLL
            for (int blk = 0; blk < kBlocks; ++blk) sums[mm][v1][blk] = next[blk];
          }
        }
      }
    }
  }

  template <int kMmaM, int kBlocks, class F>
  CUTLASS_DEVICE static void for_each_sum(float (&sums)[kMmaM][2][kBlocks], F f) {
    CUTLASS_PRAGMA_UNROLL
    for (int mm = 0; mm < kMmaM; ++mm) {
      CUTLASS_PRAGMA_UNROLL
      for (int v1 = 0; v1 < 2; ++v1) {
        CUTLASS_PRAGMA_UNROLL
        for (int blk = 0; blk < kBlocks; ++blk) f(sums[mm][v1][blk]);
      }
    }
  }

  // sums = finish(sums), each lane of a quad finishing a quarter of them and the quad
  // exchanging the results. The four lanes hold the same sums (group_sums), and finish is the
  // square root and division of 1 / std, the epilogue's slowest instructions: done in every lane
  // they took about a third of the epilogue's time (docs/PERFORMANCE.md). Same values, same bits.
  template <int kMmaM, int kBlocks, class Finish>
  CUTLASS_DEVICE static void finish_across_quad(float (&sums)[kMmaM][2][kBlocks], Finish finish) {
    constexpr int kSums = kMmaM * 2 * kBlocks;
    static_assert(kSums % 4 == 0, "GroupNorm epilogue: a whole number of sums per quad lane");
    float* flat = &sums[0][0][0];
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int quad_lane = lane % 4;
    float mine[kSums / 4];
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kSums / 4; ++j) {
      float pick = flat[4 * j];  // flat[4 j + quad_lane], by selects (no indexed registers)
      CUTLASS_PRAGMA_UNROLL
      for (int r = 1; r < 4; ++r) pick = quad_lane == r ? flat[4 * j + r] : pick;
      mine[j] = finish(pick);
    }
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kSums; ++i) {
      flat[i] = __shfl_sync(0xffffffffu, mine[i / 4], (lane & ~3) | (i % 4));
    }
  }

  Params params_;
};

}  // namespace fusedops::cuda::gemm::sm90
