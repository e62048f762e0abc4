// The cross-term GEMM of the 3xFP16 engine (mainloop_3xfp16_sm90.h).
#include "cuda/gemm/mainloop_3xfp16_sm90.h"

#include <stdexcept>

#if defined(FUSEDOPS_SM90A)
#include "cuda/gemm/sm90_gemm_types.cuh"
#endif

namespace fusedops::cuda::gemm {

#if defined(FUSEDOPS_SM90A)
void cross_gemm_sm90(const Fp16GemmShape& shape, const void* a, const void* b, float* d,
                     cudaStream_t stream) {
  using Epi = sm90::Epilogue<sm90::CrossTile, void>;
  using G = sm90::Gemm<sm90::PlainMainloop<sm90::CrossTile, Epi>, Epi>;
  auto args = sm90::make_arguments<G>(shape, a, b, nullptr, d);
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  sm90::run<G>(args, stream, "cross_gemm_sm90");
}

bool sm90_kernels_built() { return true; }
#else  // built without sm_90a: the engine is never chosen (can_run_3xfp16)
void cross_gemm_sm90(const Fp16GemmShape&, const void*, const void*, float*, cudaStream_t) {
  throw std::runtime_error("fusedops: this build has no sm_90a GEMM kernels");
}

bool sm90_kernels_built() { return false; }
#endif

}  // namespace fusedops::cuda::gemm
