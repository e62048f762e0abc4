// Model 18's routes (row_sum.h). sum_j (x . w_j + b_j) = x . colsum(W) + sum(b): the GEMM
// folds away into a matrix-vector product, and the max/mean/logsumexp chain over a size-1 dim
// is identity.
#include "cuda/epilogues/row_sum.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <type_traits>

#include "cuda/cuda_helpers.cuh"

namespace fusedops::cuda {
namespace {

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
  __shared__ acc scratch[kRowThreads / kWarpSize];
  const int64_t row = blockIdx.x;
  const scalar_t* xr = x + row * k;
  acc dot = 0;
  bool finite = true;
  int64_t scalar_end = k;  // the columns left to the scalar loop
  if constexpr (std::is_same_v<scalar_t, float>) {
    // 16-byte loads, several in flight per thread: this read of x is the whole cost.
    if (k % 4 == 0 && is_16_byte_aligned(xr) && is_16_byte_aligned(colsum)) {
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
    finite &= is_finite(v);
    dot += v * colsum[c];
  }
  const bool x_finite = __syncthreads_and(finite);
  const acc folded = block_sum(dot, scratch) + *bias_sum;  // the same in every thread
  if (x_finite && is_finite(folded)) {
    if (threadIdx.x == 0) out[row] = static_cast<scalar_t>(folded);
    return;
  }
  acc total = 0;  // the reference's order of operations: y_j first, then their sum
  for (int64_t j = 0; j < n; ++j) {
    acc part = 0;
    for (int64_t c = threadIdx.x; c < k; c += blockDim.x) {
      part += static_cast<acc>(xr[c]) * static_cast<acc>(weight[j * k + c]);
    }
    total += block_sum(part, scratch) + static_cast<acc>(bias[j]);
  }
  if (threadIdx.x == 0) out[row] = static_cast<scalar_t>(total);
}

// The eager route: out[i] = sum_j y[i, j], y the Linear output in the model's dtype as the
// reference writes it, read as it is (8 values per 16-byte load where the row allows); the
// float32 sum is rounded once, as torch.sum writes it. One block per row.
template <typename scalar_t>
__global__ void eager_row_sum_kernel(const scalar_t* __restrict__ y, scalar_t* __restrict__ out,
                                     int64_t n) {
  __shared__ float scratch[kRowThreads / kWarpSize];
  const scalar_t* yr = y + blockIdx.x * n;
  float sum = 0.f;
  int64_t tail = 0;
  if (n % 8 == 0 && is_16_byte_aligned(yr)) {
    const uint4* y8 = reinterpret_cast<const uint4*>(yr);
#pragma unroll 4
    for (int64_t c = threadIdx.x; c < n / 8; c += blockDim.x) {
      const uint4 raw = y8[c];
      const scalar_t* v = reinterpret_cast<const scalar_t*>(&raw);
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += static_cast<float>(v[e]);
    }
    tail = n;
  }
  for (int64_t j = tail + threadIdx.x; j < n; j += blockDim.x) sum += static_cast<float>(yr[j]);
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = static_cast<scalar_t>(sum);
}

}  // namespace

void folded_row_sums(const at::Tensor& x, const FoldTensors& folded, const at::Tensor& weight,
                     const at::Tensor& bias, at::Tensor& out) {
  const int64_t batch = x.size(0), k = x.size(1), n = weight.size(0);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "sum_matvec", [&] {
    using acc = acc_t<scalar_t>;
    sum_matvec_kernel<scalar_t><<<batch, kRowThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<scalar_t>(), folded[0].data_ptr<acc>(), folded[1].data_ptr<acc>(),
        weight.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), k, n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void eager_row_sums(const at::Tensor& y, at::Tensor& out) {
  const int64_t batch = y.size(0), n = y.size(1);
  AT_DISPATCH_REDUCED_FLOATING_TYPES(out.scalar_type(), "eager_row_sum", [&] {
    eager_row_sum_kernel<scalar_t><<<batch, kRowThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace fusedops::cuda
