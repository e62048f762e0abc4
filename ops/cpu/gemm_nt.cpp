// The GEMM helper a b^T on the CPU: ATen's GEMM, the reference's own.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "common/checks.h"

namespace fusedops {
namespace {

at::Tensor gemm_nt_cpu(const at::Tensor& a, const at::Tensor& b) {
  checks::gemm_nt(a, b);
  return at::mm(a, b.t());
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CPU, m) { m.impl("gemm_nt", &gemm_nt_cpu); }

}  // namespace fusedops
