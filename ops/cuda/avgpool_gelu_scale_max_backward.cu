// Model 98's backward after its pooled Linear on CUDA: two kernels
// (cuda/epilogues/gelu_scale_max_backward.cu) where ATen's ops took about twenty launches a
// training step (issue 40: the host time of a step).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "common/checks.h"
#include "cuda/epilogues/gelu_scale_max.h"

namespace fusedops {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> avgpool_gelu_scale_max_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& pooled, const at::Tensor& x,
    const at::Tensor& pooled_weight, int64_t pool_kernel_size, double scale_factor,
    int64_t out_features, std::array<bool, 3> output_mask) {
  checks::avgpool_gelu_scale_max_backward(grad_out, pooled, x, pooled_weight, pool_kernel_size,
                                          out_features);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const at::Tensor xc = x.contiguous(), wc = pooled_weight.contiguous();
  at::Tensor dx = output_mask[0] ? at::empty_like(xc) : at::Tensor();
  at::Tensor dw = output_mask[1] ? at::empty({out_features, x.size(1)}, x.options()) : at::Tensor();
  at::Tensor db = output_mask[2] ? at::empty({out_features}, x.options()) : at::Tensor();
  cuda::gelu_scale_max_backward(grad_out.contiguous(), pooled.contiguous(), xc, wc,
                                pool_kernel_size, scale_factor, dx, dw, db);
  // An output not asked for: an empty tensor of its own (the schema's outputs alias nothing).
  const auto or_empty = [&](const at::Tensor& t) {
    return t.defined() ? t : at::empty({0}, x.options());
  };
  return {or_empty(dx), or_empty(dw), or_empty(db)};
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("avgpool_gelu_scale_max_backward", &avgpool_gelu_scale_max_backward_cuda);
}

}  // namespace fusedops
