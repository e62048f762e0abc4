// Model 98's epilogue on CUDA: out[i] = max_j scale * gelu(p[i, j] + pooled_bias[j]) over the
// pooled Linear output p, NaN-propagating as torch.max. GELU is not monotonic and the scale
// may be negative, so the max stays last. Two readers of p, one epilogue: a pass over p
// written by an unfused GEMM, or the 3xFP16 engine's K-slice partials summed on the fly (y is
// then never written). A row whose pooled values are not all finite came from an inf/NaN in x
// (or an overflow); folding changes how infinities combine, so that row is recomputed
// unfolded, in the reference's order.
#pragma once

#include <ATen/core/Tensor.h>

#include "cuda/gemm/gemm_3xfp16.h"
#include "cuda/gemm/skinny_half.h"

namespace fusedops::cuda {

struct GeluScaleMaxArgs {
  at::Tensor pooled_bias;           // (out / k,) the folded bias, x's dtype
  at::Tensor x, weight, bias;       // contiguous: the unfolded Linear, for non-finite rows
  int64_t pool = 1;
  double scale = 1.0;
  bool eager = false;               // round as the reference writes (common/numerics.h)
};

// p (batch, out / k) in the accumulation dtype; out (batch,) in x's dtype.
void gelu_scale_max_pass(const at::Tensor& p, const GeluScaleMaxArgs& args, at::Tensor& out);

// float32: p read from the engine's partials; `folded` the pooled weight (a guarded row is
// recomputed from it exactly, as the engine's own fixup does).
void gelu_scale_max_partials(const gemm::Partials3xFp16& p, const at::Tensor& folded,
                             const GeluScaleMaxArgs& args, at::Tensor& out);

// The weight-streaming kernels' partials and this reader in one launch (the skinny fused
// routes): false, with nothing launched, where the device cannot hold that grid at once or
// the runtime refuses the cooperative launch (the caller then runs gemm::skinny_partials and
// gelu_scale_max_partials).
bool gelu_scale_max_skinny(const gemm::SkinnyOperands& ops, int sm_count,
                           const at::Tensor& folded, const GeluScaleMaxArgs& args,
                           at::Tensor& out);

// The backward after the pooled Linear (include/fusedops/fusedops.h,
// avgpool_gelu_scale_max_backward; gelu_scale_max_backward.cu): grad_out (batch,), pooled
// (batch, out / k), x (batch, in) and the pooled weight contiguous, of x's dtype; dx (batch, in),
// dw (out_features, in) and db (out_features,) written where defined.
void gelu_scale_max_backward(const at::Tensor& grad_out, const at::Tensor& pooled,
                             const at::Tensor& x, const at::Tensor& pooled_weight, int64_t k,
                             double scale, at::Tensor& dx, at::Tensor& dw, at::Tensor& db);

}  // namespace fusedops::cuda
