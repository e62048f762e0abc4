// Model 18 on CUDA. sum_j (x . w_j + b_j) = x . colsum(W) + sum(b): the GEMM folds away into
// a matrix-vector product, and the max/mean/logsumexp chain over a size-1 dim is identity.
// The floor is reading x once (B*K*4 bytes); the fold (reading W) is cached with W.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <type_traits>

#include "common/checks.h"
#include "common/fold_cache.h"
#include "common/numerics.h"
#include "cuda/cuda_helpers.cuh"

namespace fusedops {
namespace {

using cuda::acc_t;
using cuda::ceil_div;

// Rows of W are split over gridDim.y slices so that the 8192-column fold fills the GPU.
constexpr int kFoldThreads = 256;
constexpr int kFoldRowSlices = 64;

// partial[s, c] = sum over rows r in slice s of src[r * row_stride + c], in double.
template <typename scalar_t>
__global__ void column_partial_sums_kernel(const scalar_t* __restrict__ src, double* partial,
                                           int64_t rows, int64_t cols, int64_t row_stride) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  const int64_t rows_per_slice = ceil_div(rows, gridDim.y);
  const int64_t begin = blockIdx.y * rows_per_slice;
  const int64_t end = begin + rows_per_slice < rows ? begin + rows_per_slice : rows;
  double sum = 0.0;
  for (int64_t r = begin; r < end; ++r) sum += static_cast<double>(src[r * row_stride + c]);
  partial[blockIdx.y * cols + c] = sum;
}

// out[c] = sum over slices of partial[s, c]: a fixed order, so the fold is deterministic.
template <typename out_t>
__global__ void column_finish_kernel(const double* __restrict__ partial, out_t* out, int64_t cols,
                                     int slices) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  double sum = 0.0;
  for (int s = 0; s < slices; ++s) sum += partial[s * cols + c];
  out[c] = static_cast<out_t>(sum);
}

// Column sums of a (rows, cols) matrix with the given row stride, as a tensor of `out_dtype`.
template <typename src_t>
at::Tensor column_sums(const src_t* src, int64_t rows, int64_t cols, int64_t row_stride,
                       const at::TensorOptions& options, at::ScalarType out_dtype) {
  at::Tensor out = at::empty({cols}, options.dtype(out_dtype));
  if (cols == 0) return out;
  const int slices = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kFoldRowSlices, rows)));
  at::Tensor partial = at::empty({slices, cols}, options.dtype(at::kDouble));
  auto stream = at::cuda::getCurrentCUDAStream();
  dim3 grid(ceil_div(cols, kFoldThreads), slices);
  column_partial_sums_kernel<src_t><<<grid, kFoldThreads, 0, stream>>>(
      src, partial.data_ptr<double>(), rows, cols, row_stride);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out_dtype, "column_finish", [&] {
    column_finish_kernel<scalar_t><<<ceil_div(cols, kFoldThreads), kFoldThreads, 0, stream>>>(
        partial.data_ptr<double>(), out.data_ptr<scalar_t>(), cols, slices);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

// (column sums of W (K,), sum of b ()) in `out_dtype`.
FoldTensors fold_sum(const at::Tensor& weight, const at::Tensor& bias,
                                 at::ScalarType out_dtype) {
  const at::Tensor w = weight.contiguous();
  const at::Tensor b = bias.contiguous();
  FoldTensors result;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, w.scalar_type(), "sum_fold", [&] {
    result = {column_sums(w.data_ptr<scalar_t>(), w.size(0), w.size(1), w.size(1), w.options(),
                          out_dtype),
              column_sums(b.data_ptr<scalar_t>(), b.size(0), 1, 1, b.options(), out_dtype)
                  .reshape({})};
  });
  return result;
}

constexpr int kRowThreads = 256;

