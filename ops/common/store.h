// How an intermediate is stored ("accurate" or "eager" numerics, common/numerics.h), as a
// type that kernels take as a template parameter, so the accurate kernels hold no rounding at
// all. ATen-free: the CUTLASS epilogues include it too.
#pragma once

#include <c10/macros/Macros.h>

namespace fusedops {

// Unrounded keeps v; RoundedTo<scalar_t> rounds v to the model's dtype where the reference's op
// writes it, and widens it back for the next step.
struct Unrounded {
  template <typename acc_t>
  C10_HOST_DEVICE static acc_t store(acc_t v) {
    return v;
  }
};
template <typename scalar_t>
struct RoundedTo {
  template <typename acc_t>
  C10_HOST_DEVICE static acc_t store(acc_t v) {
    return static_cast<acc_t>(static_cast<scalar_t>(v));
  }
};

}  // namespace fusedops
