// Shared by the Autocast kernels in this folder (one file per operator, as torchvision's
// csrc/ops/autocast/). Inside torch.autocast(device, dtype) each operator does what the
// reference model's own ops do under PyTorch's autocast policy:
//   - the Linear (a lower-precision op in the policy) reads x, weight and bias cast to the
//     autocast dtype (cached_cast: weight casts are cached for the region, as for nn.Linear);
//   - the ops after it run in whatever dtype the policy and type promotion give the reference,
//     and the result has the reference's dtype (each operator's file says which, and why).
// The operator is then called again below the Autocast key, reaching Autograd and the backend
// kernel with the cast tensors; autograd records the casts, so gradients reach the float32
// parameters.
//
// Models 39 and 62, whose ops after the Linear run in float32: on CUDA the operator takes its
// autocast form (common/checks.h), x and weight cast as the policy casts them, the bias
// rounded so and widened back (every parameter after the Linear is float32); its Linear runs on
// the tensor cores in the autocast dtype, the rest in float32 on the accumulators. On CPU the
// operator takes one dtype: it runs in float32 on x, weight and bias rounded to the autocast
// dtype (the GEMM's products of those values are exact in float32, as in the reference's
// reduced-precision GEMM). The one rounding not repeated is the reference's of the Linear
// output to the autocast dtype (this result is the closer to float64).
#pragma once

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

namespace fusedops::autocast {

template <c10::DeviceType device_type>
class AutocastCall {
 public:
  // The autocast dtype of this device (torch.autocast's dtype argument).
  at::ScalarType dtype() const { return at::autocast::get_autocast_dtype(device_type); }

  // t in the autocast dtype when the policy would cast it (a float32/float16/bfloat16 tensor
  // on this device; float64 and other devices are left alone, as autocast leaves them).
  at::Tensor to_autocast_dtype(const at::Tensor& t) const {
    return at::autocast::cached_cast(dtype(), t, device_type);
  }

  // t as the policy rounds it for the Linear, widened back to float32.
  at::Tensor rounded(const at::Tensor& t) const { return to_autocast_dtype(t).to(at::kFloat); }

  // Whether the policy casts x at all: float64 inputs run the whole chain in float64.
  bool casts(const at::Tensor& x) const {
    return x.scalar_type() != at::kDouble && at::autocast::is_autocast_eligible(x, device_type);
  }

 private:
  // Calls made while this object lives skip the Autocast kernels (no second cast).
  c10::impl::ExcludeDispatchKeyGuard no_autocast_{
      at::autocast::get_autocast_dispatch_key_from_device_type(device_type)};
};

}  // namespace fusedops::autocast

// Registers kernel<CPU> and kernel<CUDA>, a template over the device type, as the operator's
// AutocastCPU and AutocastCUDA kernels.
#define FUSEDOPS_AUTOCAST_IMPL(name, kernel)          \
  TORCH_LIBRARY_IMPL(fusedops, AutocastCPU, m) {      \
    m.impl(name, &kernel<c10::DeviceType::CPU>);      \
  }                                                   \
  TORCH_LIBRARY_IMPL(fusedops, AutocastCUDA, m) {     \
    m.impl(name, &kernel<c10::DeviceType::CUDA>);     \
  }
