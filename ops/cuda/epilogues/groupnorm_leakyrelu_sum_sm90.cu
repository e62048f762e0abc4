// GroupNorm -> LeakyReLU -> x2 inside the Hopper half GEMM (groupnorm_leakyrelu_sum_fused.h):
// the engine (gemm/sm90_register_gemm.cuh) with this epilogue (groupnorm_leakyrelu_sum_sm90.cuh).
// Without sm_90a: a stub that says so.
#include "cuda/epilogues/groupnorm_leakyrelu_sum_fused.h"

#include <stdexcept>

#if defined(FUSEDOPS_SM90A)
#include "cuda/epilogues/groupnorm_leakyrelu_sum_sm90.cuh"
#include "cuda/gemm/sm90_register_gemm.cuh"

namespace fusedops::cuda {
namespace {

template <class Element, class ElementOut>
void run(const gemm::Fp16GemmShape& shape, const void* x, const void* w,
         const GroupNormGemmArgs& e, cudaStream_t stream) {
  using Epi = gemm::sm90::GroupNormLeakyReluSumEpilogue<ElementOut>;
  typename Epi::Arguments args;
  args.bias = static_cast<const ElementOut*>(e.bias);
  args.gamma = static_cast<const ElementOut*>(e.gamma);
  args.beta = static_cast<const ElementOut*>(e.beta);
  args.group_size = e.group_size;
  args.eps = e.eps;
  args.negative_slope = e.negative_slope;
  args.ptr_D = static_cast<ElementOut*>(e.out);
  gemm::sm90::register_epilogue_gemm<Epi, Element>(shape, x, w, args, stream,
                                                   "groupnorm_leakyrelu_sum_gemm_sm90");
}

template <class Element>
void run_to(const gemm::Fp16GemmShape& shape, const void* x, const void* w,
            const GroupNormGemmArgs& e, cudaStream_t stream) {
  if (e.float32_out) {
    run<Element, float>(shape, x, w, e, stream);
  } else {
    run<Element, Element>(shape, x, w, e, stream);
  }
}

}  // namespace

void groupnorm_leakyrelu_sum_gemm_sm90(gemm::HalfType type, const gemm::Fp16GemmShape& shape,
                                       const void* x, const void* w, const GroupNormGemmArgs& e,
                                       cudaStream_t stream) {
  if (!sm90_group_ok(e.group_size) || shape.n % e.group_size != 0 || shape.batches != 1) {
    throw std::runtime_error("fusedops groupnorm_leakyrelu_sum_gemm_sm90: unsupported group size "
                             "or shape");
  }
  if (type == gemm::HalfType::kFloat16) {
    run_to<cutlass::half_t>(shape, x, w, e, stream);
  } else {
    run_to<cutlass::bfloat16_t>(shape, x, w, e, stream);
  }
}

}  // namespace fusedops::cuda
#else
namespace fusedops::cuda {
void groupnorm_leakyrelu_sum_gemm_sm90(gemm::HalfType, const gemm::Fp16GemmShape&, const void*,
                                       const void*, const GroupNormGemmArgs&, cudaStream_t) {
  throw std::runtime_error("fusedops: this build has no sm_90a kernels");
}
}  // namespace fusedops::cuda
#endif
