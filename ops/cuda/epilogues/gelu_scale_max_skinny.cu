// Model 98's row reduction fused into the weight-streaming kernel (gelu_scale_max.h): the
// blocks that wrote the K-slice partials read them back after a grid-wide barrier
// (skinny_half_launch.cuh's skinny_partials_then), so a call at few rows is one launch.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>

#include "cuda/epilogues/gelu_scale_max.h"
#include "cuda/epilogues/gelu_scale_max_rows.cuh"
#include "cuda/gemm/skinny_half_launch.cuh"

namespace fusedops::cuda {

bool gelu_scale_max_skinny(const gemm::SkinnyOperands& ops, int sm_count,
                           const at::Tensor& folded, const GeluScaleMaxArgs& a, at::Tensor& out) {
  bool done = false;
  FUSEDOPS_DISPATCH_PARTIALS_TYPES(a.x.scalar_type(), "gelu_scale_max_skinny", [&] {
    gemm::Partials3xFp16 partials;
    done = gemm::skinny_partials_then(ops, sm_count, partials,
                                      [&](const gemm::Partials3xFp16View& view) {
                                        return gelu_scale_max_rows<scalar_t>(view, folded, a, out);
                                      });
  });
  return done;
}

}  // namespace fusedops::cuda
