// The promoted main-term GEMM of the 3xFP16 engine without epilogue arithmetic: split-K
// partials (sm90_kernels.h). Without sm_90a: sm90_cross_gemm.cu's stub.
#if defined(FUSEDOPS_SM90A)
#include "cuda/gemm/sm90_gemm_types.cuh"

namespace fusedops::cuda::gemm {

void promoted_partial_gemm_sm90(const Fp16GemmShape& shape, const void* a, const void* b,
                                float* d, cudaStream_t stream) {
  using Epi = sm90::Epilogue<sm90::PromotedTile, void>;
  using G = sm90::Gemm<sm90::PromotedMainloop<sm90::PlainMainloop<sm90::PromotedTile, Epi>>, Epi>;
  auto args = sm90::make_arguments<G>(shape, a, b, nullptr, d);
  args.mainloop.mma_promotion_interval = sm90::kPromotionInterval;
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  sm90::run<G>(args, stream, "promoted_partial_gemm_sm90");
}

}  // namespace fusedops::cuda::gemm
#endif
