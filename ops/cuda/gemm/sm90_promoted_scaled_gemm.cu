// The 3xFP16 engine's main term alone, scaled per row: the 1xFP16 form, TF32's accuracy at the
// fp16 rate (gemm_3xfp16.h), its epilogue d[r] = alpha[r] * acc[r] (mainloop_3xfp16_sm90.h).
// Without sm_90a: sm90_cross_gemm.cu's stub.
#if defined(FUSEDOPS_SM90A)
#include "cuda/gemm/sm90_gemm_types.cuh"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"

namespace fusedops::cuda::gemm {
namespace {

namespace fusion = cutlass::epilogue::fusion;

// d = alpha_r * acc: a per-row (column-vector) broadcast of alpha times the accumulator, as a
// CUTLASS epilogue visitor tree; no source operand is read.
using RowScaledAcc = fusion::Sm90EVT<
    fusion::Sm90Compute<cutlass::multiplies, float, float, cutlass::FloatRoundStyle::round_to_nearest>,
    fusion::Sm90ColBroadcast<0, sm90::PromotedTile, float, float,
                             cute::Stride<cute::_1, cute::_0, int64_t>, sm90::kAlignOut>,
    fusion::Sm90AccFetch>;

}  // namespace

void promoted_scaled_gemm_sm90(const Fp16GemmShape& shape, const void* a, const void* b, float* d,
                               const float* alpha, cudaStream_t stream) {
  using Epi = sm90::Epilogue<sm90::PromotedTile, void, RowScaledAcc>;
  using G = sm90::Gemm<sm90::PromotedMainloop<sm90::PlainMainloop<sm90::PromotedTile, Epi>>, Epi>;
  auto args = sm90::make_arguments<G>(shape, a, b, nullptr, d);
  args.mainloop.mma_promotion_interval = sm90::kPromotionInterval;
  args.epilogue.thread = {{alpha, 0.0f, {cute::_1{}, cute::_0{}, 0}}, {}, {}};
  sm90::run<G>(args, stream, "promoted_scaled_gemm_sm90");
}

}  // namespace fusedops::cuda::gemm
#endif
