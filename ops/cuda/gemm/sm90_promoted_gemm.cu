// The promoted main-term GEMM of the 3xFP16 engine with its combining epilogue, per-row scales
// (sm90_kernels.h). Without sm_90a: sm90_cross_gemm.cu's stub.
#if defined(FUSEDOPS_SM90A)
#include "cuda/gemm/sm90_gemm_types.cuh"

namespace fusedops::cuda::gemm {

void promoted_gemm_sm90(const Fp16GemmShape& shape, const void* a, const void* b, const float* c,
                        float* d, const float* alpha, const float* beta, cudaStream_t stream) {
  using Epi = sm90::Epilogue<sm90::PromotedTile, float, sm90::PerRowLinearCombination>;
  using G = sm90::Gemm<sm90::PromotedMainloop<sm90::PlainMainloop<sm90::PromotedTile, Epi>>, Epi>;
  auto args = sm90::make_arguments<G>(shape, a, b, c, d);
  args.mainloop.mma_promotion_interval = sm90::kPromotionInterval;
  // Vectors over M (dAlpha/dBeta's default: stride 1 along the rows), 16-byte aligned
  // (GuardLayout); no bias.
  args.epilogue.thread.alpha_ptr = alpha;
  args.epilogue.thread.beta_ptr = beta;
  sm90::run<G>(args, stream, "promoted_gemm_sm90");
}

}  // namespace fusedops::cuda::gemm
#endif
