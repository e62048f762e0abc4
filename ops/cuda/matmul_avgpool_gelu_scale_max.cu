// Model 98 on CUDA. AvgPool1d(k) of a Linear is the Linear with k-row means (the fold,
// cached with W), so the GEMM shrinks from N = out to N = out / k; then one warp per row
// applies bias, exact GELU, scale and a NaN-propagating max. GELU is not monotonic and the
// scale may be negative, so the max stays last.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "common/checks.h"
#include "common/fold_cache.h"
#include "common/numerics.h"
#include "cuda/cuda_helpers.cuh"
#include "cuda/linear_gemm.h"

namespace fusedops {
namespace {

using cuda::acc_t;
using cuda::ceil_div;

// folded[r, c] = mean over t < pool of src[(r * pool + t) * cols + c]; rows past
// pooled_rows * pool are dropped, as AvgPool1d's floor does.
template <typename scalar_t>
__global__ void avgpool_fold_kernel(const scalar_t* __restrict__ src, scalar_t* __restrict__ folded,
                                    int64_t pooled_rows, int64_t cols, int64_t pool) {
  const int64_t total = pooled_rows * cols;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / cols;
    const int64_t c = idx - r * cols;
    double sum = 0.0;
    for (int64_t t = 0; t < pool; ++t) sum += static_cast<double>(src[(r * pool + t) * cols + c]);
    folded[idx] = static_cast<scalar_t>(sum / static_cast<double>(pool));
  }
}

template <typename scalar_t>
at::Tensor avgpool_fold_rows(const at::Tensor& src, int64_t pool) {
  const int64_t rows = src.size(0);
  const int64_t cols = src.dim() == 2 ? src.size(1) : 1;
  const int64_t pooled = rows / pool;
  at::Tensor folded = src.dim() == 2 ? at::empty({pooled, cols}, src.options())
                                     : at::empty({pooled}, src.options());
  const int64_t total = pooled * cols;
  if (total == 0) return folded;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>(ceil_div(total, threads), 65535LL * 8);
  avgpool_fold_kernel<scalar_t><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      src.data_ptr<scalar_t>(), folded.data_ptr<scalar_t>(), pooled, cols, pool);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return folded;
}

FoldTensors fold_avgpool(const at::Tensor& weight, const at::Tensor& bias,
                                     int64_t pool) {
  const at::Tensor w = weight.contiguous();
  const at::Tensor b = bias.contiguous();
  FoldTensors result;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, w.scalar_type(), "avgpool_fold", [&] {
    result = {avgpool_fold_rows<scalar_t>(w, pool), avgpool_fold_rows<scalar_t>(b, pool)};
  });
  return result;
}

constexpr int kWarpsPerBlock = 8;

