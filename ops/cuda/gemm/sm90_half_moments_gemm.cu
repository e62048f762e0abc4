// Model 39 in training on the native float16/bfloat16 GEMM (gemm_half.h): y as float32 and each
// 128-row tile's column moments from the epilogue (epilogue_moments_sm90.cuh, alpha 1), the
// same kernel as the one-product form's (sm90_scaled_moments_gemm.cu: mainloop, 128 x 256 tile,
// cooperative schedule, 2 x 1 clusters) on the model's own operands. Without sm_90a:
// sm90_cross_gemm.cu's stub.
#if defined(FUSEDOPS_SM90A)
#include "cuda/gemm/epilogue_moments_sm90.cuh"
#include "cuda/gemm/gemm_half.h"
#include "cuda/gemm/sm90_gemm_types.cuh"

#include <string>

namespace fusedops::cuda::gemm {
namespace {

template <class Element>
void moments_gemm(const Fp16GemmShape& shape, const void* x, const void* w, float* y,
                  float* tile_mean, float* tile_m2, cudaStream_t stream) {
  using Epi = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<
      sm90::ScaledColumnMomentsEpilogue<kCrossTileN, 8>>;
  using G = sm90::Gemm<sm90::PlainMainloop<sm90::CrossTile, Epi, Element>, Epi>;
  auto args = sm90::make_mainloop_arguments<G>(shape, x, w);
  args.epilogue.alpha = nullptr;  // y = acc
  args.epilogue.ptr_D = y;
  args.epilogue.dD = typename G::GemmKernel::StrideD{int64_t(shape.n), cute::Int<1>{}, 0};
  args.epilogue.tile_mean = tile_mean;
  args.epilogue.tile_m2 = tile_m2;
  sm90::run<G>(args, stream, "half_moments_gemm_sm90");
}

}  // namespace

void half_moments_gemm_sm90(HalfType type, const Fp16GemmShape& shape, const void* x,
                            const void* w, float* y, float* tile_mean, float* tile_m2,
                            cudaStream_t stream) {
  static_assert(cute::is_same_v<sm90::KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedCooperative>,
                "the moments epilogue expects both consumer warp groups on one tile");
  if (shape.n % 4 != 0 || shape.batches != 1) {
    throw std::runtime_error("fusedops half_moments_gemm_sm90: N must be a multiple of 4 and "
                             "the GEMM unbatched, got n=" + std::to_string(shape.n) + ", batches=" +
                             std::to_string(shape.batches));
  }
  if (type == HalfType::kFloat16) {
    moments_gemm<cutlass::half_t>(shape, x, w, y, tile_mean, tile_m2, stream);
  } else {
    moments_gemm<cutlass::bfloat16_t>(shape, x, w, y, tile_mean, tile_m2, stream);
  }
}

}  // namespace fusedops::cuda::gemm
#endif
