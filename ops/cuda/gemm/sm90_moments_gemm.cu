// The column-moments epilogue on the cooperative 128 x 256 GEMM: y as float32 and each 128-row
// tile's column moments (epilogue_moments_sm90.cuh), one kernel for two callers:
// - scaled_moments_gemm_sm90 (TF32 allowed): the 3xFP16 engine's main term, y = alpha_r acc;
//   same mainloop, tile and schedule as sm90_scaled_gemm.cu (why: there);
// - half_moments_gemm_sm90 (gemm_half.h, float16/bfloat16 operands): y = acc (alpha null).
//   Its float16 form is the very kernel above.
// The two consumer warp groups share a tile, so the epilogue's 256 threads meet over one
// tile's 256 columns. Without sm_90a: sm90_cross_gemm.cu's stubs.
#if defined(FUSEDOPS_SM90A)
#include "cuda/gemm/epilogue_moments_sm90.cuh"
#include "cuda/gemm/gemm_half.h"
#include "cuda/gemm/sm90_gemm_types.cuh"

#include <string>

namespace fusedops::cuda::gemm {
namespace {

static_assert(cute::is_same_v<sm90::KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedCooperative>,
              "the moments epilogue expects both consumer warp groups on one tile");

template <class Element>
void moments_gemm(const Fp16GemmShape& shape, const void* a, const void* b, float* d,
                  const float* alpha, float* tile_mean, float* tile_m2, cudaStream_t stream,
                  const char* name) {
  using Epi = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<
      sm90::ScaledColumnMomentsEpilogue<kMomentsTileN, 8>>;
  using G = sm90::Gemm<sm90::PlainMainloop<sm90::CrossTile, Epi, Element>, Epi>;
  auto args = sm90::make_mainloop_arguments<G>(shape, a, b);
  args.epilogue.alpha = alpha;
  args.epilogue.ptr_D = d;
  args.epilogue.dD = typename G::GemmKernel::StrideD{int64_t(shape.n), cute::Int<1>{}, 0};
  args.epilogue.tile_mean = tile_mean;
  args.epilogue.tile_m2 = tile_m2;
  sm90::run<G>(args, stream, name);
}

}  // namespace

void scaled_moments_gemm_sm90(const Fp16GemmShape& shape, const void* a, const void* b, float* d,
                              const float* alpha, float* tile_mean, float* tile_m2,
                              cudaStream_t stream) {
  moments_gemm<sm90::Fp16>(shape, a, b, d, alpha, tile_mean, tile_m2, stream,
                           "scaled_moments_gemm_sm90");
}

void half_moments_gemm_sm90(HalfType type, const Fp16GemmShape& shape, const void* x,
                            const void* w, float* y, float* tile_mean, float* tile_m2,
                            cudaStream_t stream) {
  if (shape.n % 4 != 0 || shape.batches != 1) {
    throw std::runtime_error("fusedops half_moments_gemm_sm90: N must be a multiple of 4 and "
                             "the GEMM unbatched, got n=" + std::to_string(shape.n) + ", batches=" +
                             std::to_string(shape.batches));
  }
  if (type == HalfType::kFloat16) {
    moments_gemm<sm90::Fp16>(shape, x, w, y, nullptr, tile_mean, tile_m2, stream,
                             "half_moments_gemm_sm90");
  } else {
    moments_gemm<cutlass::bfloat16_t>(shape, x, w, y, nullptr, tile_mean, tile_m2, stream,
                                      "half_moments_gemm_sm90");
  }
}

}  // namespace fusedops::cuda::gemm
#endif
