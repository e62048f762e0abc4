// Model 39 on CUDA: y = x W^T (linear_gemm.cu), then z = (y + b) * scale and BatchNorm1d.
// Training mode, float32 y, one scale value per column, batch <= 1024 (the common case): one
// kernel holds whole columns in registers and reads y once (batchnorm_resident_kernel).
// Otherwise training streams: one read of y for the per-column sums (split over row slices so
// the batch dimension fills the GPU), a tiny finish over the slices (mean, var, running-stat
// update), and one read of y + one write of out to normalize. Eval mode is one elementwise pass.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <type_traits>

#include "common/checks.h"
#include "common/numerics.h"
#include "cuda/cuda_helpers.cuh"
#include "cuda/linear_gemm.h"

namespace fusedops {
namespace {

using cuda::acc_t;
using cuda::ceil_div;

// The stats pass: a block covers kStatCols consecutive columns (one warp-wide, coalesced
// row segment) and kStatRowThreads row lanes; gridDim.y slices the batch.
constexpr int kStatCols = 32;
constexpr int kStatRowThreads = 8;
constexpr int kMaxRowSlices = 64;

// z[i, j] = (y[i, j] + b[j]) * scale[i * s0 + j * s1]: the scale broadcasts through strides.
struct ScaleView {
  int64_t row_stride;
  int64_t col_stride;
};

template <typename scalar_t, typename y_t>
__device__ __forceinline__ y_t scaled(const y_t* y, const scalar_t* bias, const scalar_t* scale,
                                      ScaleView sv, int64_t i, int64_t j, int64_t n) {
  return (y[i * n + j] + static_cast<y_t>(bias[j])) *
         static_cast<y_t>(scale[i * sv.row_stride + j * sv.col_stride]);
}

// "eager" numerics on a float16/bfloat16 model, before the BatchNorm passes: y, the Linear
// output as the reference writes it (bias included, common/numerics.h), is overwritten with
// z = stored(y * scale), the product rounded to scalar_t where the reference's `* scale` writes
// it. The passes below then run on z with a zero bias and a unit scale, so every BatchNorm path
// (resident, vec4, generic) sees the reference's rounded z without a second copy of each.
template <typename scalar_t>
__global__ void eager_scale_kernel(float* __restrict__ y, const scalar_t* __restrict__ scale,
                                   ScaleView sv, int64_t batch, int64_t n) {
  const int64_t total = batch * n;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / n, j = idx - (idx / n) * n;
    y[idx] = stored_as<scalar_t>(
        y[idx] * static_cast<float>(scale[i * sv.row_stride + j * sv.col_stride]), true);
  }
}

// Per (slice, column): sum and sum of squares of (z - shift_j) in double, shift_j = z[0, j].
// Shifting by a sample of the column keeps E[d^2] - E[d]^2 free of cancellation when the
// mean is large against the spread.
template <typename scalar_t, typename y_t>
__global__ void column_moments_kernel(const y_t* __restrict__ y, const scalar_t* __restrict__ bias,
                                      const scalar_t* __restrict__ scale, ScaleView sv,
                                      double* __restrict__ partial_sum,
                                      double* __restrict__ partial_sq, int64_t batch, int64_t n) {
  __shared__ double s_sum[kStatRowThreads][kStatCols];
  __shared__ double s_sq[kStatRowThreads][kStatCols];
  const int64_t j = blockIdx.x * static_cast<int64_t>(kStatCols) + threadIdx.x;
  const int64_t rows_per_slice = ceil_div(batch, gridDim.y);
  const int64_t begin = blockIdx.y * rows_per_slice;
  const int64_t end = begin + rows_per_slice < batch ? begin + rows_per_slice : batch;
  double sum = 0.0, sq = 0.0;
  if (j < n) {
    const double shift = static_cast<double>(scaled(y, bias, scale, sv, 0, j, n));
    for (int64_t i = begin + threadIdx.y; i < end; i += kStatRowThreads) {
      const double d = static_cast<double>(scaled(y, bias, scale, sv, i, j, n)) - shift;
      sum += d;
      sq += d * d;
    }
  }
  s_sum[threadIdx.y][threadIdx.x] = sum;
  s_sq[threadIdx.y][threadIdx.x] = sq;
  __syncthreads();
  if (threadIdx.y == 0 && j < n) {
    for (int r = 1; r < kStatRowThreads; ++r) {
      sum += s_sum[r][threadIdx.x];
      sq += s_sq[r][threadIdx.x];
    }
    partial_sum[blockIdx.y * n + j] = sum;
    partial_sq[blockIdx.y * n + j] = sq;
  }
}

// BatchNorm's running-statistics update for column j from the batch's mean and biased
// variance of z: the unbiased variance, blended by momentum or the cumulative factor.
template <typename scalar_t>
__device__ __forceinline__ void update_running_stats(scalar_t* running_mean,
                                                     scalar_t* running_var, int64_t j, double mean,
                                                     double var, double count, double factor) {
  const double unbiased = var * count / (count - 1.0);
  running_mean[j] = static_cast<scalar_t>((1.0 - factor) * static_cast<double>(running_mean[j]) +
                                          factor * mean);
  running_var[j] = static_cast<scalar_t>((1.0 - factor) * static_cast<double>(running_var[j]) +
                                         factor * unbiased);
}

// Per column: mean, biased var -> (center, multiplier) for the normalize pass, and the
// running-stat update
// (unbiased var, momentum or the cumulative 1 / num_batches_tracked factor). num_batches_tracked
// is read here and incremented by the normalize kernel, which runs after this one finishes.
template <typename scalar_t, typename y_t>
__global__ void batch_stats_kernel(const y_t* __restrict__ y, const scalar_t* __restrict__ bias,
                                   const scalar_t* __restrict__ scale, ScaleView sv,
                                   const double* __restrict__ partial_sum,
                                   const double* __restrict__ partial_sq, int slices,
                                   const scalar_t* __restrict__ gamma,
                                   scalar_t* __restrict__ running_mean,
                                   scalar_t* __restrict__ running_var,
                                   const int64_t* __restrict__ num_batches_tracked,
                                   double momentum, bool cumulative, double eps,
                                   bool stats_of_y, y_t* __restrict__ center,
                                   y_t* __restrict__ mul, int64_t batch, int64_t n) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= n) return;
  double sum = 0.0, sq = 0.0;
  for (int s = 0; s < slices; ++s) {
    sum += partial_sum[s * n + j];
    sq += partial_sq[s * n + j];
  }
  const double shift = stats_of_y ? static_cast<double>(y[j])
                                  : static_cast<double>(scaled(y, bias, scale, sv, 0, j, n));
  const double count = static_cast<double>(batch);
  const double mean_shifted = sum / count;
  const double var_of_sums = fmax(sq / count - mean_shifted * mean_shifted, 0.0);
  const double mean_of_sums = shift + mean_shifted;
  // The statistics of z, from those of y when the scale is per column (see the moments pass).
  const double s = stats_of_y ? static_cast<double>(scale[j * sv.col_stride]) : 1.0;
  const double mean = stats_of_y ? (mean_of_sums + static_cast<double>(bias[j])) * s : mean_of_sums;
  const double var = stats_of_y ? s * s * var_of_sums : var_of_sums;
  const double invstd = 1.0 / sqrt(var + eps);
  center[j] = static_cast<y_t>(mean_of_sums);
  mul[j] = static_cast<y_t>(s * invstd * static_cast<double>(gamma[j]));
  const double factor = cumulative ? 1.0 / static_cast<double>(*num_batches_tracked + 1) : momentum;
  update_running_stats(running_mean, running_var, j, mean, var, count, factor);
}

