// The `numerics` argument every model operator takes (docs/MODELS.md, "Numerics"):
//   "accurate" (the default): intermediates stay in the accumulation dtype (float32 for
//     float16/bfloat16 models) and only the result is rounded: closer to float64 than the
//     reference run in half precision.
//   "eager": every intermediate is rounded to the model's dtype where the reference's own ops
//     write it (the Linear output, the scale product, the normalization output, the pooled
//     values, GELU, ...), as Inductor's emulate_precision_casts does, so that a check against
//     the reference run in float16/bfloat16 sees the reference's own roundings. For float32 and
//     float64 models the two are the same computation.
// Parsed once here; the backend kernels (CPU, CUDA, Meta) call parse_numerics, so a bad value
// is refused on every path (Autograd and Autocast pass the string through to them).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/macros/Macros.h>
#include <c10/util/string_view.h>

#include <type_traits>

#include "common/store.h"

namespace fusedops {

enum class Numerics { kAccurate, kEager };

// "accurate" -> kAccurate, "eager" -> kEager; anything else throws
// "<op>: numerics must be \"accurate\" or \"eager\", got \"<value>\"".
Numerics parse_numerics(const char* op, c10::string_view numerics);

// Whether a kernel for a model of dtype `model_dtype_is_reduced` (float16/bfloat16: narrower
// than its accumulation dtype) rounds its intermediates: only "eager" on a reduced dtype does;
// for float32/float64 models the accumulation dtype is the model's dtype and there is nothing
// to round.
inline bool rounds_intermediates(Numerics numerics, bool model_dtype_is_reduced) {
  return numerics == Numerics::kEager && model_dtype_is_reduced;
}
inline bool rounds_intermediates(Numerics numerics, at::ScalarType model_dtype) {
  return rounds_intermediates(numerics,
                              model_dtype == at::kHalf || model_dtype == at::kBFloat16);
}

// "eager": the Linear output x W^T + b exactly as the reference's nn.Linear writes it: ATen's
// own GEMM in the model's dtype (at::linear, the call F.linear makes), contiguous, in that
// dtype (the epilogue after it is ours and reads it as it is). Only the same GEMM gives the
// same rounding of every element: a GEMM of our own accumulates in another order, which flips
// the rounding of about one element in 10^4, and a normalization after it (models 39, 62)
// amplifies such a flip past the 1e-2 bar.
at::Tensor linear_as_the_reference_writes_it(const at::Tensor& x, const at::Tensor& weight,
                                             const at::Tensor& bias);

// The same as a run-time choice, for the CPU kernels: with `eager`, RoundedTo<scalar_t>,
// otherwise Unrounded. CPU and CUDA kernels thus round at the same places.
template <typename scalar_t, typename acc_t>
C10_HOST_DEVICE inline acc_t stored_as(acc_t v, bool eager) {
  return eager ? RoundedTo<scalar_t>::store(v) : Unrounded::store(v);
}

// Calls f with Unrounded or RoundedTo<scalar_t> (a value of that type): the one place a
// run-time numerics choice becomes a kernel's template parameter. Only a float16/bfloat16
// model has anything to round: for the others no rounding variant is even instantiated.
template <typename scalar_t, typename F>
void with_store(bool eager, F&& f) {
  if constexpr (std::is_same_v<scalar_t, c10::Half> || std::is_same_v<scalar_t, c10::BFloat16>) {
    if (eager) {
      f(RoundedTo<scalar_t>{});
      return;
    }
  }
  f(Unrounded{});
}

}  // namespace fusedops
