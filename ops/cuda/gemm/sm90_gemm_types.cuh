// The CUTLASS SM90 types behind our tensor-core GEMMs: the 3xFP16 engine's kernels
// (sm90_kernels.h) and the native float16/bfloat16 ones (gemm_half.h), and the launch
// helper they share. Included only by the SM90 .cu files, and only with FUSEDOPS_SM90A
// (no ATen here: CUTLASS's and ATen's half types and macros stay apart).
//
// Promoted GEMMs: tile 128 x 128 x 64, cooperative (two consumer warp groups of 64 x 128 each):
// the promoted mainloop holds two accumulators per thread (the tensor cores' partial and the
// float32 sum), 2 x 64 registers at this tile; a 128 x 256 tile would need 256 and spill. K step
// 64 = four m64n128k16 wgmmas, so promotion every K step is CUTLASS's promotion interval 4.
// Cross GEMM: one accumulator set, so the wider 128 x 256 tile (128 registers a thread), which
// halves the shared-memory traffic per FLOP of the 128-wide one: it carries 2/3 of the work.
// Cluster 2 x 1: the two CTAs of a cluster share the B (weight) tile through TMA multicast.
// Split-K is done by the caller as batches of K-slices plus its own deterministic sum
// (gemm_3xfp16.cu): CUTLASS's stream-K split-K reduces the slices of a tile one after another,
// which measured slower for a narrow W's cross GEMM (docs/PERFORMANCE.md).
#pragma once

#include <atomic>
#include <stdexcept>
#include <string>

#include "cuda/gemm/sm90_kernels.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

namespace fusedops::cuda::gemm::sm90 {

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
using ProblemShape = Shape<int, int, int, int>;

// d = acc (ElementC void: no source operand), or d = alpha * acc + beta * c (scalars).
template <class ElementC>
using LinearCombination = cutlass::epilogue::fusion::LinearCombination<float, float, ElementC, float>;

// d = alpha_r * acc + beta_r * c with alpha and beta vectors over the rows (M): the per-row
// scales of x's split.
using PerRowLinearCombination = cutlass::epilogue::fusion::PerRowLinCombPerRowBiasEltAct<
    cutlass::epilogue::thread::Identity, float, float, float, float, float, kAlignOut, kAlignOut>;

template <class TileShape, class ElementC, class FusionOp = LinearCombination<ElementC>>
using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementC, LayoutD, kAlignOut,
    float, LayoutD, kAlignOut, EpilogueSchedule, FusionOp>::CollectiveOp;

// Element: the operands' type, fp16 (the 3xFP16 engine's splits, float16 operands) or bf16;
// float32 accumulation either way.
template <class TileShape, class Epi, class Element = Fp16, class Schedule = KernelSchedule>
using PlainMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA, kAlignIn, Element,
    LayoutB, kAlignIn, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename Epi::SharedStorage))>,
    Schedule>::CollectiveOp;

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

template <class Mainloop, class Epi>
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<
    cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epi>>;

// wgmma issues four k16 instructions per 64-wide K step: promote after each step.
constexpr uint32_t kPromotionInterval = kTileK / 16;