// Eval-mode coefficients from the running statistics.
template <typename scalar_t, typename y_t>
__global__ void running_stats_coefficients_kernel(const scalar_t* __restrict__ gamma,
                                                  const scalar_t* __restrict__ running_mean,
                                                  const scalar_t* __restrict__ running_var,
                                                  double eps, y_t* __restrict__ center,
                                                  y_t* __restrict__ mul, int64_t n) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= n) return;
  const double invstd = 1.0 / sqrt(static_cast<double>(running_var[j]) + eps);
  center[j] = static_cast<y_t>(running_mean[j]);
  mul[j] = static_cast<y_t>(invstd * static_cast<double>(gamma[j]));
}

// out = (z - center_j) * mul_j + beta_j over the whole (batch, n) output. Subtracting the
// mean before scaling avoids the cancellation of z * mul + (beta - mean * mul).
template <typename scalar_t, typename y_t>
__global__ void normalize_kernel(const y_t* __restrict__ y, const scalar_t* __restrict__ bias,
                                 const scalar_t* __restrict__ scale, ScaleView sv,
                                 const y_t* __restrict__ center, const y_t* __restrict__ mul,
                                 const scalar_t* __restrict__ beta, scalar_t* __restrict__ out, int64_t batch, int64_t n,
                                 int64_t* __restrict__ num_batches_tracked) {
  if (num_batches_tracked != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    *num_batches_tracked += 1;
  }
  // blockIdx.x tiles the columns, blockIdx.y strides over rows: no per-element division.
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (j >= n) return;
  const y_t c = center[j], m = mul[j], b = static_cast<y_t>(beta[j]);
  for (int64_t i = blockIdx.y; i < batch; i += gridDim.y) {
    out[i * n + j] = static_cast<scalar_t>((scaled(y, bias, scale, sv, i, j, n) - c) * m + b);
  }
}

