// Model 98 on CUDA. AvgPool1d(k) of a Linear is the Linear with k-row means (the fold,
// cached with W), so the GEMM shrinks from N = out to N = out / k; then one warp per row
// applies bias, exact GELU, scale and a NaN-propagating max. GELU is not monotonic and the
// scale may be negative, so the max stays last. On Hopper the GEMM is the 3xFP16 engine split
// over K, and that per-row epilogue also sums its K-slices (y is never written).
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
#include "cuda/gemm/epilogue_3xfp16.cuh"
#include "cuda/gemm/gemm_3xfp16.h"
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

// The pooled value, GELU and the product as the reference stores them: rounded to scalar_t
// under eager (the Linear output is never formed here: the fold pools the weights).
template <typename scalar_t, typename acc = acc_t<scalar_t>>
__device__ __forceinline__ acc scaled_gelu(acc p, acc scale, bool eager) {
  const acc g = stored_as<scalar_t>(cuda::gelu_erf(stored_as<scalar_t>(p, eager)), eager);
  return stored_as<scalar_t>(g * scale, eager);
}

// A row whose pooled values are not all finite came from an inf/NaN in x (or an overflow);
// folding changes how infinities combine, so that row is recomputed unfolded, in the
// reference's order, by one warp. Every lane returns the row's result.
template <typename scalar_t, typename acc = acc_t<scalar_t>>
__device__ acc unfolded_row_max(const scalar_t* __restrict__ xr, const scalar_t* __restrict__ weight,
                                const scalar_t* __restrict__ bias, int64_t pooled_n, int64_t k,
                                int64_t pool, acc scale, bool eager, int lane) {
  acc best = -INFINITY;
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
    best = cuda::nan_max(best, scaled_gelu<scalar_t>(window / static_cast<acc>(pool), scale, eager));
  }
  return best;
}

// One warp per row: out[i] = max_j scale * gelu(p[i, j] + pooled_bias[j]), p = the pooled
// Linear output (batch, pooled_n) in the accumulation dtype.
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
  acc best = -INFINITY;
  bool finite = true;
  for (int64_t j = lane; j < pooled_n; j += cuda::kWarpSize) {
    const acc p = pr[j] + static_cast<acc>(pooled_bias[j]);
    finite &= cuda::is_finite(p);
    best = cuda::nan_max(best, scaled_gelu<scalar_t>(p, scale, eager));
  }
  if (!__all_sync(0xffffffffu, finite)) {
    best = unfolded_row_max(x + row * k, weight, bias, pooled_n, k, pool, scale, eager, lane);
  }
  best = cuda::warp_nan_max(best);
  if (lane == 0) out[row] = static_cast<scalar_t>(best);
}

// The same epilogue over the 3xFP16 engine's split-K partials (float32 only), summing the
// K-slices as it goes (gemm/epilogue_3xfp16.cuh): y is never written. One block per row, a
// thread per 4 columns (16-byte loads of every slice): the sum is bound by reading the
// partials, so it needs many loads in flight. A row the engine's guard rejected is recomputed
// here exactly (a warp per value), as the engine's own fixup does.
constexpr int kRowThreads = 128;

