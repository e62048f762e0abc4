// Model 98's backward after its pooled Linear (the algebra in include/fusedops/fusedops.h,
// avgpool_gelu_scale_max_backward), two kernels where ATen's ops took about twenty launches:
//  1. a block per row: the argmax window r of scale * gelu(pooled) with the reference's
//     roundings and torch.max's rule (math/gelu_scale_max.h), c = dL/dout scale gelu'(p_r)
//     rounded as gelu_backward writes it, and x's gradient c Wp[r];
//  2. a block per (window, 1024 columns): the window's sum of c x over the rows whose argmax it
//     is, in row order (no atomics: the same bits every run), written 1/k to each of the
//     window's k rows of W's gradient; its first column block the bias's; the rows past the
//     last window zero.
#include "cuda/epilogues/gelu_scale_max.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>

#include "common/store.h"
#include "cuda/cuda_helpers.cuh"
#include "math/gelu_scale_max.h"

namespace fusedops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kColumnsPerThread = 4;
constexpr int kBlockColumns = kThreads * kColumnsPerThread;

// torch.max's order (ATen's GreaterOrNan): a NaN beats a number, the lower index wins a tie
// and between two NaNs.
template <typename acc>
__device__ __forceinline__ bool beats(acc a, int64_t ia, acc b, int64_t ib) {
  if (a != a) return b == b || ia < ib;
  return a == b ? ia < ib : a > b;
}

template <typename scalar_t, typename acc = acc_t<scalar_t>>
__global__ void __launch_bounds__(kThreads)
argmax_rows_kernel(const scalar_t* __restrict__ grad_out, const scalar_t* __restrict__ pooled,
                   const scalar_t* __restrict__ pooled_weight, int64_t batch, int64_t windows,
                   int64_t in, acc scale, int64_t* __restrict__ argmax, acc* __restrict__ c_out,
                   scalar_t* __restrict__ dx) {
  using Round = RoundedTo<scalar_t>;  // the reference's chain runs in the model's dtype
  const epilogues::GeluScaleMax<acc> math{scale};
  __shared__ acc best_s[kWarps];
  __shared__ int64_t index_s[kWarps];
  __shared__ int64_t r_s;
  __shared__ acc c_s;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  for (int64_t row = blockIdx.x; row < batch; row += gridDim.x) {
    const scalar_t* p = pooled + row * windows;
    acc best = 0;
    int64_t index = windows;  // none yet: beaten by any window
    for (int64_t j = threadIdx.x; j < windows; j += kThreads) {
      const acc h = math.template scaled_gelu<Round>(static_cast<acc>(p[j]));
      if (index == windows || beats(h, j, best, index)) best = h, index = j;
    }
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      const acc other = __shfl_down_sync(0xffffffffu, best, offset);
      const int64_t other_index = __shfl_down_sync(0xffffffffu, index, offset);
      if (other_index != windows && (index == windows || beats(other, other_index, best, index))) {
        best = other, index = other_index;
      }
    }
    if (lane == 0) best_s[warp] = best, index_s[warp] = index;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kWarps; ++w) {
        if (index_s[w] != windows &&
            (index == windows || beats(best_s[w], index_s[w], best, index))) {
          best = best_s[w], index = index_s[w];
        }
      }
      // The reference's gradient at its argmax: (dL/dout * scale) rounded, then gelu_backward.
      const acc dy = Round::store(static_cast<acc>(grad_out[row]) * scale);
      const acc c = Round::store(math.gelu_backward(dy, static_cast<acc>(p[index])));
      argmax[row] = index;
      c_out[row] = c;
      r_s = index, c_s = c;
    }
    __syncthreads();
    if (dx != nullptr) {
      const scalar_t* w = pooled_weight + r_s * in;
      scalar_t* d = dx + row * in;
      for (int64_t col = threadIdx.x; col < in; col += kThreads) {
        d[col] = static_cast<scalar_t>(c_s * static_cast<acc>(w[col]));
      }
    }
    __syncthreads();  // r_s, c_s and the shared maxima are read before the next row writes them
  }
}