// 4-column versions of the two passes over y for float32 y with n % 4 == 0 (the common
// case): 16-byte loads and stores, four columns per thread.
constexpr int kQuadsPerBlock = 32;

template <typename scalar_t>
__device__ __forceinline__ void store4(scalar_t* p, const float (&v)[4]) {
  if constexpr (std::is_same_v<scalar_t, float>) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) p[e] = static_cast<scalar_t>(v[e]);
  }
}

// kOfY: the scale is one value per column, so the statistics of z = (y + b) * s follow from
// those of y (mean_z = (mean_y + b) s, var_z = s^2 var_y) and this pass reads y alone.
template <typename scalar_t, bool kOfY>
__global__ void column_moments_vec4_kernel(const float* __restrict__ y,
                                           const scalar_t* __restrict__ bias,
                                           const scalar_t* __restrict__ scale, ScaleView sv,
                                           double* __restrict__ partial_sum,
                                           double* __restrict__ partial_sq, int64_t batch,
                                           int64_t n) {
  __shared__ double s_sum[kStatRowThreads][4 * kQuadsPerBlock];
  __shared__ double s_sq[kStatRowThreads][4 * kQuadsPerBlock];
  const int64_t j0 = 4 * (blockIdx.x * static_cast<int64_t>(kQuadsPerBlock) + threadIdx.x);
  const int64_t rows_per_slice = ceil_div(batch, gridDim.y);
  const int64_t begin = blockIdx.y * rows_per_slice;
  const int64_t end = begin + rows_per_slice < batch ? begin + rows_per_slice : batch;
  double sum[4] = {0, 0, 0, 0}, sq[4] = {0, 0, 0, 0};
  if (j0 < n) {
    float b[4];
    double shift[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      b[e] = static_cast<float>(bias[j0 + e]);
      shift[e] = kOfY ? static_cast<double>(y[j0 + e])
                      : static_cast<double>(scaled(y, bias, scale, sv, 0, j0 + e, n));
    }
#pragma unroll 4
    for (int64_t i = begin + threadIdx.y; i < end; i += kStatRowThreads) {
      const float4 t = *reinterpret_cast<const float4*>(y + i * n + j0);
      const float yv[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float z = kOfY ? yv[e]
                             : (yv[e] + b[e]) * static_cast<float>(scale[i * sv.row_stride + (j0 + e) * sv.col_stride]);
        const double d = static_cast<double>(z) - shift[e];
        sum[e] += d;
        sq[e] += d * d;
      }
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    s_sum[threadIdx.y][4 * threadIdx.x + e] = sum[e];
    s_sq[threadIdx.y][4 * threadIdx.x + e] = sq[e];
  }
  __syncthreads();
  if (threadIdx.y == 0 && j0 < n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      for (int r = 1; r < kStatRowThreads; ++r) {
        sum[e] += s_sum[r][4 * threadIdx.x + e];
        sq[e] += s_sq[r][4 * threadIdx.x + e];
      }
      partial_sum[blockIdx.y * n + j0 + e] = sum[e];
      partial_sq[blockIdx.y * n + j0 + e] = sq[e];
    }
  }
}

