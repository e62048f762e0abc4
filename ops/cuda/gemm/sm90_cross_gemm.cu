// The cross-term GEMM of the 3xFP16 engine (sm90_kernels.h), and, for a build without
// sm_90a, every sm90_*.cu entry point as a stub that throws: the planner never chooses them
// there (sm90_kernels_built: plan::DeviceFacts::sm90_kernels).
#include "cuda/gemm/gemm_half.h"
#include "cuda/gemm/sm90_kernels.h"

#if defined(FUSEDOPS_SM90A)
#include "cuda/gemm/sm90_gemm_types.cuh"
#else
#include <stdexcept>
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
#else
namespace {
[[noreturn]] void no_sm90_kernels() {
  throw std::runtime_error("fusedops: this build has no sm_90a GEMM kernels");
}
}  // namespace

bool sm90_kernels_built() { return false; }

void cross_gemm_sm90(const Fp16GemmShape&, const void*, const void*, float*, cudaStream_t) {
  no_sm90_kernels();
}
void promoted_gemm_sm90(const Fp16GemmShape&, const void*, const void*, const float*, float*,
                        const float*, const float*, cudaStream_t) {
  no_sm90_kernels();
}
void scaled_gemm_sm90(const Fp16GemmShape&, const void*, const void*, float*, const float*,
                      cudaStream_t) {
  no_sm90_kernels();
}
void scaled_moments_gemm_sm90(const Fp16GemmShape&, const void*, const void*, float*,
                              const float*, float*, float*, cudaStream_t) {
  no_sm90_kernels();
}
void promoted_partial_gemm_sm90(const Fp16GemmShape&, const void*, const void*, float*,
                                cudaStream_t) {
  no_sm90_kernels();
}
void half_moments_gemm_sm90(HalfType, const Fp16GemmShape&, const void*, const void*, float*,
                            float*, float*, cudaStream_t) {
  no_sm90_kernels();
}
#endif

}  // namespace fusedops::cuda::gemm