// One warp per row: out[i] = max_j scale * gelu(p[i, j] + pooled_bias[j]). A row whose pooled
// values are not all finite came from an inf/NaN in x (or an overflow); folding changes how
// infinities combine, so that row is recomputed unfolded, in the reference's order.
template <typename scalar_t>
__global__ void gelu_scale_max_kernel(const acc_t<scalar_t>* __restrict__ pooled,
                                      const scalar_t* __restrict__ pooled_bias,
                                      const scalar_t* __restrict__ x,
                                      const scalar_t* __restrict__ weight,
                                      const scalar_t* __restrict__ bias, scalar_t* __restrict__ out,
                                      int64_t batch, int64_t pooled_n, int64_t k, int64_t pool,
                                      acc_t<scalar_t> scale, bool eager) {
  using acc = acc_t<scalar_t>;
  const int lane = threadIdx.x % cuda::kWarpSize;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / cuda::kWarpSize;
  if (row >= batch) return;
  const acc* pr = pooled + row * pooled_n;
  // The pooled value, GELU and the product as the reference stores them: rounded to scalar_t
  // under eager (the Linear output is never formed here: the fold pools the weights).
  auto scaled_gelu = [&](acc p) {
    const acc g = stored_as<scalar_t>(cuda::gelu_erf(stored_as<scalar_t>(p, eager)), eager);
    return stored_as<scalar_t>(g * scale, eager);
  };
  acc best = -INFINITY;
  bool finite = true;
  for (int64_t j = lane; j < pooled_n; j += cuda::kWarpSize) {
    const acc p = pr[j] + static_cast<acc>(pooled_bias[j]);
    finite &= cuda::is_finite(p);
    best = cuda::nan_max(best, scaled_gelu(p));
  }
  if (!__all_sync(0xffffffffu, finite)) {
    best = -INFINITY;
    const scalar_t* xr = x + row * k;
    for (int64_t j = 0; j < pooled_n; ++j) {
      acc window = 0;
      for (int64_t t = 0; t < pool; ++t) {
        const scalar_t* wr = weight + (j * pool + t) * k;
        acc dot = 0;
        for (int64_t c = lane; c < k; c += cuda::kWarpSize) {
          dot += static_cast<acc>(xr[c]) * static_cast<acc>(wr[c]);
        }
        window += cuda::warp_sum(dot) + static_cast<acc>(bias[j * pool + t]);
      }
      best = cuda::nan_max(best, scaled_gelu(window / static_cast<acc>(pool)));
    }
  }
  best = cuda::warp_nan_max(best);
  if (lane == 0) out[row] = static_cast<scalar_t>(best);
}

at::Tensor matmul_avgpool_gelu_scale_max_cuda(const at::Tensor& x, const at::Tensor& weight,
                                              const at::Tensor& bias, int64_t pool_kernel_size,
                                              double scale_factor, bool cache_folds,
                                              c10::string_view numerics) {
  const Numerics numerics_mode = parse_numerics("matmul_avgpool_gelu_scale_max", numerics);
  checks::matmul_avgpool_gelu_scale_max(x, weight, bias, pool_kernel_size);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const at::Tensor xc = x.contiguous();
  const int64_t batch = xc.size(0), k = xc.size(1);
  at::Tensor out = at::empty({batch}, x.options());
  if (batch == 0) return out;
  const FoldTensors folded =
      fold_weights(FoldKind::kAvgPoolLinear, pool_kernel_size, {weight, bias}, cache_folds,
                   [&] { return fold_avgpool(weight, bias, pool_kernel_size); });
  const at::Tensor pooled = cuda::linear_nt(xc, folded[0], cache_folds);  // (batch, out / k), float/double
  const int64_t pooled_n = pooled.size(1);
  const bool eager = rounds_intermediates(numerics_mode, pooled.scalar_type() != x.scalar_type());
  const at::Tensor wc = weight.contiguous();
  const at::Tensor bc = bias.contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "gelu_scale_max", [&] {
    using acc = acc_t<scalar_t>;
    gelu_scale_max_kernel<scalar_t>
        <<<ceil_div(batch, kWarpsPerBlock), kWarpsPerBlock * cuda::kWarpSize, 0,
           at::cuda::getCurrentCUDAStream()>>>(
            pooled.data_ptr<acc>(), folded[1].data_ptr<scalar_t>(), xc.data_ptr<scalar_t>(),
            wc.data_ptr<scalar_t>(), bc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), batch,
            pooled_n, k, pool_kernel_size, static_cast<acc>(scale_factor), eager);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

std::tuple<at::Tensor, at::Tensor> avgpool_fold_linear_cuda(const at::Tensor& weight,
                                                            const at::Tensor& bias,
                                                            int64_t pool_kernel_size) {
  checks::avgpool_fold_linear(weight, bias, pool_kernel_size);
  const c10::cuda::CUDAGuard device_guard(weight.device());
  const FoldTensors folded = fold_avgpool(weight, bias, pool_kernel_size);
  return {folded[0], folded[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("matmul_avgpool_gelu_scale_max", &matmul_avgpool_gelu_scale_max_cuda);
  m.impl("avgpool_fold_linear", &avgpool_fold_linear_cuda);
}

}  // namespace fusedops