// kOfY: center is mean_y and mul folds the per-column scale in: out = (y - center) mul + beta.
template <typename scalar_t, bool kOfY>
__global__ void normalize_vec4_kernel(const float* __restrict__ y,
                                      const scalar_t* __restrict__ bias,
                                      const scalar_t* __restrict__ scale, ScaleView sv,
                                      const float* __restrict__ center,
                                      const float* __restrict__ mul,
                                      const scalar_t* __restrict__ beta,
                                      scalar_t* __restrict__ out, int64_t batch, int64_t n,
                                      int64_t* __restrict__ num_batches_tracked) {
  if (num_batches_tracked != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    *num_batches_tracked += 1;
  }
  const int64_t j0 = 4 * (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x);
  if (j0 >= n) return;
  float b[4], c[4], m[4], be[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    b[e] = static_cast<float>(bias[j0 + e]);
    c[e] = center[j0 + e];
    m[e] = mul[j0 + e];
    be[e] = static_cast<float>(beta[j0 + e]);
  }
  for (int64_t i = blockIdx.y; i < batch; i += gridDim.y) {
    const float4 t = *reinterpret_cast<const float4*>(y + i * n + j0);
    const float yv[4] = {t.x, t.y, t.z, t.w};
    float o[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float z = kOfY ? yv[e]
                           : (yv[e] + b[e]) * static_cast<float>(scale[i * sv.row_stride + (j0 + e) * sv.col_stride]);
      o[e] = (z - c[e]) * m[e] + be[e];
    }
    store4(out + i * n + j0, o);
  }
}

__global__ void increment_kernel(int64_t* counter) { *counter += 1; }

// The one-read path for the common training case (float32 y, one scale value per column,
// batch <= kResidentRowGroups * 16): a block owns kResidentCols columns over the whole batch
// and keeps them in registers, so y is read once and out written once (64 MB at 1024x8192,
// against 96 MB and two extra launches for moments + stats + normalize). With the columns in
// registers the statistics are exact two-pass (the mean, then the mean squared deviation from
// it, both in double) rather than the shifted one-pass sums of the streaming path.
// 32 columns (one 128-byte segment of each row) a block: with 16 (64-byte segments) the kernel
// ran at half the bandwidth, 57 us against 26 us at 1024x8192 on the H200 (docs/PERFORMANCE.md).
constexpr int kResidentQuads = 8;
constexpr int kResidentCols = 4 * kResidentQuads;
constexpr int kResidentRowGroups = 64;  // rows at a time; a thread holds kRows of them
constexpr int kResidentThreads = kResidentQuads * kResidentRowGroups;
constexpr int kResidentWarps = kResidentThreads / cuda::kWarpSize;

// Sum of v over the lanes of this warp that hold the same column quad (lanes q, q + 8, ...);
// lanes 0..7 then write their quad's 4 column totals for this warp.
__device__ __forceinline__ void reduce_quads_to_smem(double (&v)[4],
                                                     double (*s_part)[kResidentCols]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
#pragma unroll
    for (int offset = kResidentQuads; offset < cuda::kWarpSize; offset *= 2) {
      v[e] += __shfl_xor_sync(0xffffffffu, v[e], offset);
    }
  }
  const int lane = threadIdx.x % cuda::kWarpSize;
  if (lane < kResidentQuads) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s_part[threadIdx.x / cuda::kWarpSize][4 * lane + e] = v[e];
  }
}

