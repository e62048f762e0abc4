// The 3xFP16 engine's composition: weight preparation (a cached fold), activation split with
// its range guard, the two GEMMs (mainloop_3xfp16_sm90.h) or their split-K slices and their sum,
// and the exact fixup of guarded rows.
// The algebra and the guard are described in gemm_3xfp16.h.
#include "cuda/gemm/gemm_3xfp16.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_fp16.h>

#include <cmath>
#include <limits>

#include "common/fold_cache.h"
#include "cuda/cuda_helpers.cuh"
#include "cuda/gemm/mainloop_3xfp16_sm90.h"

namespace fusedops::cuda::gemm {
namespace {

// Scaled values lie in [2^14, 2^15) at their tensor's maximum: the largest fp16 exponent range
// that keeps hi (up to 2^15 after rounding) and the K-sums of products far from overflow.
constexpr int kTopExponent = 15;
// lo holds the residual v - hi, at most 2^-11 |v| (half an fp16 ulp), scaled up by 2^11 so
// that it stays a normal fp16 number (11 more bits) for every value hi carries as a normal.
constexpr float kLoScale = 2048.0f;
constexpr float kCrossWeight = 1.0f / 2048.0f;
// A row of x (or W) whose largest magnitude is more than 2^26 below its tensor's maximum is
// scaled below 2^-11: its values would sit in fp16's subnormal range and lose bits. Such rows
// of x are recomputed exactly (fixup_rows_kernel); such a W takes the exact path altogether.
constexpr int kRowRangeBits = 26;
// A row of x whose nonzero magnitudes span more than 2^30 is recomputed exactly too. Why: the
// split carries about 23 bits of each value (fp32 has 24), which is as good as float32 for
// ordinary rows, but a row of a few huge values that cancel (measured: values 2^-40 .. 2^40,
// the result 1000x below its terms) then misses the 1e-4 contract, where PyTorch's float32 does
// not. torch.rand rows span at most 2^24 (its 24-bit grid); a randn row of 8192 spans 2^30
// about once in 40 tensors of 1024 rows.
constexpr int kRowSpreadBits = 30;
// K is padded to a whole number of 64-wide K steps (zeros): TMA needs 16-byte row strides, the
// main-term view starts kp values into each row of the weight's pair, and split-K slices are
// whole K steps.
constexpr int64_t kKAlign = kTileK;

constexpr int kThreads = 256;

// The power of two that puts `max` into [2^14, 2^15).
__host__ __device__ inline int scale_shift(float max) {
  int e = 0;
  frexpf(max, &e);  // max = f 2^e, f in [0.5, 1); 0 gives e = 0
  return kTopExponent - e;
}

// The guard's per-call state, one int32 tensor: [0] x's largest finite row maximum (float bits;
// non-negative floats order like their bits), [1] the number of listed rows, [2] alpha, [3]
// beta (float bits), then the list of guarded rows (M), then each row's maximum (float bits,
// -1 for a row holding inf or nan), then each row's smallest nonzero magnitude (float bits).
constexpr int kGuardMax = 0, kGuardCount = 1, kGuardAlpha = 2, kGuardBeta = 3, kGuardHeader = 4;

__device__ __forceinline__ float block_max(float v, float* scratch) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < kThreads / kWarpSize; ++w) v = fmaxf(v, scratch[w]);
  return v;
}

// One block a row: the row's largest magnitude, and whether it holds inf or nan.
__global__ void __launch_bounds__(kThreads)
row_range_kernel(const float* __restrict__ x, int64_t rows, int64_t k, int* __restrict__ guard) {
  __shared__ float scratch[kThreads / kWarpSize];
  int* row_max = guard + kGuardHeader + rows;
  int* row_min = guard + kGuardHeader + 2 * rows;
  const float inf = __int_as_float(0x7f800000);
  const bool vector = k % 4 == 0 && is_16_byte_aligned(x);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* src = x + row * k;
    float m = 0.0f, bad = 0.0f, least = inf;
    auto take = [&](float v) {
      const float a = fabsf(v);
      if (isfinite(a)) m = fmaxf(m, a); else bad = 1.0f;
      if (a > 0.0f) least = fminf(least, a);
    };
    if (vector) {  // 16-byte loads: this pass is bound by reading x
      for (int64_t c = 4 * static_cast<int64_t>(threadIdx.x); c < k; c += 4 * kThreads) {
        const float4 q = *reinterpret_cast<const float4*>(src + c);
        take(q.x); take(q.y); take(q.z); take(q.w);
      }
    } else {
      for (int64_t c = threadIdx.x; c < k; c += kThreads) take(src[c]);
    }
    m = block_max(m, scratch);
    bad = block_max(bad, scratch);
    least = -block_max(-least, scratch);
    if (threadIdx.x == 0) {
      row_min[row] = __float_as_int(least);
      row_max[row] = bad != 0.0f ? -1 : __float_as_int(m);
      if (bad == 0.0f) atomicMax(guard + kGuardMax, __float_as_int(m));
    }
  }
}

