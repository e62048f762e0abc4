// What CUTLASS's SM90 kernels ask of an epilogue (through Sm90TmaWarpSpecializedAdapter) that
// works on the accumulators in registers and stores its own output: no source operand, no TMA
// store, no workspace, its arguments its parameters. The operator epilogues
// (epilogue_groupnorm_sm90.cuh, epilogue_moments_sm90.cuh) derive from it and add their
// arguments' checks, their shared memory and operator(). Included only by sm90_*.cu files.
#pragma once

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

}  // namespace fusedops::cuda::gemm::sm90
