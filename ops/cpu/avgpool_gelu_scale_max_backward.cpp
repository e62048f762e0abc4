// Model 98's backward after its pooled Linear on the CPU (the algebra in
// include/fusedops/fusedops.h): ATen's ops, in the reference's dtype and order where the
// reference has one - gelu, the product and torch.max for the argmax, gelu_backward for c,
// mul for x's gradient - and the window sums by index_add in the accumulation dtype.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "common/checks.h"

namespace fusedops {
namespace {

// A gradient of `rows` rows (W's or b's) from each k-window's sum (windows[, in]): the window's
// k rows take 1/k of it each, the rows past the last window (which the pooling drops) none.
at::Tensor spread_over_windows(const at::Tensor& per_window, int64_t k, int64_t rows,
                               at::ScalarType dtype) {
  std::vector<int64_t> shape = per_window.sizes().vec();  // (windows[, in])
  shape.insert(shape.begin() + 1, k);                       // (windows, k[, in])
  std::vector<int64_t> full_shape = per_window.sizes().vec();
  full_shape[0] = rows;
  at::Tensor full = at::empty(full_shape, per_window.options().dtype(dtype));
  const int64_t covered = shape[0] * k;
  full.narrow(0, 0, covered)
      .view(shape)
      .copy_((per_window / static_cast<double>(k)).unsqueeze(1).expand(shape));
  full.narrow(0, covered, rows - covered).zero_();
  return full;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> avgpool_gelu_scale_max_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& pooled, const at::Tensor& x,
    const at::Tensor& pooled_weight, int64_t pool_kernel_size, double scale_factor,
    int64_t out_features, std::array<bool, 3> output_mask) {
  checks::avgpool_gelu_scale_max_backward(grad_out, pooled, x, pooled_weight, pool_kernel_size,
                                          out_features);
  const at::ScalarType acc = at::toOpMathType(x.scalar_type());
  const at::Tensor r = std::get<1>(at::max(at::gelu(pooled) * scale_factor, /*dim=*/1));
  const at::Tensor p_r = pooled.gather(1, r.unsqueeze(1)).squeeze(1);
  const at::Tensor c = at::gelu_backward(grad_out * scale_factor, p_r);
  const at::Tensor c_acc = c.to(acc);
  // An output not asked for: an empty tensor of its own (the schema's outputs alias nothing).
  at::Tensor dx = at::empty({0}, x.options()), dw = at::empty({0}, x.options()),
             db = at::empty({0}, x.options());
  if (output_mask[0]) dx = c.unsqueeze(1) * pooled_weight.index_select(0, r);
  if (output_mask[1]) {
    const at::Tensor per_window = at::zeros(pooled_weight.sizes(), x.options().dtype(acc))
                                      .index_add_(0, r, c_acc.unsqueeze(1) * x.to(acc));
    dw = spread_over_windows(per_window, pool_kernel_size, out_features, x.scalar_type());
  }
  if (output_mask[2]) {
    const at::Tensor per_window =
        at::zeros({pooled_weight.size(0)}, x.options().dtype(acc)).index_add_(0, r, c_acc);
    db = spread_over_windows(per_window, pool_kernel_size, out_features, x.scalar_type());
  }
  return {dx, dw, db};
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CPU, m) {
  m.impl("avgpool_gelu_scale_max_backward", &avgpool_gelu_scale_max_backward_cpu);
}

}  // namespace fusedops
