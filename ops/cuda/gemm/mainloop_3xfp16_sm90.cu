// The 3xFP16 engine's two GEMM kernels, assembled from CUTLASS's SM90 collectives (no ATen in
// this file: CUTLASS's and ATen's half types and macros stay apart).
//
// Promoted GEMM: tile 128 x 128 x 64, cooperative (two consumer warp groups of 64 x 128 each):
// the promoted mainloop holds two accumulators per thread (the tensor cores' partial and the
// float32 sum), 2 x 64 registers at this tile; a 128 x 256 tile would need 256 and spill. K step
// 64 = four m64n128k16 wgmmas, so promotion every K step is CUTLASS's promotion interval 4.
// Cross GEMM: one accumulator set, so the wider 128 x 256 tile (128 registers a thread), which
// halves the shared-memory traffic per FLOP of the 128-wide one: it carries 2/3 of the work.
// Cluster 2 x 1: the two CTAs of a cluster share the B (weight) tile through TMA multicast.
// Stream-K scheduler in split-K mode: model 98's N = 512 gives 32 output tiles for 132 SMs;
// splitting K fills the GPU, and the scheduler's float32 reduction in the workspace is a plain
// sum (inf and NaN propagate as in any float sum).
#include "cuda/gemm/mainloop_3xfp16_sm90.h"

#include <stdexcept>
#include <string>

#if defined(FUSEDOPS_SM90A)
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#endif

namespace fusedops::cuda::gemm {

#if defined(FUSEDOPS_SM90A)
namespace {

using namespace cute;

using Fp16 = cutlass::half_t;
using LayoutA = cutlass::layout::RowMajor;     // x: (M, K), K contiguous
using LayoutB = cutlass::layout::ColumnMajor;  // W: (N, K), K contiguous = B (K, N) column-major
using LayoutD = cutlass::layout::RowMajor;
constexpr int kAlignIn = 8;   // 16 bytes of fp16: TMA's address and stride granule
constexpr int kAlignOut = 4;  // 16 bytes of float32
using PromotedTile = Shape<Int<kTileM>, Int<kPromotedTileN>, Int<kTileK>>;
using CrossTile = Shape<Int<kTileM>, Int<kCrossTileN>, Int<kTileK>>;
using ClusterShape = Shape<_2, _1, _1>;
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;

// ElementC void: no source operand (the cross GEMM writes d = acc).
template <class TileShape, class ElementC>
using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementC, LayoutD, kAlignOut,
    float, LayoutD, kAlignOut, EpilogueSchedule,
    cutlass::epilogue::fusion::LinearCombination<float, float, ElementC, float>>::CollectiveOp;

template <class TileShape, class Epi>
using PlainMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Fp16, LayoutA, kAlignIn, Fp16, LayoutB,
    kAlignIn, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename Epi::SharedStorage))>,
    KernelSchedule>::CollectiveOp;

// The same pieces (tiled MMA, TMA copies, shared-memory layouts, stage count) under CUTLASS's
// promoting SM90 mainloop. That mainloop was written for FP8, whose tensor-core accumulation is
// short, but nothing in it depends on the element type: it adds the wgmma accumulators into a
// second float32 register set every `mma_promotion_interval` wgmmas.
template <class Plain>
using PromotedMainloop = cutlass::gemm::collective::CollectiveMma<
    cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedFP8<Plain::DispatchPolicy::Stages,
                                                         ClusterShape, KernelSchedule>,
    PromotedTile, Fp16, typename Plain::StrideA, Fp16, typename Plain::StrideB,
    typename Plain::TiledMma, typename Plain::GmemTiledCopyA, typename Plain::SmemLayoutAtomA,
    typename Plain::SmemCopyAtomA, typename Plain::TransformA, typename Plain::GmemTiledCopyB,
    typename Plain::SmemLayoutAtomB, typename Plain::SmemCopyAtomB, typename Plain::TransformB>;

using ProblemShape = Shape<int, int, int, int>;

using CrossEpilogue = Epilogue<CrossTile, void>;
using CrossKernel = cutlass::gemm::kernel::GemmUniversal<
    ProblemShape, PlainMainloop<CrossTile, CrossEpilogue>, CrossEpilogue,
    cutlass::gemm::StreamKScheduler>;
using CrossGemm = cutlass::gemm::device::GemmUniversalAdapter<CrossKernel>;

using PromotedEpilogue = Epilogue<PromotedTile, float>;
using PromotedKernel = cutlass::gemm::kernel::GemmUniversal<
    ProblemShape, PromotedMainloop<PlainMainloop<PromotedTile, PromotedEpilogue>>, PromotedEpilogue,
    cutlass::gemm::StreamKScheduler>;
using PromotedGemm = cutlass::gemm::device::GemmUniversalAdapter<PromotedKernel>;