struct Half4 {
  __half2 a, b;
};

// Splits four consecutive values (columns past k read as zero) into hi and scaled lo parts.
__device__ __forceinline__ void split4(const float* src, int64_t col, int64_t k, bool vector,
                                       int shift, Half4& hi, Half4& lo) {
  float v[4];
  if (vector && col + 3 < k) {
    const float4 q = *reinterpret_cast<const float4*>(src + col);
    v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = col + i < k ? src[col + i] : 0.0f;
  }
  __half h[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float s = ldexpf(v[i], shift);  // exact: a power of two, result within [0, 2^15)
    h[i] = __float2half_rn(s);
    l[i] = __float2half_rn((s - __half2float(h[i])) * kLoScale);  // s - hi is exact
  }
  hi = {__halves2half2(h[0], h[1]), __halves2half2(h[2], h[3])};
  lo = {__halves2half2(l[0], l[1]), __halves2half2(l[2], l[3])};
}

// src (rows, k) float32 -> dst (rows, 2 kp) fp16: x rows as [hi | lo], weight rows as [lo | hi]
// (the cross GEMM pairs x_hi with W_lo and x_lo with W_hi over 2K; the main term reads the hi
// halves). With guard (x): the scale comes from x's maximum on the GPU, rows the guard rejects
// are listed and written as zeros, and block 0 writes the epilogue's alpha and beta.
__global__ void __launch_bounds__(kThreads)
split_kernel(const float* __restrict__ src, __half* __restrict__ dst, int64_t rows, int64_t k,
             int64_t kp, bool lo_first, int shift, int* __restrict__ guard,
             const int* __restrict__ weight_shift) {
  const bool vector = k % 4 == 0 && is_16_byte_aligned(src);
  bool scale_ok = true;
  float limit = 0.0f;
  if (guard != nullptr) {
    const float x_max = __int_as_float(guard[kGuardMax]);
    shift = scale_shift(x_max);
    limit = ldexpf(x_max, -kRowRangeBits);
    // alpha = 2^-(sx + sw) and beta = alpha 2^-11 must be normal float32 numbers.
    const int total = shift + *weight_shift;
    scale_ok = total <= 126 - 11 && total >= -127;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      guard[kGuardAlpha] = __float_as_int(ldexpf(1.0f, -total));
      guard[kGuardBeta] = __float_as_int(ldexpf(kCrossWeight, -total));
    }
  }
  __shared__ bool zero_row;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    if (guard != nullptr) {
      __syncthreads();  // zero_row of the previous row is read
      if (threadIdx.x == 0) {
        const int bits = guard[kGuardHeader + rows + row];
        const float m = __int_as_float(bits);
        const float least = __int_as_float(guard[kGuardHeader + 2 * rows + row]);
        zero_row = !scale_ok || bits < 0 || (m > 0.0f && m < limit) ||
                   (m > 0.0f && least < ldexpf(m, -kRowSpreadBits));
        if (zero_row) guard[kGuardHeader + atomicAdd(guard + kGuardCount, 1)] = static_cast<int>(row);
      }
      __syncthreads();
    }
    const float* s = src + row * k;
    __half* d = dst + row * 2 * kp;
    for (int64_t col = 4 * static_cast<int64_t>(threadIdx.x); col < kp; col += 4 * kThreads) {
      Half4 hi, lo;
      if (guard != nullptr && zero_row) {
        hi.a = hi.b = lo.a = lo.b = __float2half2_rn(0.0f);
      } else {
        split4(s, col, k, vector, shift, hi, lo);
      }
      *reinterpret_cast<Half4*>(d + col) = lo_first ? lo : hi;
      *reinterpret_cast<Half4*>(d + kp + col) = lo_first ? hi : lo;
    }
  }
}

