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
// The Linear's weight and bias cast (AutocastCall::parameter): where autograd will not
// differentiate the call (grad mode off, or a parameter that needs no gradient), the cast is a
// fold of the parameter (common/fold_cache.h): made once per version of the float32 tensor and
// kept across autocast regions. Autocast's own cache lasts one region, so a server that enters
// a region per request cast all of W on every call (a pass over 256 MiB at 8192 x 8192), and
// models 18 and 98, whose folds are keyed by the tensors they are given, folded each new cast
// again. cache_folds=False casts every call; where autograd differentiates, autocast's own
// (differentiable) cast.
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
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <optional>

#include "common/fold_cache.h"

namespace fusedops::autocast {

// The fold of a parameter cast as autocast casts it (AutocastCall::parameter); its parameter
// says to which dtype, and whether widened back.
inline constexpr FoldKind kAutocastCast{"the autocast dtype's copy of a parameter"};

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

  // The Linear's weight or bias p of operator `op` as to_autocast_dtype casts it (`widened`:
  // as rounded() rounds it), a fold of p where autograd will not differentiate the call (see
  // the top of this file). cache_folds: the operator's argument.
  at::Tensor parameter(const char* op, const at::Tensor& p, std::optional<bool> cache_folds,
                       bool widened = false) const {
    const bool casts = p.scalar_type() == at::kFloat &&
                       at::autocast::is_autocast_eligible(p, device_type);
    if (!casts || (at::GradMode::is_enabled() && p.requires_grad())) {
      return widened ? rounded(p) : to_autocast_dtype(p);
    }
    const OperatorCall named(op, cache_folds);  // the operator a fold check names
    const int64_t kind_param = static_cast<int64_t>(dtype()) * 2 + (widened ? 1 : 0);
    return fold_weights(kAutocastCast, kind_param, {p}, cache_folds.value_or(true), [&] {
      const at::Tensor cast = p.to(dtype());
      return FoldTensors{widened ? cast.to(at::kFloat) : cast, {}, {}};
    })[0];
  }

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