// Opts kernel K into its dynamic shared memory once per device. CUTLASS's device adapter does
// this on every launch (cudaFuncSetAttribute, a driver call); the attribute is per function
// and device and never changes, so setting it twice from racing threads is harmless.
template <class Kernel>
void set_shared_memory_once() {
  constexpr int kMaxDevices = 64;
  static std::atomic<bool> done[kMaxDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    throw std::runtime_error("fusedops SM90 GEMM: could not read the current device");
  }
  if (device < kMaxDevices && done[device].load(std::memory_order_acquire)) return;
  const int bytes = Kernel::SharedStorageSize;
  if (bytes >= (48 << 10) &&
      cudaFuncSetAttribute(cutlass::device_kernel<Kernel>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
    throw std::runtime_error(std::string("fusedops SM90 GEMM: cannot opt into ") +
                             std::to_string(bytes) + " bytes of shared memory: " +
                             cudaGetErrorString(cudaGetLastError()));
  }
  if (device < kMaxDevices) done[device].store(true, std::memory_order_release);
}

// The problem, the operands and the device; the caller fills in its epilogue's arguments.
template <class G>
typename G::Arguments make_mainloop_arguments(const Fp16GemmShape& s, const void* a,
                                              const void* b) {
  using Kernel = typename G::GemmKernel;
  using ElementA = typename Kernel::ElementA;
  using ElementB = typename Kernel::ElementB;
  typename Kernel::StrideA stride_a{s.lda, Int<1>{}, s.batch_stride_ab};
  typename Kernel::StrideB stride_b{s.ldb, Int<1>{}, s.batch_stride_ab};
  typename G::Arguments args{};
  args.mode = s.batches > 1 ? cutlass::gemm::GemmUniversalMode::kBatched
                            : cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = ProblemShape{s.m, s.n, s.k, s.batches};
  args.mainloop.ptr_A = static_cast<const ElementA*>(a);
  args.mainloop.dA = stride_a;
  args.mainloop.ptr_B = static_cast<const ElementB*>(b);
  args.mainloop.dB = stride_b;
  if (s.sm_count <= 0) throw std::runtime_error("fusedops SM90 GEMM: the SM count was not given");
  args.hw_info.sm_count = s.sm_count;
  return args;
}

// ... with CUTLASS's collective epilogue: d (and c, when not null) float32 (M, N) row-major.
template <class G>
typename G::Arguments make_arguments(const Fp16GemmShape& s, const void* a, const void* b,
                                     const float* c, float* d) {
  using Kernel = typename G::GemmKernel;
  typename Kernel::StrideD stride_d{int64_t(s.n), Int<1>{}, s.batch_stride_d};
  typename G::Arguments args = make_mainloop_arguments<G>(s, a, b);
  args.epilogue.ptr_C = c;
  args.epilogue.dC = stride_d;
  args.epilogue.ptr_D = d;
  args.epilogue.dD = stride_d;
  return args;
}

template <class G>
void run(typename G::Arguments& args, cudaStream_t stream, const char* name) {
  const cutlass::Status status = G::can_implement(args);
  if (status != cutlass::Status::kSuccess) {
    throw std::runtime_error(std::string("fusedops ") + name + ": CUTLASS cannot run this shape: " +
                             cutlassGetStatusString(status));
  }
  // The persistent data-parallel scheduler needs no workspace; a change of scheduler that does
  // must allocate it here.
  if (G::get_workspace_size(args) != 0) {
    throw std::runtime_error(std::string("fusedops ") + name + ": unexpected workspace of " +
                             std::to_string(G::get_workspace_size(args)) + " bytes");
  }
  // The kernel's parameters (TMA descriptors) from the arguments, then a cluster launch: what
  // GemmUniversalAdapter::run does, without the two cudaFuncSetAttribute calls it makes on
  // every launch (shared-memory opt-in, non-portable cluster sizes: a 2 x 1 cluster is
  // portable). At small GEMMs the host time per call is as long as the GPU time: they showed.
  using Kernel = typename G::GemmKernel;
  set_shared_memory_once<Kernel>();
  typename Kernel::Params params = Kernel::to_underlying_arguments(args, nullptr);
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = size<0>(ClusterShape{});
  cluster.val.clusterDim.y = size<1>(ClusterShape{});
  cluster.val.clusterDim.z = size<2>(ClusterShape{});
  cudaLaunchConfig_t config{};
  config.gridDim = Kernel::get_grid_shape(params);
  config.blockDim = Kernel::get_block_shape();
  config.dynamicSmemBytes = Kernel::SharedStorageSize;
  config.stream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  const cudaError_t launched = cudaLaunchKernelEx(&config, cutlass::device_kernel<Kernel>, params);
  if (launched != cudaSuccess) {
    throw std::runtime_error(std::string("fusedops ") + name + ": launch failed: " +
                             cudaGetErrorString(launched));
  }
}

}  // namespace fusedops::cuda::gemm::sm90