// wgmma issues four k16 instructions per 64-wide K step: promote after each step.
constexpr uint32_t kPromotionInterval = kTileK / 16;

int sm_count() {
  int device = 0, count = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    throw std::runtime_error("fusedops 3xfp16 GEMM: could not read the SM count");
  }
  return count;
}

template <class Gemm>
typename Gemm::Arguments make_arguments(const Fp16GemmShape& s, const void* a, const void* b,
                                        const float* c, float* d) {
  using Kernel = typename Gemm::GemmKernel;
  typename Kernel::StrideA stride_a{s.lda, Int<1>{}, int64_t(0)};
  typename Kernel::StrideB stride_b{s.ldb, Int<1>{}, int64_t(0)};
  typename Kernel::StrideD stride_d{int64_t(s.n), Int<1>{}, int64_t(0)};
  typename Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = ProblemShape{s.m, s.n, s.k, 1};
  args.mainloop.ptr_A = static_cast<const Fp16*>(a);
  args.mainloop.dA = stride_a;
  args.mainloop.ptr_B = static_cast<const Fp16*>(b);
  args.mainloop.dB = stride_b;
  args.epilogue.ptr_C = c;
  args.epilogue.dC = stride_d;
  args.epilogue.ptr_D = d;
  args.epilogue.dD = stride_d;
  args.hw_info.sm_count = sm_count();
  using Decomposition = typename Kernel::TileScheduler::DecompositionMode;
  args.scheduler.splits = s.splits;
  args.scheduler.decomposition_mode =
      s.splits > 1 ? Decomposition::SplitK : Decomposition::DataParallel;
  return args;
}

template <class Gemm>
void run(typename Gemm::Arguments& args, void* workspace, size_t workspace_bytes,
         cudaStream_t stream, const char* name) {
  Gemm gemm;
  cutlass::Status status = gemm.can_implement(args);
  if (status != cutlass::Status::kSuccess) {
    throw std::runtime_error(std::string("fusedops ") + name +
                             ": CUTLASS cannot run this shape: " +
                             cutlassGetStatusString(status));
  }
  if (Gemm::get_workspace_size(args) > workspace_bytes) {
    throw std::runtime_error(std::string("fusedops ") + name + ": workspace too small");
  }
  status = gemm.run(args, workspace, stream);
  if (status != cutlass::Status::kSuccess) {
    throw std::runtime_error(std::string("fusedops ") + name + ": launch failed: " +
                             cutlassGetStatusString(status));
  }
}

}  // namespace

void cross_gemm_sm90(const Fp16GemmShape& shape, const void* a, const void* b, float* d,
                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  auto args = make_arguments<CrossGemm>(shape, a, b, nullptr, d);
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  run<CrossGemm>(args, workspace, workspace_bytes, stream, "cross_gemm_sm90");
}

void promoted_gemm_sm90(const Fp16GemmShape& shape, const void* a, const void* b, const float* c,
                        float* d, const float* alpha, const float* beta, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream) {
  auto args = make_arguments<PromotedGemm>(shape, a, b, c, d);
  args.mainloop.mma_promotion_interval = kPromotionInterval;
  args.epilogue.thread.alpha_ptr = alpha;
  args.epilogue.thread.beta_ptr = beta;
  run<PromotedGemm>(args, workspace, workspace_bytes, stream, "promoted_gemm_sm90");
}

size_t cross_gemm_workspace(const Fp16GemmShape& shape) {
  auto args = make_arguments<CrossGemm>(shape, nullptr, nullptr, nullptr, nullptr);
  return CrossGemm::get_workspace_size(args);
}

size_t promoted_gemm_workspace(const Fp16GemmShape& shape) {
  auto args = make_arguments<PromotedGemm>(shape, nullptr, nullptr, nullptr, nullptr);
  return PromotedGemm::get_workspace_size(args);
}

bool sm90_kernels_built() { return true; }

#else  // built without CUTLASS or without sm_90a: the engine is never chosen

void cross_gemm_sm90(const Fp16GemmShape&, const void*, const void*, float*, void*, size_t,
                     cudaStream_t) {
  throw std::runtime_error("fusedops: this build has no sm_90a GEMM kernels");
}
void promoted_gemm_sm90(const Fp16GemmShape&, const void*, const void*, const float*, float*,
                        const float*, const float*, void*, size_t, cudaStream_t) {
  throw std::runtime_error("fusedops: this build has no sm_90a GEMM kernels");
}
size_t cross_gemm_workspace(const Fp16GemmShape&) { return 0; }
size_t promoted_gemm_workspace(const Fp16GemmShape&) { return 0; }
bool sm90_kernels_built() { return false; }

#endif

}  // namespace fusedops::cuda::gemm