// The exact path for the rows the guard listed: y[r, j] = sum_k x[r, k] W[j, k], summed in
// float64 and rounded once (IEEE semantics for inf and nan, as the reference's SGEMM), one warp
// an output. float64, not float32: a listed row can be one whose sum cancels heavily, where any
// float32 order other than cuBLAS's lands a few 1e-4 off (measured on a row spanning 2^-40 ..
// 2^40). A persistent grid: with no listed rows (the usual case) every block returns at once.
__global__ void __launch_bounds__(kThreads)
fixup_rows_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                  int64_t n, int64_t k, const int* __restrict__ guard) {
  const int count = guard[kGuardCount];
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / kWarpSize);
  const int64_t first = blockIdx.x * static_cast<int64_t>(kThreads / kWarpSize) +
                        threadIdx.x / kWarpSize;
  for (int i = blockIdx.y; i < count; i += gridDim.y) {
    const int64_t row = guard[kGuardHeader + i];
    const float* xr = x + row * k;
    for (int64_t j = first; j < n; j += warps) {
      const float* wr = w + j * k;
      double acc = 0.0;
      for (int64_t c = lane; c < k; c += kWarpSize) {
        acc = fma(static_cast<double>(xr[c]), static_cast<double>(wr[c]), acc);
      }
      acc = warp_sum(acc);
      if (lane == 0) y[row * n + j] = static_cast<float>(acc);
    }
  }
}

// The sum of the split-K slices (in slice order: deterministic) and the combination
// y = alpha * main + beta * cross, which the unsplit path does in the promoted GEMM's epilogue.
// partials: cross_slices then main_slices arrays of `count` floats (count a multiple of 4).
__global__ void __launch_bounds__(kThreads)
combine_slices_kernel(const float* __restrict__ partials, int cross_slices, int main_slices,
                      int64_t count, const int* __restrict__ guard, float* __restrict__ y) {
  const float alpha = __int_as_float(guard[kGuardAlpha]);
  const float beta = __int_as_float(guard[kGuardBeta]);
  const float4* p = reinterpret_cast<const float4*>(partials);
  const int64_t count4 = count / 4;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < count4;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    float4 c = p[i], m = p[cross_slices * count4 + i];
    for (int s = 1; s < cross_slices; ++s) {
      const float4 v = p[s * count4 + i];
      c.x += v.x; c.y += v.y; c.z += v.z; c.w += v.w;
    }
    for (int s = 1; s < main_slices; ++s) {
      const float4 v = p[(cross_slices + s) * count4 + i];
      m.x += v.x; m.y += v.y; m.z += v.z; m.w += v.w;
    }
    reinterpret_cast<float4*>(y)[i] = make_float4(fmaf(alpha, m.x, beta * c.x), fmaf(alpha, m.y, beta * c.y),
                                                  fmaf(alpha, m.z, beta * c.z), fmaf(alpha, m.w, beta * c.w));
  }
}

int64_t padded_k(int64_t k) { return ceil_div(k, kKAlign) * kKAlign; }

unsigned grid_rows(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(rows, 1), 65535));
}

// The weight preparation: W's scale (one power of two for the tensor) and its fp16 pair
// [lo | hi], one fold. The range check reads W's row maxima on the host: once per weight.
// An undefined pair means W failed the check (inf/nan, or rows too far below its maximum).
FoldTensors prepare_weight_3xfp16(const at::Tensor& weight) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(at::cuda::getCurrentCUDAStream(), &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    return {};  // not cached during capture (common/fold_cache.h); the exact path runs
  }
  const int64_t n = weight.size(0), k = weight.size(1), kp = padded_k(k);
  const at::Tensor row_max = weight.abs().amax(1);  // nan propagates, inf stays inf
  const float inf = std::numeric_limits<float>::infinity();
  const at::Tensor summary =
      at::stack({row_max.max(), row_max.masked_fill(row_max == 0, inf).min(),
                 at::isfinite(row_max).all().to(at::kFloat)})
          .cpu();
  const float w_max = summary[0].item<float>(), smallest_row = summary[1].item<float>();
  const bool finite = summary[2].item<float>() != 0.0f;
  if (!finite || (w_max > 0.0f && smallest_row < std::ldexp(w_max, -kRowRangeBits))) return {};
  const int shift = scale_shift(w_max);
  at::Tensor pair = at::empty({n, 2 * kp}, weight.options().dtype(at::kHalf));
  split_kernel<<<grid_rows(n), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      weight.data_ptr<float>(), reinterpret_cast<__half*>(pair.data_ptr<at::Half>()), n, k, kp,
      /*lo_first=*/true, shift, nullptr, nullptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  at::Tensor shift_tensor =
      at::full({1}, shift, weight.options().dtype(at::kInt));
  return {pair, shift_tensor};
}

