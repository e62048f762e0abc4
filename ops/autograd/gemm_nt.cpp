// Autograd for the GEMM helper a b^T: saves a and b; d(a b^T) = g b for a, g^T a for b, each
// again a gemm_nt (of K-contiguous copies), so a double backward differentiates those.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "common/checks.h"
#include "autograd/backward_by_recompute.h"
#include "fusedops/fusedops.h"

namespace fusedops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class GemmNtFunction : public torch::autograd::Function<GemmNtFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    ctx->save_for_backward({a, b});
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return fusedops::gemm_nt(a, b);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &b = saved[1], &g = grad_outputs[0];
    variable_list grads(2);
    // The transposed operands as views (gemm_nt reads a transposed b as it lies).
    if (ctx->needs_input_grad(0)) grads[0] = fusedops::gemm_nt(g, b.t());
    if (ctx->needs_input_grad(1)) grads[1] = fusedops::gemm_nt(g.t().contiguous(), a.t());
    return grads;
  }
};

at::Tensor gemm_nt_autograd(const at::Tensor& a, const at::Tensor& b) {
  if (!autograd::needs_autograd({a, b})) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return fusedops::gemm_nt(a, b);
  }
  checks::gemm_nt(a, b);
  return GemmNtFunction::apply(a, b);
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, Autograd, m) { m.impl("gemm_nt", &gemm_nt_autograd); }

}  // namespace fusedops