// nbt_read: num_batches_tracked when the factor is cumulative (momentum=None), else null;
// nbt_increment: the counter to bump when no block reads it (momentum given), else null and
// the caller bumps it after this kernel, so that no block can read a bumped value.
template <typename scalar_t, int kRows>
__global__ void __launch_bounds__(kResidentThreads, 1)
batchnorm_resident_kernel(const float* __restrict__ y, const scalar_t* __restrict__ bias,
                          const scalar_t* __restrict__ scale, int64_t scale_col_stride,
                          const scalar_t* __restrict__ gamma, const scalar_t* __restrict__ beta,
                          scalar_t* __restrict__ running_mean, scalar_t* __restrict__ running_var,
                          const int64_t* __restrict__ nbt_read, int64_t* __restrict__ nbt_increment,
                          double momentum, double eps, scalar_t* __restrict__ out, int64_t batch,
                          int64_t n) {
  __shared__ double s_part[kResidentWarps][kResidentCols];
  __shared__ double s_mean[kResidentCols];
  __shared__ float s_center[kResidentCols];
  __shared__ float s_mul[kResidentCols];
  const int quad = threadIdx.x % kResidentQuads;
  const int group = threadIdx.x / kResidentQuads;
  const int64_t col0 = blockIdx.x * static_cast<int64_t>(kResidentCols);
  const int64_t j0 = col0 + 4 * quad;
  const bool active = j0 < n;  // n % 4 == 0: a quad is wholly inside or wholly outside

  float4 v[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = group + static_cast<int64_t>(r) * kResidentRowGroups;
    v[r] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (active && i < batch) v[r] = __ldcs(reinterpret_cast<const float4*>(y + i * n + j0));
  }
  double acc[4] = {0, 0, 0, 0};
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    acc[0] += v[r].x;
    acc[1] += v[r].y;
    acc[2] += v[r].z;
    acc[3] += v[r].w;
  }
  reduce_quads_to_smem(acc, s_part);
  __syncthreads();
  if (threadIdx.x < kResidentCols) {
    double total = 0.0;
    for (int w = 0; w < kResidentWarps; ++w) total += s_part[w][threadIdx.x];
    s_mean[threadIdx.x] = total / static_cast<double>(batch);
  }
  __syncthreads();
  double mean[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    mean[e] = s_mean[4 * quad + e];
    acc[e] = 0.0;
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = group + static_cast<int64_t>(r) * kResidentRowGroups;
    if (i < batch) {  // rows past the batch hold zeros, not samples
      const double d[4] = {v[r].x - mean[0], v[r].y - mean[1], v[r].z - mean[2],
                           v[r].w - mean[3]};
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] += d[e] * d[e];
    }
  }
  reduce_quads_to_smem(acc, s_part);  // s_part was last read before the barrier above
  __syncthreads();
  if (threadIdx.x < kResidentCols && col0 + threadIdx.x < n) {
    const int64_t j = col0 + threadIdx.x;
    double sq = 0.0;
    for (int w = 0; w < kResidentWarps; ++w) sq += s_part[w][threadIdx.x];
    const double count = static_cast<double>(batch);
    const double mean_y = s_mean[threadIdx.x];
    const double var_y = sq / count;
    // The statistics of z = (y + b) * s follow from those of y.
    const double s = static_cast<double>(scale[j * scale_col_stride]);
    const double mean = (mean_y + static_cast<double>(bias[j])) * s;
    const double var = s * s * var_y;
    const double invstd = 1.0 / sqrt(var + eps);
    s_center[threadIdx.x] = static_cast<float>(mean_y);
    s_mul[threadIdx.x] = static_cast<float>(s * invstd * static_cast<double>(gamma[j]));
    const double factor =
        nbt_read != nullptr ? 1.0 / static_cast<double>(*nbt_read + 1) : momentum;
    update_running_stats(running_mean, running_var, j, mean, var, count, factor);
  }
  if (nbt_increment != nullptr && blockIdx.x == 0 && threadIdx.x == 0) *nbt_increment += 1;
  __syncthreads();
  if (!active) return;
  float c[4], m[4], b[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    c[e] = s_center[4 * quad + e];
    m[e] = s_mul[4 * quad + e];
    b[e] = static_cast<float>(beta[j0 + e]);
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t i = group + static_cast<int64_t>(r) * kResidentRowGroups;
    if (i < batch) {
      const float o[4] = {(v[r].x - c[0]) * m[0] + b[0], (v[r].y - c[1]) * m[1] + b[1],
                          (v[r].z - c[2]) * m[2] + b[2], (v[r].w - c[3]) * m[3] + b[3]};
      store4(out + i * n + j0, o);
    }
  }
}