// Split-K slices: enough that the output tiles fill the SMs (model 98: 32 tiles of the promoted
// GEMM, 16 of the cross GEMM: 4 and 8 slices), each a whole number of K steps and at least 8
// of them (the pipeline fills before a slice ends). 1: data-parallel tiles, no split.
int choose_slices(int64_t m, int64_t n, int64_t k, int64_t tile_n) {
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t tiles = ceil_div(m, kTileM) * ceil_div(n, tile_n);
  if (2 * tiles >= sms) return 1;
  const int64_t steps = k / kTileK;
  int best = 1;
  for (int64_t s = 2; s <= sms / tiles && steps / s >= 8; ++s) {
    if (steps % s == 0) best = static_cast<int>(s);
  }
  return best;
}

}  // namespace

bool can_run_3xfp16(int64_t m, int64_t n, int64_t k) {
  if (!sm90_kernels_built()) return false;
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  if (prop->major != 9 || prop->minor != 0) return false;
  const int64_t limit = std::numeric_limits<int32_t>::max();
  return n % 4 == 0 && m <= limit && n <= limit && 2 * padded_k(k) <= limit;
}

bool linear_nt_3xfp16(const at::Tensor& x, const at::Tensor& weight,
                      const at::Tensor& weight_key, bool cache_folds, at::Tensor& y) {
  const int64_t m = x.size(0), n = weight.size(0), k = x.size(1), kp = padded_k(k);
  const FoldTensors prepared = fold_weights(FoldKind::kSplit3xFp16, kp, {weight_key},
                                            cache_folds, [&] { return prepare_weight_3xfp16(weight); });
  if (!prepared[0].defined()) return false;
  const at::Tensor& w_pair = prepared[0];
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();

  at::Tensor guard = at::zeros({kGuardHeader + 3 * m}, x.options().dtype(at::kInt));
  int* g = guard.data_ptr<int>();
  row_range_kernel<<<grid_rows(m), kThreads, 0, stream>>>(x.data_ptr<float>(), m, k, g);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  at::Tensor x_pair = at::empty({m, 2 * kp}, x.options().dtype(at::kHalf));
  split_kernel<<<grid_rows(m), kThreads, 0, stream>>>(
      x.data_ptr<float>(), reinterpret_cast<__half*>(x_pair.data_ptr<at::Half>()), m, k, kp,
      /*lo_first=*/false, 0, g, prepared[1].data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  const at::Half* xp = x_pair.data_ptr<at::Half>();
  const at::Half* wp = w_pair.data_ptr<at::Half>();
  float* out = y.data_ptr<float>();
  const float* alpha = reinterpret_cast<const float*>(g + kGuardAlpha);
  const float* beta = reinterpret_cast<const float*>(g + kGuardBeta);
  const int mi = static_cast<int>(m), ni = static_cast<int>(n);
  const int cross_slices = choose_slices(m, n, 2 * kp, kCrossTileN);
  const int main_slices = choose_slices(m, n, kp, kPromotedTileN);
  try {
    if (cross_slices == 1 && main_slices == 1) {
      // The cross terms land in y; the main GEMM's epilogue reads them back as its source
      // (y = alpha * main + beta * cross, in place: each tile reads its source before writing).
      cross_gemm_sm90({mi, ni, static_cast<int>(2 * kp), 1, 2 * kp, 2 * kp, 0, 0}, xp, wp, out,
                      stream);
      promoted_gemm_sm90({mi, ni, static_cast<int>(kp), 1, 2 * kp, 2 * kp, 0, 0}, xp, wp + kp,
                         out, out, alpha, beta, stream);
    } else {
      at::Tensor partials =
          at::empty({(cross_slices + main_slices) * m * n}, x.options().dtype(at::kFloat));
      float* pc = partials.data_ptr<float>();
      const int64_t cross_k = 2 * kp / cross_slices, main_k = kp / main_slices;
      cross_gemm_sm90({mi, ni, static_cast<int>(cross_k), cross_slices, 2 * kp, 2 * kp, cross_k,
                       m * n}, xp, wp, pc, stream);
      promoted_partial_gemm_sm90({mi, ni, static_cast<int>(main_k), main_slices, 2 * kp, 2 * kp,
                                  main_k, m * n}, xp, wp + kp, pc + cross_slices * m * n, stream);
      const int64_t blocks = std::min<int64_t>(ceil_div(m * n / 4, kThreads), 1024);
      combine_slices_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          pc, cross_slices, main_slices, m * n, g, out);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, e.what(), " (m=", m, ", n=", n, ", k=", k, ")");
  }
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  fixup_rows_kernel<<<dim3(static_cast<unsigned>(sms), 4), kThreads, 0, stream>>>(
      x.data_ptr<float>(), weight.data_ptr<float>(), out, n, k, g);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

}  // namespace fusedops::cuda::gemm
