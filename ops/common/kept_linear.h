// The Linear's output y = x W^T of a forward, kept for the backward (issue 40). Models 39's and
// 62's backward needs y (BatchNorm's and GroupNorm's input); the reference keeps it from its
// forward, and recomputing it costs a GEMM and a split of W per training step. Their CUDA
// forward writes y whole on its unfused routes, so their autograd kernel opens a KeepLinear
// around its call of the operator, and the operator's CUDA kernel hands its y over
// (keep_linear); a route that never writes y (an epilogue inside the GEMM), a Meta kernel
// (torch.compile's tracing) and the CPU kernels (whose backward is ATen's, the reference's bit
// for bit) hand nothing over, and the backward recomputes y as before.
//
// Thread-local: the operator runs on the thread that called it, below autograd, within the
// scope; a nested operator call (none today) would find the slot taken and keep nothing.
#pragma once

#include <ATen/core/Tensor.h>

namespace fusedops {

// y as the forward wrote it: x W^T in the accumulation dtype, with the bias added where the
// route added it (cuda/linear.h's LinearOutput). Undefined where nothing was kept.
struct KeptLinear {
  at::Tensor y;
  bool bias_added = false;
};

namespace detail {
inline thread_local KeptLinear* kept_linear_slot = nullptr;
}  // namespace detail

// Opens the slot for one operator call on this thread.
class KeepLinear {
 public:
  KeepLinear() : outer_(detail::kept_linear_slot) { detail::kept_linear_slot = &kept_; }
  ~KeepLinear() { detail::kept_linear_slot = outer_; }
  KeepLinear(const KeepLinear&) = delete;
  KeepLinear& operator=(const KeepLinear&) = delete;
  const KeptLinear& kept() const { return kept_; }

 private:
  KeptLinear kept_;
  KeptLinear* outer_;
};

// The operator's kernel: y and whether it holds the bias, kept if a KeepLinear is open and
// empty.
inline void keep_linear(const at::Tensor& y, bool bias_added) {
  KeptLinear* slot = detail::kept_linear_slot;
  if (slot != nullptr && !slot->y.defined()) *slot = KeptLinear{y, bias_added};
}

}  // namespace fusedops
