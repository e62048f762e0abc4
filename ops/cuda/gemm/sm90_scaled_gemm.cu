// The 3xFP16 engine's main term alone, scaled per row: the one-product form, TF32's accuracy at
// the fp16 rate (gemm_3xfp16.h), d[r] = alpha[r] * (a . b^T)[r].
//
// No promotion, and the cross GEMM's 128 x 256 tile: the tensor cores' own float32
// accumulation over K costs about 1e-5 relative at K = 8192 (issue 11), some 40 times below
// the 11-bit rounding of each operand that TF32 and this form share (3-4e-4 against float64,
// tests/python/test_tf32.py), and PyTorch's TF32 GEMM accumulates the same way. The promoted
// mainloop it replaces held two accumulator sets, which kept its tile at 128 x 128, well below
// cuBLAS's fp16 GEMM's rate (measured: docs/PERFORMANCE.md, "Issue 24, first pass").
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
    fusion::Sm90ColBroadcast<0, sm90::CrossTile, float, float,
                             cute::Stride<cute::_1, cute::_0, int64_t>, sm90::kAlignOut>,
    fusion::Sm90AccFetch>;

}  // namespace

void scaled_gemm_sm90(const Fp16GemmShape& shape, const void* a, const void* b, float* d,
                      const float* alpha, cudaStream_t stream) {
  using Epi = sm90::Epilogue<sm90::CrossTile, void, RowScaledAcc>;
  using G = sm90::Gemm<sm90::PlainMainloop<sm90::CrossTile, Epi>, Epi>;
  auto args = sm90::make_arguments<G>(shape, a, b, nullptr, d);
  args.epilogue.thread = {{alpha, 0.0f, {cute::_1{}, cute::_0{}, 0}}, {}, {}};
  sm90::run<G>(args, stream, "scaled_gemm_sm90");
}

}  // namespace fusedops::cuda::gemm
#endif
