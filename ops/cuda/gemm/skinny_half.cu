#include "cuda/gemm/skinny_half.h"

#include <ATen/ATen.h>

#include "cuda/gemm/skinny_half_launch.cuh"

namespace fusedops::cuda::gemm {

bool skinny_operands(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_key,
                     bool cache_folds, SkinnyOperands& out) {
  out.x = x;
  out.weight = weight;
  return x.scalar_type() != at::kFloat || split_pair(x, weight, weight_key, cache_folds, out.pair);
}

void skinny_half_linear(const SkinnyOperands& ops, at::Tensor& y, int sm_count) {
  check_skinny_operands(ops, StoreFloatY::kMaxRows);
  const StoreFloatY store{y.data_ptr<float>()};
  with_kernel_type(ops, [&](auto t) { launch_skinny<decltype(t)>(ops, store, sm_count, 16); });
}

void skinny_partials(const SkinnyOperands& ops, int sm_count, Partials3xFp16& out) {
  skinny_partials_then(ops, sm_count, out);
}

}  // namespace fusedops::cuda::gemm
