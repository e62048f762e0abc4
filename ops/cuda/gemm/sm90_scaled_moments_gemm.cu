// scaled_gemm_sm90's one-product GEMM with model 39's training epilogue: y and the column
// moments of each 128-row tile (epilogue_moments_sm90.cuh). Same mainloop, tile and schedule
// as sm90_scaled_gemm.cu (why: there); the two consumer warp groups share a tile, so the
// epilogue's 256 threads meet over one tile's 256 columns. Without sm_90a:
// sm90_cross_gemm.cu's stub.
#if defined(FUSEDOPS_SM90A)
#include "cuda/gemm/epilogue_moments_sm90.cuh"
#include "cuda/gemm/sm90_gemm_types.cuh"

namespace fusedops::cuda::gemm {

void scaled_moments_gemm_sm90(const Fp16GemmShape& shape, const void* a, const void* b, float* d,
                              const float* alpha, float* tile_mean, float* tile_m2,
                              cudaStream_t stream) {
  static_assert(cute::is_same_v<sm90::KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedCooperative>,
                "the moments epilogue expects both consumer warp groups on one tile");
  using Epi = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<
      sm90::ScaledColumnMomentsEpilogue<kCrossTileN, 8>>;
  using G = sm90::Gemm<sm90::PlainMainloop<sm90::CrossTile, Epi>, Epi>;
  auto args = sm90::make_mainloop_arguments<G>(shape, a, b);
  args.epilogue.alpha = alpha;
  args.epilogue.ptr_D = d;
  args.epilogue.dD = typename G::GemmKernel::StrideD{int64_t(shape.n), cute::Int<1>{}, 0};
  args.epilogue.tile_mean = tile_mean;
  args.epilogue.tile_m2 = tile_m2;
  sm90::run<G>(args, stream, "scaled_moments_gemm_sm90");
}

}  // namespace fusedops::cuda::gemm
#endif