template <typename scalar_t, int kRows>
void launch_batchnorm_resident(const at::Tensor& y, const at::Tensor& bias,
                               const scalar_t* scale, int64_t scale_col_stride,
                               const at::Tensor& gamma, const at::Tensor& beta,
                               at::Tensor& running_mean, at::Tensor& running_var,
                               at::Tensor& num_batches_tracked, std::optional<double> momentum,
                               double eps, at::Tensor& out, cudaStream_t stream) {
  const int64_t batch = y.size(0), n = y.size(1);
  int64_t* nbt = num_batches_tracked.data_ptr<int64_t>();
  const bool cumulative = !momentum.has_value();
  batchnorm_resident_kernel<scalar_t, kRows>
      <<<static_cast<unsigned>(ceil_div(n, kResidentCols)), kResidentThreads, 0, stream>>>(
          y.data_ptr<float>(), bias.data_ptr<scalar_t>(), scale, scale_col_stride,
          gamma.data_ptr<scalar_t>(), beta.data_ptr<scalar_t>(), running_mean.data_ptr<scalar_t>(),
          running_var.data_ptr<scalar_t>(), cumulative ? nbt : nullptr,
          cumulative ? nullptr : nbt, momentum.value_or(0.0), eps, out.data_ptr<scalar_t>(),
          batch, n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (cumulative) {
    increment_kernel<<<1, 1, 0, stream>>>(nbt);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

at::Tensor gemm_scale_batchnorm_cuda(const at::Tensor& x, const at::Tensor& weight,
                                     const at::Tensor& bias, const at::Tensor& scale,
                                     const at::Tensor& bn_weight, const at::Tensor& bn_bias,
                                     at::Tensor& running_mean, at::Tensor& running_var,
                                     at::Tensor& num_batches_tracked, bool training,
                                     std::optional<double> momentum, double eps, bool cache_folds,
                                     c10::string_view numerics) {
  const Numerics numerics_mode = parse_numerics("gemm_scale_batchnorm", numerics);
  checks::gemm_scale_batchnorm(x, weight, bias, scale, bn_weight, bn_bias, running_mean,
                               running_var, num_batches_tracked, training);
  const c10::cuda::CUDAGuard device_guard(x.device());
  auto stream = at::cuda::getCurrentCUDAStream();
  const int64_t batch = x.size(0), n = weight.size(0);
  at::Tensor out = at::empty({batch, n}, x.options());
  if (batch == 0) {
    // BatchNorm on an empty batch still counts the step and leaves the statistics alone.
    if (training) {
      increment_kernel<<<1, 1, 0, stream>>>(num_batches_tracked.data_ptr<int64_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return out;
  }
  const bool eager = rounds_intermediates(
      numerics_mode, x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16);
  const at::Tensor y = eager ? linear_as_the_reference_writes_it(x, weight, bias)
                             : cuda::linear_nt(x, weight, cache_folds);
  at::Tensor bc = bias.contiguous();
  const at::Tensor gamma = bn_weight.contiguous();
  const at::Tensor beta = bn_bias.contiguous();
  at::Tensor scale_full = scale.expand({batch, n});
  ScaleView sv{scale_full.stride(0), scale_full.stride(1)};
  if (eager) {
    AT_DISPATCH_REDUCED_FLOATING_TYPES(x.scalar_type(), "eager_scale", [&] {
      const int threads = 256;
      const int64_t blocks = std::min<int64_t>(ceil_div(batch * n, threads), 65535LL * 8);
      eager_scale_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
          y.data_ptr<float>(), scale_full.data_ptr<scalar_t>(), sv, batch, n);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    bc = at::zeros({n}, bias.options());
    scale_full = at::ones({1}, scale.options()).expand({batch, n});
    sv = ScaleView{scale_full.stride(0), scale_full.stride(1)};
  }
  // The kernels update the running statistics in place through flat pointers; strided buffers
  // (a view into a larger tensor) are updated through a contiguous copy, written back below.
  at::Tensor rm = running_mean.is_contiguous() ? running_mean : running_mean.contiguous();
  at::Tensor rv = running_var.is_contiguous() ? running_var : running_var.contiguous();
  at::Tensor center = at::empty({n}, y.options());
  at::Tensor mul = at::empty({n}, y.options());
  const int threads = 256;
  const dim3 normalize_grid(static_cast<unsigned>(ceil_div(n, threads)),
                            static_cast<unsigned>(std::min<int64_t>(batch, 1024)));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "gemm_scale_batchnorm", [&] {
    using y_t = acc_t<scalar_t>;
    const bool vec4 = std::is_same_v<y_t, float> && n % 4 == 0;
    // One scale value per column ((), (1,), (out,), (1, out)): training statistics of y alone.
    const bool stats_of_y = vec4 && training && sv.row_stride == 0;
    const scalar_t* scale_ptr = scale_full.data_ptr<scalar_t>();
    if constexpr (std::is_same_v<y_t, float>) {
      if (stats_of_y && batch <= kResidentRowGroups * 16) {
        auto launch = batch <= kResidentRowGroups * 4   ? launch_batchnorm_resident<scalar_t, 4>
                      : batch <= kResidentRowGroups * 8 ? launch_batchnorm_resident<scalar_t, 8>
                                                        : launch_batchnorm_resident<scalar_t, 16>;
        launch(y, bc, scale_ptr, sv.col_stride, gamma, beta, rm, rv, num_batches_tracked,
               momentum, eps, out, stream);
        return;
      }
    }
    if (training) {
      const int slices = static_cast<int>(std::min<int64_t>(kMaxRowSlices, ceil_div(batch, 64)));
      at::Tensor partial = at::empty({2, slices, n}, y.options().dtype(at::kDouble));
      double* partial_sum = partial.data_ptr<double>();
      double* partial_sq = partial_sum + slices * n;
      if (vec4) {
        dim3 grid(ceil_div(n, 4 * kQuadsPerBlock), slices);
        dim3 block(kQuadsPerBlock, kStatRowThreads);
        auto moments = stats_of_y ? column_moments_vec4_kernel<scalar_t, true>
                                  : column_moments_vec4_kernel<scalar_t, false>;
        moments<<<grid, block, 0, stream>>>(y.data_ptr<float>(), bc.data_ptr<scalar_t>(),
                                            scale_ptr, sv, partial_sum, partial_sq, batch, n);
      } else {
        dim3 grid(ceil_div(n, kStatCols), slices);
        dim3 block(kStatCols, kStatRowThreads);
        column_moments_kernel<scalar_t, y_t><<<grid, block, 0, stream>>>(
            y.data_ptr<y_t>(), bc.data_ptr<scalar_t>(), scale_ptr, sv, partial_sum, partial_sq,
            batch, n);
      }
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      batch_stats_kernel<scalar_t, y_t><<<ceil_div(n, threads), threads, 0, stream>>>(
          y.data_ptr<y_t>(), bc.data_ptr<scalar_t>(), scale_ptr, sv, partial_sum, partial_sq,
          slices, gamma.data_ptr<scalar_t>(), rm.data_ptr<scalar_t>(), rv.data_ptr<scalar_t>(),
          num_batches_tracked.data_ptr<int64_t>(), momentum.value_or(0.0), !momentum.has_value(),
          eps, stats_of_y, center.data_ptr<y_t>(), mul.data_ptr<y_t>(), batch, n);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    } else {
      running_stats_coefficients_kernel<scalar_t, y_t><<<ceil_div(n, threads), threads, 0, stream>>>(
          gamma.data_ptr<scalar_t>(), rm.data_ptr<scalar_t>(), rv.data_ptr<scalar_t>(), eps,
          center.data_ptr<y_t>(), mul.data_ptr<y_t>(), n);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    int64_t* counter = training ? num_batches_tracked.data_ptr<int64_t>() : nullptr;
    if (vec4) {
      const dim3 grid(static_cast<unsigned>(ceil_div(n, 4 * threads)),
                      static_cast<unsigned>(std::min<int64_t>(batch, 1024)));
      auto normalize = stats_of_y ? normalize_vec4_kernel<scalar_t, true>
                                  : normalize_vec4_kernel<scalar_t, false>;
      normalize<<<grid, threads, 0, stream>>>(
          y.data_ptr<float>(), bc.data_ptr<scalar_t>(), scale_ptr, sv, center.data_ptr<float>(),
          mul.data_ptr<float>(), beta.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), batch, n,
          counter);
    } else {
      normalize_kernel<scalar_t, y_t><<<normalize_grid, threads, 0, stream>>>(
          y.data_ptr<y_t>(), bc.data_ptr<scalar_t>(), scale_ptr, sv, center.data_ptr<y_t>(),
          mul.data_ptr<y_t>(), beta.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), batch, n,
          counter);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  if (training && !running_mean.is_same(rm)) running_mean.copy_(rm);
  if (training && !running_var.is_same(rv)) running_var.copy_(rv);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("gemm_scale_batchnorm", &gemm_scale_batchnorm_cuda);
}

}  // namespace fusedops
