// Meta (shape-only) kernel of the GEMM helper a b^T.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "common/checks.h"

namespace fusedops {
namespace {

at::Tensor gemm_nt_meta(const at::Tensor& a, const at::Tensor& b) {
  checks::gemm_nt(a, b);
  return at::empty_symint({a.sym_size(0), b.sym_size(0)}, a.options());
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, Meta, m) { m.impl("gemm_nt", &gemm_nt_meta); }

}  // namespace fusedops
