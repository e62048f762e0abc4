// What CUTLASS's SM90 kernels ask of an epilogue (through Sm90TmaWarpSpecializedAdapter) that
// works on the accumulators in registers and stores its own output: no source operand, no TMA
// store, no workspace, its arguments its parameters. The register epilogues (the column
// moments here, the fused ones in ops/cuda/epilogues/*_sm90.cuh) derive from it and add their
// arguments' checks, their shared memory and operator(). Included only by the SM90 .cu files (FUSEDOPS_SM90A).
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/layout.hpp"
#include "cutlass/epilogue/dispatch_policy.hpp"

namespace fusedops::cuda::gemm::sm90 {

// An output's strides: (M, N) row-major.
using RowMajorStride = cutlass::detail::TagToStrideC_t<cutlass::layout::RowMajor>;

template <class ElementOut, class Args>
struct RegisterEpilogue {
  using EpilogueSchedule = cutlass::epilogue::NoSmemWarpSpecialized;
  using DispatchPolicy = EpilogueSchedule;
  using ElementC = void;  // no source operand
  using ElementD = ElementOut;
  using ElementAccumulator = float;
  using StrideC = RowMajorStride;
  using StrideD = StrideC;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  using ThreadEpilogueOp = void;  // named by CUTLASS's device adapter; the work is operator()
  using Arguments = Args;
  using Params = Args;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(const ProblemShape&, const Arguments& args,
                                                  void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(const ProblemShape&, const Arguments&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(const ProblemShape&, const Arguments&, void*,
                                              cudaStream_t, cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  CUTLASS_DEVICE bool is_source_needed() { return false; }
};

// The (row, col) in the problem of each of a thread's accumulators: a tensor of the
// accumulator fragment's shape.
template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class TiledMma>
CUTLASS_DEVICE auto accumulator_coords(const ProblemShapeMNKL& problem_shape_mnkl,
                                       const BlockShapeMNK& blk_shape_mnk,
                                       const BlockCoordMNKL& blk_coord_mnkl,
                                       const TiledMma& tiled_mma, int thread_idx) {
  using namespace cute;
  Tensor coords = local_tile(
      make_identity_tensor(make_shape(get<0>(problem_shape_mnkl), get<1>(problem_shape_mnkl))),
      take<0, 2>(blk_shape_mnk), make_coord(get<0>(blk_coord_mnkl), get<1>(blk_coord_mnkl)));
  return tiled_mma.get_thread_slice(thread_idx).partition_C(coords);
}

}  // namespace fusedops::cuda::gemm::sm90