__global__ void __launch_bounds__(kRowThreads)
gelu_scale_max_partials_kernel(cuda::gemm::Partials3xFp16View view, const float* __restrict__ folded,
                               const float* __restrict__ pooled_bias, const float* __restrict__ x,
                               const float* __restrict__ weight, const float* __restrict__ bias,
                               float* __restrict__ out, int64_t batch, int64_t pooled_n,
                               int64_t k, int64_t pool, float scale, bool eager) {
  __shared__ float warp_best[kRowThreads / cuda::kWarpSize];
  const int lane = threadIdx.x % cuda::kWarpSize, warp = threadIdx.x / cuda::kWarpSize;
  constexpr int kWarps = kRowThreads / cuda::kWarpSize;
  for (int64_t row = blockIdx.x; row < batch; row += gridDim.x) {
    float best = -INFINITY;
    bool finite = true;
    auto take = [&](float p) {
      finite &= cuda::is_finite(p);
      best = cuda::nan_max(best, scaled_gelu<float>(p, scale, eager));
    };
    if (!view.guarded(row)) {
      for (int64_t j = 4 * static_cast<int64_t>(threadIdx.x); j < pooled_n; j += 4 * kRowThreads) {
        const float4 p = view.at4(row, j);
        const float4 b = *reinterpret_cast<const float4*>(pooled_bias + j);
        take(p.x + b.x); take(p.y + b.y); take(p.z + b.z); take(p.w + b.w);
      }
    } else {
      for (int64_t j = warp; j < pooled_n; j += kWarps) {
        const float p = cuda::gemm::exact_dot(x + row * k, folded + j * k, k, lane);
        if (lane == 0) take(p + pooled_bias[j]);
      }
    }
    finite = __syncthreads_and(finite);
    best = cuda::warp_nan_max(best);
    if (lane == 0) warp_best[warp] = best;
    __syncthreads();
    if (warp == 0) {
      if (finite) {
        best = warp_best[0];
        for (int w = 1; w < kWarps; ++w) best = cuda::nan_max(best, warp_best[w]);
      } else {
        best = unfolded_row_max(x + row * k, weight, bias, pooled_n, k, pool, scale, eager, lane);
      }
      if (lane == 0) out[row] = best;
    }
    __syncthreads();  // warp_best is read before the next row writes it
  }
}

// Model 98 through the 3xFP16 engine with the epilogue fused into the split-K combination (the
// engine picks split-K here: N = out / k = 512 gives too few output tiles). Returns false when
// the engine refuses the weight; the caller then runs linear_nt's exact path.
bool gelu_scale_max_3xfp16(const at::Tensor& x, const FoldTensors& folded, const at::Tensor& weight,
                           const at::Tensor& bias, at::Tensor& out, int64_t pool, double scale,
                           bool cache_folds, bool eager) {
  const int64_t batch = x.size(0), k = x.size(1), pooled_n = folded[0].size(0);
  cuda::gemm::Partials3xFp16 product;
  if (!cuda::gemm::linear_nt_3xfp16_partials(x, folded[0], folded[0], cache_folds, product)) {
    return false;
  }
  const cuda::gemm::GuardLayout layout{batch};
  const int* g = product.guard.data_ptr<int>();
  const cuda::gemm::Partials3xFp16View view{
      product.partials.data_ptr<float>(), product.cross_slices, product.main_slices, pooled_n,
      batch * pooled_n, reinterpret_cast<const float*>(g + layout.alpha()),
      reinterpret_cast<const float*>(g + layout.beta())};
  TORCH_INTERNAL_ASSERT(pooled_n % 4 == 0 && cuda::is_16_byte_aligned(folded[1].data_ptr()));
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(batch, 1 << 20));
  gelu_scale_max_partials_kernel<<<blocks, kRowThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      view, folded[0].data_ptr<float>(), folded[1].data_ptr<float>(), x.data_ptr<float>(),
      weight.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), batch, pooled_n, k,
      pool, static_cast<float>(scale), eager);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
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
  const at::Tensor wc = weight.contiguous();
  const at::Tensor bc = bias.contiguous();
  const int64_t pooled_n = folded[0].size(0);
  if (x.scalar_type() == at::kFloat && pooled_n > 0 && k > 0 &&
      cuda::choose_fp32_gemm_mode(batch, pooled_n, k) == cuda::Fp32GemmMode::k3xFp16 &&
      gelu_scale_max_3xfp16(xc, folded, wc, bc, out, pool_kernel_size, scale_factor, cache_folds,
                            rounds_intermediates(numerics_mode, false))) {
    return out;
  }
  const at::Tensor pooled = cuda::linear_nt(xc, folded[0], cache_folds);  // (batch, out / k), float/double
  const bool eager = rounds_intermediates(numerics_mode, pooled.scalar_type() != x.scalar_type());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "gelu_scale_max", [&] {
    using acc = acc_t<scalar_t>;
    gelu_scale_max_kernel<scalar_t>
        <<<ceil_div(batch, kWarpsPerBlock), kWarpsPerBlock * cuda::kWarpSize, 0,
           at::cuda::getCurrentCUDAStream()>>>(
            pooled.data_ptr<acc>(), folded[1].data_ptr<scalar_t>(), xc.data_ptr<scalar_t>(),
            wc.data_ptr<scalar_t>(), bc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), batch,
            pooled_n, k, pool_kernel_size,
            static_cast<acc>(scale_factor), eager);
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