// out[i] = x_i . colsum + bias_sum, one block per row. A row holding inf or NaN, or whose
// folded result is not finite (inf in the weights, overflow), takes the unfolded path,
// sum_j (x_i . w_j + b_j), because folding changes how infinities combine (inf * w_j summed
// over mixed-sign w_j is NaN, inf * sum_j w_j is not).
template <typename scalar_t>
__global__ void sum_matvec_kernel(const scalar_t* __restrict__ x,
                                  const acc_t<scalar_t>* __restrict__ colsum,
                                  const acc_t<scalar_t>* __restrict__ bias_sum,
                                  const scalar_t* __restrict__ weight,
                                  const scalar_t* __restrict__ bias, scalar_t* __restrict__ out,
                                  int64_t k, int64_t n) {
  using acc = acc_t<scalar_t>;
  __shared__ acc scratch[kRowThreads / cuda::kWarpSize];
  const int64_t row = blockIdx.x;
  const scalar_t* xr = x + row * k;
  acc dot = 0;
  bool finite = true;
  int64_t scalar_end = k;  // the columns left to the scalar loop
  if constexpr (std::is_same_v<scalar_t, float>) {
    // 16-byte loads, several in flight per thread: this read of x is the whole cost.
    if (k % 4 == 0 && cuda::is_16_byte_aligned(xr) && cuda::is_16_byte_aligned(colsum)) {
      const float4* x4 = reinterpret_cast<const float4*>(xr);
      const float4* w4 = reinterpret_cast<const float4*>(colsum);
#pragma unroll 4
      for (int64_t c = threadIdx.x; c < k / 4; c += blockDim.x) {
        const float4 v = x4[c];
        const float4 w = w4[c];
        finite &= isfinite(v.x) && isfinite(v.y) && isfinite(v.z) && isfinite(v.w);
        dot += v.x * w.x + v.y * w.y + v.z * w.z + v.w * w.w;
      }
      scalar_end = 0;
    }
  }
  for (int64_t c = threadIdx.x; c < scalar_end; c += blockDim.x) {
    const acc v = static_cast<acc>(xr[c]);
    finite &= cuda::is_finite(v);
    dot += v * colsum[c];
  }
  const bool x_finite = __syncthreads_and(finite);
  const acc folded = cuda::block_sum(dot, scratch) + *bias_sum;  // the same in every thread
  if (x_finite && cuda::is_finite(folded)) {
    if (threadIdx.x == 0) out[row] = static_cast<scalar_t>(folded);
    return;
  }
  acc total = 0;  // the reference's order of operations: y_j first, then their sum
  for (int64_t j = 0; j < n; ++j) {
    acc part = 0;
    for (int64_t c = threadIdx.x; c < k; c += blockDim.x) {
      part += static_cast<acc>(xr[c]) * static_cast<acc>(weight[j * k + c]);
    }
    total += cuda::block_sum(part, scratch) + static_cast<acc>(bias[j]);
  }
  if (threadIdx.x == 0) out[row] = static_cast<scalar_t>(total);
}

// "eager" numerics on a float16/bfloat16 model: out[i] = sum_j y[i, j], y the Linear output as
// the reference writes it (each element rounded to scalar_t, common/numerics.h); the float32
// sum is rounded once, as torch.sum writes it. One block per row.
template <typename scalar_t>
__global__ void eager_row_sum_kernel(const float* __restrict__ y, scalar_t* __restrict__ out,
                                     int64_t n) {
  __shared__ float scratch[kRowThreads / cuda::kWarpSize];
  const float* yr = y + blockIdx.x * n;
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += yr[j];
  sum = cuda::block_sum(sum, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<scalar_t>(sum);
}

at::Tensor matmul_sum_max_avgpool_logsumexp_logsumexp_cuda(const at::Tensor& x,
                                                           const at::Tensor& weight,
                                                           const at::Tensor& bias,
                                                           bool cache_folds,
                                                           c10::string_view numerics) {
  const Numerics numerics_mode =
      parse_numerics("matmul_sum_max_avgpool_logsumexp_logsumexp", numerics);
  checks::matmul_sum_max_avgpool_logsumexp_logsumexp(x, weight, bias);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const at::Tensor xc = x.contiguous();
  const at::Tensor wc = weight.contiguous();
  const at::Tensor bc = bias.contiguous();
  const int64_t batch = xc.size(0), k = xc.size(1), n = wc.size(0);
  at::Tensor out = at::empty({batch, 1}, x.options());
  if (batch == 0) return out;
  if (rounds_intermediates(numerics_mode, x.scalar_type() != at::kFloat &&
                                              x.scalar_type() != at::kDouble)) {
    // The fold never forms y[i, j], so eager runs the full GEMM: out_features times the
    // fold's FLOPs (its cost is in docs/PERFORMANCE.md).
    const at::Tensor y = linear_as_the_reference_writes_it(xc, wc, bc);
    AT_DISPATCH_REDUCED_FLOATING_TYPES(x.scalar_type(), "eager_row_sum", [&] {
      eager_row_sum_kernel<scalar_t><<<batch, kRowThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
          y.data_ptr<float>(), out.data_ptr<scalar_t>(), n);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
  }
  const at::ScalarType acc_dtype = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const FoldTensors folded = fold_weights(FoldKind::kSumLinear, 0, {weight, bias}, cache_folds,
                                          [&] { return fold_sum(wc, bc, acc_dtype); });
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "sum_matvec", [&] {
    using acc = acc_t<scalar_t>;
    sum_matvec_kernel<scalar_t><<<batch, kRowThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<scalar_t>(), folded[0].data_ptr<acc>(), folded[1].data_ptr<acc>(),
        wc.data_ptr<scalar_t>(), bc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), k, n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

std::tuple<at::Tensor, at::Tensor> sum_fold_linear_cuda(const at::Tensor& weight,
                                                        const at::Tensor& bias) {
  checks::sum_fold_linear(weight, bias);
  const c10::cuda::CUDAGuard device_guard(weight.device());
  const FoldTensors folded = fold_sum(weight, bias, weight.scalar_type());
  return {folded[0], folded[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("matmul_sum_max_avgpool_logsumexp_logsumexp",
         &matmul_sum_max_avgpool_logsumexp_logsumexp_cuda);
  m.impl("sum_fold_linear", &sum_fold_linear_cuda);
}

}  // namespace fusedops
