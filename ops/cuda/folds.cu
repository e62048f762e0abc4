// The operators' weight folds on CUDA (folds.h).
#include "cuda/folds.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include "cuda/cuda_helpers.cuh"

namespace fusedops::cuda {
namespace {

// folded[r, c] = mean over t < pool of src[(r * pool + t) * cols + c]; rows past
// pooled_rows * pool are dropped, as AvgPool1d's floor does. A thread takes kVector consecutive
// columns: 16-byte loads and stores (Vec) where the columns and both pointers allow them (the
// fold is a pass over W, bound by reading it), one column otherwise. Each value is the same sum
// in the same order either way.

template <typename scalar_t, int kVector>
__global__ void avgpool_fold_kernel(const scalar_t* __restrict__ src, scalar_t* __restrict__ folded,
                                    int64_t pooled_rows, int64_t cols, int64_t pool) {
  using Pack = Vec<scalar_t, kVector>;
  const int64_t packs = cols / kVector;  // cols % kVector == 0 (the caller's choice)
  const int64_t total = pooled_rows * packs;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / packs;
    const int64_t c = (idx - r * packs) * kVector;
    double sum[kVector] = {};
    for (int64_t t = 0; t < pool; ++t) {
      const Pack in = *reinterpret_cast<const Pack*>(src + (r * pool + t) * cols + c);
#pragma unroll
      for (int i = 0; i < kVector; ++i) sum[i] += static_cast<double>(in.v[i]);
    }
    Pack out;
#pragma unroll
    for (int i = 0; i < kVector; ++i) {
      out.v[i] = static_cast<scalar_t>(sum[i] / static_cast<double>(pool));
    }
    *reinterpret_cast<Pack*>(folded + r * cols + c) = out;
  }
}

template <typename scalar_t, int kVector>
void launch_avgpool_fold(const scalar_t* src, scalar_t* folded, int64_t pooled, int64_t cols,
                         int64_t pool) {
  const int threads = 256;
  const int64_t blocks =
      std::min<int64_t>(ceil_div(pooled * (cols / kVector), threads), 65535LL * 8);
  avgpool_fold_kernel<scalar_t, kVector><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      src, folded, pooled, cols, pool);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t>
at::Tensor avgpool_fold_rows(const at::Tensor& src, int64_t pool) {
  const int64_t rows = src.size(0);
  const int64_t cols = src.dim() == 2 ? src.size(1) : 1;
  const int64_t pooled = rows / pool;
  at::Tensor folded = src.dim() == 2 ? at::empty({pooled, cols}, src.options())
                                     : at::empty({pooled}, src.options());
  if (pooled * cols == 0) return folded;
  constexpr int kVector = 16 / sizeof(scalar_t);
  const scalar_t* s = src.data_ptr<scalar_t>();
  scalar_t* f = folded.data_ptr<scalar_t>();
  if (cols % kVector == 0 && is_16_byte_aligned(s) && is_16_byte_aligned(f)) {
    launch_avgpool_fold<scalar_t, kVector>(s, f, pooled, cols, pool);
  } else {
    launch_avgpool_fold<scalar_t, 1>(s, f, pooled, cols, pool);
  }
  return folded;
}

}  // namespace

FoldTensors fold_avgpool(const at::Tensor& weight, const at::Tensor& bias, int64_t pool) {
  const at::Tensor w = weight.contiguous();
  const at::Tensor b = bias.contiguous();
  FoldTensors result;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, w.scalar_type(), "avgpool_fold", [&] {
    result = {avgpool_fold_rows<scalar_t>(w, pool), avgpool_fold_rows<scalar_t>(b, pool)};
  });
  return result;
}

namespace {

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

}  // namespace

FoldTensors fold_sum(const at::Tensor& weight, const at::Tensor& bias, at::ScalarType out_dtype) {
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

}  // namespace fusedops::cuda