template <typename scalar_t, typename acc = acc_t<scalar_t>>
__global__ void __launch_bounds__(kThreads)
window_sums_kernel(const int64_t* __restrict__ argmax, const acc* __restrict__ c,
                   const scalar_t* __restrict__ x, int64_t batch, int64_t in, int64_t windows,
                   int64_t k, int64_t out_features, acc inv_k, scalar_t* __restrict__ dw,
                   scalar_t* __restrict__ db) {
  const int64_t window = blockIdx.x;
  const int64_t col0 = static_cast<int64_t>(blockIdx.y) * kBlockColumns + threadIdx.x;
  const bool bias_block = blockIdx.y == 0 && db != nullptr;
  if (window == windows) {  // the rows the pooling drops: no gradient
    for (int64_t row = windows * k; row < out_features; ++row) {
      if (dw != nullptr) {
        for (int q = 0; q < kColumnsPerThread; ++q) {
          const int64_t col = col0 + q * kThreads;
          if (col < in) dw[row * in + col] = scalar_t(0);
        }
      }
      if (bias_block && threadIdx.x == 0) db[row] = scalar_t(0);
    }
    return;
  }
  __shared__ int rows_s[kThreads];
  __shared__ int offsets_s[kWarps + 1];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  acc sum[kColumnsPerThread] = {};
  acc c_sum = 0;
  for (int64_t tile = 0; tile < batch; tile += kThreads) {
    // This tile's rows whose argmax is `window`, compacted in row order.
    const int64_t i = tile + threadIdx.x;
    const bool match = i < batch && argmax[i] == window;
    const unsigned mask = __ballot_sync(0xffffffffu, match);
    if (lane == 0) offsets_s[warp + 1] = __popc(mask);
    __syncthreads();
    if (threadIdx.x == 0) {
      offsets_s[0] = 0;
      for (int w = 1; w <= kWarps; ++w) offsets_s[w] += offsets_s[w - 1];
    }
    __syncthreads();
    if (match) {
      rows_s[offsets_s[warp] + __popc(mask & ((1u << lane) - 1u))] = static_cast<int>(i - tile);
    }
    __syncthreads();
    const int n = offsets_s[kWarps];
    for (int m = 0; m < n; ++m) {
      const int64_t row = tile + rows_s[m];
      const acc cr = c[row];
      const scalar_t* xr = x + row * in;
      for (int q = 0; q < kColumnsPerThread; ++q) {
        const int64_t col = col0 + q * kThreads;
        if (col < in) sum[q] += cr * static_cast<acc>(xr[col]);
      }
      c_sum += cr;
    }
    __syncthreads();  // rows_s and offsets_s are read before the next tile writes them
  }
  if (dw != nullptr) {
    for (int q = 0; q < kColumnsPerThread; ++q) {
      const int64_t col = col0 + q * kThreads;
      if (col >= in) continue;
      const scalar_t v = static_cast<scalar_t>(sum[q] * inv_k);
      for (int64_t t = 0; t < k; ++t) dw[(window * k + t) * in + col] = v;
    }
  }
  if (bias_block) {
    const scalar_t v = static_cast<scalar_t>(c_sum * inv_k);
    for (int64_t t = threadIdx.x; t < k; t += kThreads) db[window * k + t] = v;
  }
}

template <typename T>
T* data_or_null(at::Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

}  // namespace

void gelu_scale_max_backward(const at::Tensor& grad_out, const at::Tensor& pooled,
                             const at::Tensor& x, const at::Tensor& pooled_weight, int64_t k,
                             double scale, at::Tensor& dx, at::Tensor& dw, at::Tensor& db) {
  const int64_t batch = x.size(0), in = x.size(1), windows = pooled_weight.size(0);
  const int64_t out_features = dw.defined() ? dw.size(0) : db.defined() ? db.size(0) : 0;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(),
                                  "gelu_scale_max_backward", [&] {
    using acc = acc_t<scalar_t>;
    at::Tensor argmax = at::empty({batch}, x.options().dtype(at::kLong));
    at::Tensor c = at::empty({batch}, x.options().dtype(c10::CppTypeToScalarType<acc>::value));
    if (batch > 0) {
      const auto blocks = static_cast<unsigned>(std::min<int64_t>(batch, 1 << 20));
      argmax_rows_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(
          grad_out.data_ptr<scalar_t>(), pooled.data_ptr<scalar_t>(),
          pooled_weight.data_ptr<scalar_t>(), batch, windows, in, static_cast<acc>(scale),
          argmax.data_ptr<int64_t>(), c.data_ptr<acc>(), data_or_null<scalar_t>(dx));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    if (out_features > 0 && (dw.defined() || db.defined())) {
      const bool tail = out_features > windows * k;
      const dim3 grid(static_cast<unsigned>(windows + (tail ? 1 : 0)),
                      static_cast<unsigned>(std::max<int64_t>(ceil_div(in, kBlockColumns), 1)));
      window_sums_kernel<scalar_t><<<grid, kThreads, 0, stream>>>(
          argmax.data_ptr<int64_t>(), c.data_ptr<acc>(), x.data_ptr<scalar_t>(), batch, in,
          windows, k, out_features, acc(1) / static_cast<acc>(k), data_or_null<scalar_t>(dw),
          data_or_null<scalar_t>(db));
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  });
}

}  // namespace fusedops::cuda
