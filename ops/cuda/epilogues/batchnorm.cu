// Model 39's epilogue (batchnorm.h): moments -> finish -> normalize, each one kernel template
// over how y is read (its dtype ys_t, V columns a thread: one 16-byte load of 4 float32 or 8
// float16/bfloat16 values, or 1 column), how z is formed from it (Z: the accurate routes'
// (y + b) * s, or the eager route's rounded product), and whether the statistics are y's
// (kOfY: one scale value per column, so those of z follow from those of y: mean_z = (mean_y +
// b) s, var_z = s^2 var_y, and the passes read y alone); and the register-resident kernel for
// the common training case.
#include "cuda/epilogues/batchnorm.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <type_traits>

#include "common/numerics.h"
#include "cuda/cuda_helpers.cuh"
#include "cuda/device_facts.h"
#include "math/scale_batchnorm.h"
#include "plan/planner.h"

namespace fusedops::cuda {
namespace {

using Math = epilogues::ScaleBatchNorm;

// The moments pass: a block covers kStatThreadsX threads' columns (V each: one warp-wide,
// coalesced row segment) and kStatRowThreads row lanes; gridDim.y slices the batch.
constexpr int kStatThreadsX = 32;
constexpr int kStatRowThreads = 8;
// The moments pass's blocks an SM (its __launch_bounds__), and slices of the batch at most.
// It takes as many slices as fill the GPU once: a thread then streams many rows after its
// setup (the shift row, the scales), and no second wave leaves a tail; more slices ran slower.
constexpr int kMomentBlocksPerSM = 2;
constexpr int kMaxRowSlices = 64;
constexpr int kThreads = 256;
// The normalize pass: rows a block at least, and rows whose loads a thread issues at once: 4
// for a float32 y, 1 for a half y, whose 8-column thread then held more registers and ran
// slower.
constexpr int64_t kNormalizeRows = 8;
template <typename ys_t>
constexpr int kNormalizeBatch = sizeof(ys_t) == 2 ? 1 : 4;

// The scale broadcasts through strides: scale[i * row_stride + j * col_stride].
struct ScaleView {
  int64_t row_stride;
  int64_t col_stride;
};

template <typename scalar_t>
__device__ __forceinline__ scalar_t scale_at(const scalar_t* scale, ScaleView sv, int64_t i,
                                             int64_t j) {
  return scale[i * sv.row_stride + j * sv.col_stride];
}

// A thread's V columns' scales, for the passes that walk rows: read once when the scale is
// the same on every row (kFixed: row_stride 0, the model's (out_features,) parameter), else per
// row. Reading it per element cost as many cache requests as y itself, V times over.
template <typename scalar_t, int V, bool kFixed>
struct ColumnScales {
  scalar_t fixed[V];
  const scalar_t* scale;
  ScaleView sv;
  int64_t j0;

  __device__ __forceinline__ ColumnScales(const scalar_t* s, ScaleView v, int64_t first)
      : scale(s), sv(v), j0(first) {
#pragma unroll
    for (int e = 0; e < V; ++e) fixed[e] = kFixed ? scale_at(s, v, 0, first + e) : scalar_t(0);
  }
  __device__ __forceinline__ scalar_t at(int64_t i, int e) const {
    return kFixed ? fixed[e] : scale_at(scale, sv, i, j0 + e);
  }
};

// f(scales) with the thread's ColumnScales, each case its own copy of f's row loop: one loop
// for both kept the per-row case's addressing and loads beside the fixed values, and the
// moments pass of a half y ran slower than its loads allow.
template <typename scalar_t, int V, typename F>
__device__ __forceinline__ void with_column_scales(const scalar_t* scale, ScaleView sv,
                                                   int64_t j0, F&& f) {
  if (sv.row_stride == 0) {
    f(ColumnScales<scalar_t, V, true>(scale, sv, j0));
  } else {
    f(ColumnScales<scalar_t, V, false>(scale, sv, j0));
  }
}

// z from y: the accurate routes' z = (y + b) * s in y_t (the accumulation dtype).
struct LinearTimesScale {
  template <typename y_t, typename scalar_t>
  __device__ __forceinline__ static y_t z(y_t y, const scalar_t* bias, scalar_t s, int64_t j) {
    return Math::z(y, bias[j], s);
  }
};

// The eager route's: y is the Linear output as the reference writes it (bias included, in the
// model's dtype), and the product is rounded where the reference's `* scale` writes it.
struct EagerTimesScale {
  template <typename y_t, typename scalar_t>
  __device__ __forceinline__ static y_t z(y_t y, const scalar_t*, scalar_t s, int64_t) {
    return RoundedTo<scalar_t>::store(y * static_cast<y_t>(s));
  }
};

// BatchNorm's training-step counter, bumped in this one function by the one kernel that runs
// after every reader of it (counter null: not this kernel).
__device__ __forceinline__ void count_batch(int64_t* counter) {
  if (counter != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 &&
      threadIdx.y == 0) {
    *counter += 1;
  }
}

__global__ void count_batch_kernel(int64_t* counter) { count_batch(counter); }

// The running statistics of column j from the batch's mean and biased variance of z: the
// unbiased variance, blended by momentum or by the cumulative 1 / (num_batches_tracked + 1)
// (num_batches_tracked read before this step's count: nbt_read null when momentum is given).
template <typename scalar_t>
__device__ __forceinline__ void update_running_stats(scalar_t* running_mean,
                                                     scalar_t* running_var, int64_t j, double mean,
                                                     double var, double count,
                                                     const int64_t* nbt_read, double momentum) {
  const double f = Math::factor(nbt_read != nullptr, momentum, nbt_read ? *nbt_read : 0);
  running_mean[j] = static_cast<scalar_t>(Math::blend(running_mean[j], mean, f));
  running_var[j] = static_cast<scalar_t>(Math::running_var(running_var[j], var, count, f));
}

// Moments: per (slice, column) the sum and sum of squares of (z - shift_j) in double, shift_j
// = z[0, j] (or y[0, j] for kOfY). Shifting by a sample of the column keeps E[d^2] - E[d]^2
// free of cancellation when the mean is large against the spread. Each thread adds its rows'
// sums into its own shared-memory slots (row lane threadIdx.y), summed in order by lane 0.
// Two blocks an SM at least: unbounded, the 8-column float16 kernel's registers left room for one.
template <typename scalar_t, typename ys_t, int V, bool kOfY, typename Z,
          typename y_t = acc_t<scalar_t>>
__global__ void __launch_bounds__(kStatThreadsX* kStatRowThreads, kMomentBlocksPerSM)
column_moments_kernel(const ys_t* __restrict__ y, const scalar_t* __restrict__ bias,
                      const scalar_t* __restrict__ scale, ScaleView sv,
                      double* __restrict__ partial_sum, double* __restrict__ partial_sq,
                      int64_t batch, int64_t n) {
  __shared__ double s_sum[kStatRowThreads][V * kStatThreadsX];
  __shared__ double s_sq[kStatRowThreads][V * kStatThreadsX];
  double* my_sum = &s_sum[threadIdx.y][V * threadIdx.x];
  double* my_sq = &s_sq[threadIdx.y][V * threadIdx.x];
  const int64_t j0 = V * (blockIdx.x * static_cast<int64_t>(kStatThreadsX) + threadIdx.x);
  const int64_t rows_per_slice = ceil_div(batch, gridDim.y);
  const int64_t begin = blockIdx.y * rows_per_slice;
  const int64_t end = begin + rows_per_slice < batch ? begin + rows_per_slice : batch;
#pragma unroll
  for (int e = 0; e < V; ++e) my_sum[e] = my_sq[e] = 0.0;
  if (j0 < n) {  // n is a multiple of V: a thread's columns are all in or all out
    // A float16/bfloat16 y: float sums of kChunk rows (off by about kChunk * 2^-24, far below
    // the model dtype's 2^-8 or 2^-11 rounding of the statistics), added to the double sums;
    // double sums of every element held too many registers and ran slower. Wider y: those.
    using part_t = std::conditional_t<sizeof(ys_t) == 2, float, double>;
    constexpr int kChunk = std::is_same_v<part_t, float> ? 32 : 0;
    part_t shift[V];
    y_t first[V];
    load_vector<V>(y + j0, first);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      shift[e] = kOfY ? static_cast<part_t>(first[e])
                      : static_cast<part_t>(Z::z(first[e], bias, scale_at(scale, sv, 0, j0 + e),
                                                 j0 + e));
    }
    with_column_scales<scalar_t, V>(scale, sv, j0, [&](const auto& scales) {
      part_t part_sum[V] = {}, part_sq[V] = {};
      auto flush = [&] {
#pragma unroll
        for (int e = 0; e < V; ++e) {
          my_sum[e] += part_sum[e];
          my_sq[e] += part_sq[e];
          part_sum[e] = part_sq[e] = 0;
        }
      };
      [[maybe_unused]] int in_chunk = 0;  // unused where kChunk is 0
#pragma unroll 4
      for (int64_t i = begin + threadIdx.y; i < end; i += kStatRowThreads) {
        y_t v[V];
        load_vector<V>(y + i * n + j0, v);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const y_t z = kOfY ? v[e] : Z::z(v[e], bias, scales.at(i, e), j0 + e);
          const part_t d = static_cast<part_t>(z) - shift[e];
          part_sum[e] += d;
          part_sq[e] += d * d;
        }
        if constexpr (kChunk != 0) {
          if (++in_chunk == kChunk) {
            flush();
            in_chunk = 0;
          }
        }
      }
      flush();  // a double part into 0.0: exact
    });
  }
  __syncthreads();
  if (threadIdx.y == 0 && j0 < n) {
#pragma unroll
    for (int e = 0; e < V; ++e) {
      double sum = my_sum[e], sq = my_sq[e];
      for (int r = 1; r < kStatRowThreads; ++r) {
        sum += s_sum[r][V * threadIdx.x + e];
        sq += s_sq[r][V * threadIdx.x + e];
      }
      partial_sum[blockIdx.y * n + j0 + e] = sum;
      partial_sq[blockIdx.y * n + j0 + e] = sq;
    }
  }
}

// The training finish of column j from the batch's mean and biased variance of what the
// moments summed (y when stats_of_y, else z): the normalize pass's center (that mean) and
// multiplier, and the running statistics, which are z's: from y's when the scale is per
// column (see the moments pass).
template <typename scalar_t, typename y_t>
__device__ __forceinline__ void finish_training_column(
    int64_t j, double mean_of_sums, double var_of_sums, bool stats_of_y,
    const scalar_t* __restrict__ bias, const scalar_t* __restrict__ scale,
    int64_t scale_col_stride, const scalar_t* __restrict__ gamma,
    scalar_t* __restrict__ running_mean, scalar_t* __restrict__ running_var,
    const int64_t* nbt_read, double momentum, double eps, double count, y_t& center, y_t& mul) {
  const double s = stats_of_y ? static_cast<double>(scale[j * scale_col_stride]) : 1.0;
  const double mean = stats_of_y ? (mean_of_sums + static_cast<double>(bias[j])) * s : mean_of_sums;
  const double var = stats_of_y ? s * s * var_of_sums : var_of_sums;
  center = static_cast<y_t>(mean_of_sums);
  mul = static_cast<y_t>(s * Math::invstd(var, eps) * static_cast<double>(gamma[j]));
  update_running_stats(running_mean, running_var, j, mean, var, count, nbt_read, momentum);
}

// N column sums over a column's items (the moments pass's slices, the GEMM's tiles) in a
// fixed order, for the finishing kernels' blocks of kStatThreadsX columns x kStatRowThreads
// row lanes: row lane y adds items y, y + kStatRowThreads, ... (f(i): the N values of item i),
// then row lane 0 adds the lanes' sums in lane order; only row lane 0's result is the total.
// `scratch` is the block's shared memory for it; the caller synchronizes before reusing it.
template <int N>
struct ColumnSums {
  double v[N];
};

template <int N, typename F>
__device__ __forceinline__ ColumnSums<N> sum_over_row_lanes(
    ColumnSums<N> (&scratch)[kStatRowThreads][kStatThreadsX], bool column_in_range,
    int64_t items, F f) {
  ColumnSums<N> part{};
  if (column_in_range) {
    for (int64_t i = threadIdx.y; i < items; i += kStatRowThreads) {
      const ColumnSums<N> item = f(i);
#pragma unroll
      for (int k = 0; k < N; ++k) part.v[k] += item.v[k];
    }
  }
  scratch[threadIdx.y][threadIdx.x] = part;
  __syncthreads();
  ColumnSums<N> total = scratch[0][threadIdx.x];
  if (threadIdx.y == 0) {
    for (int r = 1; r < kStatRowThreads; ++r) {
#pragma unroll
      for (int k = 0; k < N; ++k) total.v[k] += scratch[r][threadIdx.x].v[k];
    }
  }
  return total;
}

// Finish, per column: the normalize pass's (center, multiplier), out = (z - center) * mul +
// beta (subtracting before scaling avoids the cancellation of z * mul + (beta - mean * mul)),
// from the batch's mean and biased variance of z (summed over the slices), and the
// running-statistics update. Training only: in eval mode the normalize pass reads the running
// statistics itself (RunningColumns). A block covers kStatThreadsX columns (coalesced rows of
// the partials) with kStatRowThreads lanes over the slices, summed in a fixed order: a thread
// a column walking every slice left a few blocks on the whole GPU, bound by latency.
template <typename scalar_t, typename ys_t, typename Z, typename y_t = acc_t<scalar_t>>
__global__ void __launch_bounds__(kStatThreadsX* kStatRowThreads)
finish_kernel(const ys_t* __restrict__ y, const scalar_t* __restrict__ bias,
              const scalar_t* __restrict__ scale, ScaleView sv,
              const double* __restrict__ partial_sum,
              const double* __restrict__ partial_sq, int slices,
              const scalar_t* __restrict__ gamma,
              scalar_t* __restrict__ running_mean,
              scalar_t* __restrict__ running_var, const int64_t* nbt_read,
              double momentum, double eps, bool stats_of_y,
              y_t* __restrict__ center, y_t* __restrict__ mul, int64_t batch,
              int64_t n) {
  __shared__ ColumnSums<2> s_part[kStatRowThreads][kStatThreadsX];
  const int64_t j = blockIdx.x * static_cast<int64_t>(kStatThreadsX) + threadIdx.x;
  const ColumnSums<2> sums = sum_over_row_lanes<2>(s_part, j < n, slices, [&](int64_t s) {
    return ColumnSums<2>{{partial_sum[s * n + j], partial_sq[s * n + j]}};
  });
  if (threadIdx.y != 0 || j >= n) return;
  const double sum = sums.v[0], sq = sums.v[1];
  const y_t first = static_cast<y_t>(y[j]);
  const double shift = stats_of_y ? static_cast<double>(first)
                                  : static_cast<double>(
                                        Z::z(first, bias, scale_at(scale, sv, 0, j), j));
  const double count = static_cast<double>(batch);
  const double mean_shifted = sum / count;
  const double var_of_sums = fmax(sq / count - mean_shifted * mean_shifted, 0.0);
  finish_training_column(j, shift + mean_shifted, var_of_sums, stats_of_y, bias, scale,
                         sv.col_stride, gamma, running_mean, running_var, nbt_read, momentum, eps,
                         count, center[j], mul[j]);
}

// Finish from tile moments (tile_moments.h; float32 y, stats of y): each tile's column mean
// and sum of squared deviations, merged in double: mean = sum n_t mean_t / batch, and
// M2 = sum (M2_t + n_t (mean_t - mean)^2), the pairwise form that stays exact where the mean is
// large against the spread. A block covers kStatThreadsX columns (coalesced rows of the tile
// arrays) with kStatRowThreads lanes over the tiles, summed in a fixed order.
template <typename scalar_t>
__global__ void __launch_bounds__(kStatThreadsX* kStatRowThreads)
finish_tiles_kernel(const float* __restrict__ tile_mean, const float* __restrict__ tile_m2,
                    int64_t rows, const scalar_t* __restrict__ bias,
                    const scalar_t* __restrict__ scale, ScaleView sv,
                    const scalar_t* __restrict__ gamma, scalar_t* __restrict__ running_mean,
                    scalar_t* __restrict__ running_var, const int64_t* nbt_read, double momentum,
                    double eps, float* __restrict__ center, float* __restrict__ mul, int64_t batch,
                    int64_t n) {
  __shared__ ColumnSums<1> s_part[kStatRowThreads][kStatThreadsX];
  __shared__ double s_mean[kStatThreadsX];
  const int64_t j = blockIdx.x * static_cast<int64_t>(kStatThreadsX) + threadIdx.x;
  const int64_t tiles = ceil_div(batch, rows);
  const auto count_of = [&](int64_t t) {
    return static_cast<double>(t + 1 < tiles ? rows : batch - t * rows);
  };
  const double count = static_cast<double>(batch);
  // Column j's sum of f(t) over the tiles (valid in row lane 0).
  const auto sum_over_tiles = [&](auto f) {
    return sum_over_row_lanes<1>(s_part, j < n, tiles, [&](int64_t t) {
      return ColumnSums<1>{{f(t)}};
    }).v[0];
  };
  const double sum = sum_over_tiles([&](int64_t t) { return count_of(t) * tile_mean[t * n + j]; });
  if (threadIdx.y == 0) s_mean[threadIdx.x] = sum / count;
  __syncthreads();  // also: s_part's first sums are read before it is written again
  const double mean = s_mean[threadIdx.x];
  const double m2 = sum_over_tiles([&](int64_t t) {
    const double d = static_cast<double>(tile_mean[t * n + j]) - mean;
    return static_cast<double>(tile_m2[t * n + j]) + count_of(t) * d * d;
  });
  if (threadIdx.y == 0 && j < n) {
    finish_training_column(j, mean, m2 / count, true, bias, scale, sv.col_stride, gamma,
                           running_mean, running_var, nbt_read, momentum, eps, count, center[j],
                           mul[j]);
  }
}

// Tile moments from y itself (float32, stats of y), a block per (tile, 256 columns), a thread
// per column, two passes over the tile's rows (the second from L1/L2): where the GEMM's
// epilogue did not write them (changed null), or where rows of y changed after it did
// (*changed != 0; otherwise every block returns at once).
__global__ void __launch_bounds__(kThreads)
tile_moments_kernel(const float* __restrict__ y, int64_t batch, int64_t n, int64_t rows,
                    const int* __restrict__ changed, float* __restrict__ tile_mean,
                    float* __restrict__ tile_m2) {
  if (changed != nullptr && *changed == 0) return;
  const int64_t j = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (j >= n) return;
  const int64_t t = blockIdx.y, begin = t * rows, end = begin + rows < batch ? begin + rows : batch;
  double sum = 0.0;
  for (int64_t i = begin; i < end; ++i) sum += y[i * n + j];
  const double mean = sum / static_cast<double>(end - begin);
  double m2 = 0.0;
  for (int64_t i = begin; i < end; ++i) {
    const double d = y[i * n + j] - mean;
    m2 += d * d;
  }
  tile_mean[t * n + j] = static_cast<float>(mean);
  tile_m2[t * n + j] = static_cast<float>(m2);
}

// Eval mode's source of a column's (center, multiplier): the running statistics, read where
// they are used. The normalize pass takes them itself: a finish pass of its own would cost a
// launch and two allocations a call for a few operations a column.
template <typename scalar_t>
struct RunningColumns {
  const scalar_t* mean;
  const scalar_t* var;
  const scalar_t* gamma;
  double eps;
};

// Normalize: out = (z - center_j) * mul_j + beta_j; blockIdx.x tiles the columns (V a
// thread), blockIdx.y strides over rows: no per-element division. center and mul null: eval
// mode, from the running statistics (Math::eval_column, as the skinny kernel's epilogue).
template <typename scalar_t, typename ys_t, int V, bool kOfY, typename Z,
          typename y_t = acc_t<scalar_t>>
__global__ void normalize_kernel(const ys_t* __restrict__ y, const scalar_t* __restrict__ bias,
                                 const scalar_t* __restrict__ scale, ScaleView sv,
                                 const y_t* __restrict__ center, const y_t* __restrict__ mul,
                                 RunningColumns<scalar_t> running,
                                 const scalar_t* __restrict__ beta, scalar_t* __restrict__ out,
                                 int64_t batch, int64_t n, int64_t* counter) {
  count_batch(counter);
  const int64_t j0 = V * (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x);
  if (j0 >= n) return;
  y_t c[V], m[V], be[V];
#pragma unroll
  for (int e = 0; e < V; ++e) {
    if (center != nullptr) {
      c[e] = center[j0 + e];
      m[e] = mul[j0 + e];
    } else {
      Math::eval_column(running.mean[j0 + e], running.var[j0 + e], running.gamma[j0 + e],
                        running.eps, c[e], m[e]);
    }
    be[e] = static_cast<y_t>(beta[j0 + e]);
  }
  with_column_scales<scalar_t, V>(scale, sv, j0, [&](const auto& scales) {
    const auto normalize_row = [&](int64_t i, const Vec<ys_t, V>& raw) {
      y_t v[V], o[V];
      load_vector<V>(raw.v, v);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const y_t z = kOfY ? v[e] : Z::z(v[e], bias, scales.at(i, e), j0 + e);
        o[e] = Math::normalize(z, c[e], m[e], be[e]);
      }
      store_vector<V>(out + i * n + j0, o);
    };
    // kBatch rows' loads issued before any is used: one load in flight a thread left the float32
    // pass latency-bound, below the memory's bandwidth.
    const auto row_piece = [&](int64_t i) {
      return *reinterpret_cast<const Vec<ys_t, V>*>(y + i * n + j0);
    };
    constexpr int kBatch = kNormalizeBatch<ys_t>;
    const int64_t step = gridDim.y;
    int64_t i = blockIdx.y;
    for (; kBatch > 1 && i + (kBatch - 1) * step < batch; i += kBatch * step) {
      Vec<ys_t, V> raw[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) raw[b] = row_piece(i + b * step);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) normalize_row(i + b * step, raw[b]);
    }
    for (; i < batch; i += step) normalize_row(i, row_piece(i));
  });
}

// The one-read path for the common training case (batch <= kResidentRowGroups * 16, one scale
// value per column): a block owns a strip of columns over the whole batch and keeps it in
// registers, so y is read once and out written once (the streaming passes read y twice and
// launch two more kernels). A thread holds one 16-byte piece of each of its rows: V = 4
// columns of a float32 y (the accurate routes: the statistics of y, those of z follow) or 8
// of a float16/bfloat16 y (the eager route: z, the reference's rounded product, formed as the
// piece is loaded and kept in y's dtype, which holds it exactly; the statistics of z).
// kResidentQuads pieces make one 128-byte segment of a row (64-byte segments ran slower):
// 32 columns a block for float32, 64 for half, so a half y of 1024 x 8192 is one wave.
// With the columns in registers the statistics are two-pass (the mean, then the mean squared
// deviation from it): in double for float32 y; for a half z a thread's rows in float (at most
// 16 terms, each exact in float's 24 bits to within 2^-24), then double across threads.
constexpr int kResidentQuads = 8;
constexpr int kResidentRowGroups = 64;  // rows at a time; a thread holds kRows of them
constexpr int kResidentThreads = kResidentQuads * kResidentRowGroups;
static_assert(kResidentRowGroups * 16 == kBatchNormOnePassRows,
              "the planner's rule for the moments route counts this kernel's rows");
constexpr int kResidentWarps = kResidentThreads / kWarpSize;

template <typename ys_t>
struct ResidentPiece {
  static constexpr int V = 16 / static_cast<int>(sizeof(ys_t));  // columns a thread
  static constexpr int kCols = V * kResidentQuads;                 // columns a block
  using part_t = std::conditional_t<sizeof(ys_t) == 4, double, float>;
};

// The block's column totals of v: summed over the lanes of each warp that hold the same
// columns (lanes q, q + 8, ...), lanes 0..7 write their V totals for the warp, and thread
// c < kCols returns column c's sum over the warps, in order.
template <int V, typename part_t>
__device__ __forceinline__ double column_totals(part_t (&v)[V],
                                                double (*s_part)[V * kResidentQuads]) {
#pragma unroll
  for (int e = 0; e < V; ++e) {
#pragma unroll
    for (int offset = kResidentQuads; offset < kWarpSize; offset *= 2) {
      v[e] += __shfl_xor_sync(0xffffffffu, v[e], offset);
    }
  }
  const int lane = threadIdx.x % kWarpSize;
  if (lane < kResidentQuads) {
#pragma unroll
    for (int e = 0; e < V; ++e) s_part[threadIdx.x / kWarpSize][V * lane + e] = v[e];
  }
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x < V * kResidentQuads) {
    for (int w = 0; w < kResidentWarps; ++w) total += s_part[w][threadIdx.x];
  }
  return total;
}

// nbt_read: num_batches_tracked when the factor is cumulative (momentum=None), else null;
// counter: the counter to bump when no block reads it (momentum given), else null and a count
// kernel bumps it after this one, so that no block can read a bumped value.
template <typename scalar_t, typename ys_t, int kRows, bool kOfY, typename Z>
__global__ void __launch_bounds__(kResidentThreads, 1)
batchnorm_resident_kernel(const ys_t* __restrict__ y, const scalar_t* __restrict__ bias,
                          const scalar_t* __restrict__ scale, int64_t scale_col_stride,
                          const scalar_t* __restrict__ gamma, const scalar_t* __restrict__ beta,
                          scalar_t* __restrict__ running_mean, scalar_t* __restrict__ running_var,
                          const int64_t* __restrict__ nbt_read, int64_t* __restrict__ counter,
                          double momentum, double eps, scalar_t* __restrict__ out, int64_t batch,
                          int64_t n) {
  using Piece = ResidentPiece<ys_t>;
  using part_t = typename Piece::part_t;
  constexpr int V = Piece::V, kCols = Piece::kCols;
  __shared__ double s_part[kResidentWarps][kCols];
  __shared__ double s_mean[kCols];
  __shared__ float s_center[kCols];
  __shared__ float s_mul[kCols];
  const int quad = threadIdx.x % kResidentQuads;
  const int group = threadIdx.x / kResidentQuads;
  const int64_t col0 = blockIdx.x * static_cast<int64_t>(kCols);
  const int64_t j0 = col0 + V * quad;
  const bool active = j0 < n;  // n % V == 0: a piece is wholly inside or wholly outside
  const auto row = [&](int r) { return group + static_cast<int64_t>(r) * kResidentRowGroups; };
  // Row r's piece is at offset + r * step in y and out (one base, not a pointer a row).
  const int64_t offset = group * n + j0, step = kResidentRowGroups * n;

  // y's pieces (kOfY) or z's, rounded to ys_t as the reference writes it; zeros past the batch.
  uint4 raw[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    raw[r] = make_uint4(0u, 0u, 0u, 0u);
    if (active && row(r) < batch) {
      raw[r] = __ldcs(reinterpret_cast<const uint4*>(y + offset + r * step));
    }
  }
  if constexpr (!kOfY) {
    static_assert(sizeof(ys_t) == 2, "z is formed from the eager route's float16/bfloat16 y");
    if (active) {
      // A pair of columns a word (Packed16): z rounded to ys_t as the reference stores it, so
      // its packing is exact.
#pragma unroll
      for (int w = 0; w < V / 2; ++w) {
        const int64_t j = j0 + 2 * w;
        const scalar_t s0 = scale[j * scale_col_stride];  // z's scales, in their dtype
        const scalar_t s1 = scale[(j + 1) * scale_col_stride];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          uint32_t& word = reinterpret_cast<uint32_t*>(&raw[r])[w];
          const float2 f = Packed16<ys_t>::unpack(word);
          word = Packed16<ys_t>::pack(Z::z(f.x, bias, s0, j), Z::z(f.y, bias, s1, j + 1));
        }
      }
    }
  }
  const auto value = [&](int r, int e) {
    if constexpr (sizeof(ys_t) == 2) {
      const float2 f = Packed16<ys_t>::unpack(reinterpret_cast<const uint32_t*>(&raw[r])[e / 2]);
      return static_cast<part_t>(e % 2 == 0 ? f.x : f.y);
    } else {
      return static_cast<part_t>(reinterpret_cast<const ys_t*>(&raw[r])[e]);
    }
  };
  part_t acc[V];
#pragma unroll
  for (int e = 0; e < V; ++e) acc[e] = 0;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] += value(r, e);
  }
  const double sum = column_totals<V>(acc, s_part);
  if (threadIdx.x < kCols) s_mean[threadIdx.x] = sum / static_cast<double>(batch);
  __syncthreads();
  part_t mean[V];
#pragma unroll
  for (int e = 0; e < V; ++e) {
    mean[e] = static_cast<part_t>(s_mean[V * quad + e]);
    acc[e] = 0;
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (row(r) < batch) {  // rows past the batch hold zeros, not samples
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const part_t d = value(r, e) - mean[e];
        acc[e] += d * d;
      }
    }
  }
  const double sq = column_totals<V>(acc, s_part);  // s_part last read before the barrier above
  if (threadIdx.x < kCols && col0 + threadIdx.x < n) {
    const int64_t j = col0 + threadIdx.x;
    const double count = static_cast<double>(batch);
    finish_training_column(j, s_mean[threadIdx.x], sq / count, kOfY, bias, scale,
                           scale_col_stride, gamma, running_mean, running_var, nbt_read, momentum,
                           eps, count, s_center[threadIdx.x], s_mul[threadIdx.x]);
  }
  count_batch(counter);
  __syncthreads();
  if (!active) return;
  float c[V], m[V];
  scalar_t b[V];
#pragma unroll
  for (int e = 0; e < V; ++e) {
    c[e] = s_center[V * quad + e];
    m[e] = s_mul[V * quad + e];
    b[e] = beta[j0 + e];
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (row(r) < batch) {
      float o[V];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        o[e] = Math::normalize(static_cast<float>(value(r, e)), c[e], m[e],
                               static_cast<float>(b[e]));
      }
      store_vector<V>(out + offset + r * step, o);
    }
  }
}

// The launches of one call, for one dtype.
template <typename scalar_t>
struct Passes {
  using y_t = acc_t<scalar_t>;
  const at::Tensor& y;
  const scalar_t* bias;
  const scalar_t* scale;
  ScaleView sv;
  const BatchNormArgs& args;
  scalar_t* running_mean;
  scalar_t* running_var;
  at::Tensor& out;
  cudaStream_t stream;
  TileMoments* tiles;  // null: none (batchnorm.h)

  int64_t batch() const { return y.size(0); }
  int64_t n() const { return y.size(1); }
  int64_t* nbt() const { return args.num_batches_tracked.template data_ptr<int64_t>(); }
  bool cumulative() const { return !args.momentum.has_value(); }
  // num_batches_tracked for the kernels that read it (the cumulative factor), else null.
  const int64_t* nbt_read() const { return cumulative() ? nbt() : nullptr; }

  // y read as ys_t: float32 (the statistics of y) or the eager route's half y (those of z).
  template <typename ys_t, int kRows, bool kOfY, typename Z>
  void resident() {
    batchnorm_resident_kernel<scalar_t, ys_t, kRows, kOfY, Z>
        <<<static_cast<unsigned>(ceil_div(n(), ResidentPiece<ys_t>::kCols)), kResidentThreads,
           0, stream>>>(
            y.template data_ptr<ys_t>(), bias, scale, sv.col_stride,
            args.gamma.template data_ptr<scalar_t>(), args.beta.template data_ptr<scalar_t>(),
            running_mean, running_var, nbt_read(), cumulative() ? nullptr : nbt(),
            args.momentum.value_or(0.0), args.eps,
            out.template data_ptr<scalar_t>(), batch(), n());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (cumulative()) {
      count_batch_kernel<<<1, 1, 0, stream>>>(nbt());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  }

  // The resident kernel with the fewest rows a thread that hold the batch; false where the
  // batch is larger than it holds.
  template <typename ys_t, bool kOfY, typename Z>
  bool resident_for_batch() {
    if (batch() <= kResidentRowGroups * 4) return resident<ys_t, 4, kOfY, Z>(), true;
    if (batch() <= kResidentRowGroups * 8) return resident<ys_t, 8, kOfY, Z>(), true;
    if (batch() <= kResidentRowGroups * 16) return resident<ys_t, 16, kOfY, Z>(), true;
    return false;
  }

  // The training statistics from tile moments (float32 y, stats of y): taken from y first where
  // the GEMM did not write them or rows changed after it did (a pass that otherwise returns at
  // once), then merged.
  void from_tiles(float* center, float* mul) {
    const int64_t tiles_m = ceil_div(batch(), tiles->rows);
    TORCH_INTERNAL_ASSERT(
        tiles->mean.numel() == tiles_m * n() && tiles->m2.numel() == tiles_m * n(),
        "fusedops: tile moments of the wrong shape");
    if (!tiles->written || tiles->changed_rows.defined()) {
      tile_moments_kernel<<<dim3(static_cast<unsigned>(ceil_div(n(), kThreads)),
                                 static_cast<unsigned>(tiles_m)),
                            kThreads, 0, stream>>>(
          y.template data_ptr<float>(), batch(), n(), tiles->rows,
          tiles->written ? tiles->changed_rows.template data_ptr<int>() : nullptr,
          tiles->mean.template data_ptr<float>(), tiles->m2.template data_ptr<float>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    finish_tiles_kernel<scalar_t>
        <<<static_cast<unsigned>(ceil_div(n(), kStatThreadsX)),
           dim3(kStatThreadsX, kStatRowThreads), 0, stream>>>(
        tiles->mean.template data_ptr<float>(), tiles->m2.template data_ptr<float>(),
        tiles->rows, bias, scale, sv, args.gamma.template data_ptr<scalar_t>(), running_mean,
        running_var, nbt_read(), args.momentum.value_or(0.0), args.eps, center, mul, batch(), n());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  // y read as ys_t (float32/float64 y of the accurate routes, the model's dtype for eager).
  template <typename ys_t, int V, bool kOfY, typename Z>
  void streaming() {
    const ys_t* yp = y.template data_ptr<ys_t>();
    at::Tensor center, mul;  // training: the finish's (center, multiplier) per column
    if (args.training) {
      const auto options = out.options().dtype(c10::CppTypeToScalarType<y_t>::value);
      center = at::empty({n()}, options);
      mul = at::empty({n()}, options);
      if (tiles != nullptr) {
        if constexpr (kOfY && std::is_same_v<ys_t, float> && std::is_same_v<y_t, float>) {
          from_tiles(center.data_ptr<float>(), mul.data_ptr<float>());
        } else {
          TORCH_INTERNAL_ASSERT(false,
                                "fusedops: tile moments need a float32 y and its statistics");
        }
      } else {
        const int64_t column_blocks = ceil_div(n(), V * kStatThreadsX);
        const int64_t wave = kMomentBlocksPerSM * device_facts(y.get_device()).sm_count;
        const int slices = static_cast<int>(std::clamp<int64_t>(
            std::min<int64_t>(wave / column_blocks, ceil_div(batch(), 64)), 1, kMaxRowSlices));
        const at::Tensor partial = at::empty({2, slices, n()}, options.dtype(at::kDouble));
        double* partial_sum = partial.data_ptr<double>();
        double* partial_sq = partial_sum + slices * n();
        const dim3 grid(static_cast<unsigned>(column_blocks), slices);
        column_moments_kernel<scalar_t, ys_t, V, kOfY, Z>
            <<<grid, dim3(kStatThreadsX, kStatRowThreads), 0, stream>>>(
                yp, bias, scale, sv, partial_sum, partial_sq, batch(), n());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        finish_kernel<scalar_t, ys_t, Z>
            <<<static_cast<unsigned>(ceil_div(n(), kStatThreadsX)),
               dim3(kStatThreadsX, kStatRowThreads), 0, stream>>>(
            yp, bias, scale, sv, partial_sum, partial_sq, slices,
            args.gamma.template data_ptr<scalar_t>(), running_mean, running_var, nbt_read(),
            args.momentum.value_or(0.0), args.eps, kOfY, center.data_ptr<y_t>(),
            mul.data_ptr<y_t>(), batch(), n());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
    }
    const RunningColumns<scalar_t> running{running_mean, running_var,
                                           args.gamma.template data_ptr<scalar_t>(), args.eps};
    // kNormalizeRows rows a block at least: a block reads its columns' parameters once, which
    // at one row a block cost several times the bytes of y.
    const dim3 grid(static_cast<unsigned>(ceil_div(n(), V * kThreads)),
                    static_cast<unsigned>(std::min<int64_t>(ceil_div(batch(), kNormalizeRows),
                                                            1024)));
    normalize_kernel<scalar_t, ys_t, V, kOfY, Z><<<grid, kThreads, 0, stream>>>(
        yp, bias, scale, sv, args.training ? center.data_ptr<y_t>() : nullptr,
        args.training ? mul.data_ptr<y_t>() : nullptr, running,
        args.beta.template data_ptr<scalar_t>(), out.template data_ptr<scalar_t>(), batch(), n(),
        args.training ? nbt() : nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
};

// The one place a variant is chosen (a template, so that each dtype instantiates only its own
// kernels). Every variant computes the same formulas; they differ in how y is read:
//  - eager: y is in the model's dtype (float16/bfloat16) as the reference writes it, and z is
//    the reference's rounded product: in training with one scale value per column and n % 8
//    == 0, the resident kernel where the batch fits in its registers (y read once, z's
//    statistics); else the streaming passes, 8 columns a thread (one 16-byte load) where n
//    allows;
//  - float32 y with n % 4 == 0 (16-byte loads of 4 columns), training with one scale value per
//    column: the statistics of y alone (those of z follow); the resident kernel where the batch
//    fits in its registers, unless the GEMM wrote tile moments (then the streaming passes
//    merge them and read y once too);
//  - float32 y with n % 4 == 0 otherwise (eval, or a scale per element): streaming, on z;
//  - anything else (float64, n not a multiple of 4): streaming, one column a thread.
template <typename scalar_t>
void run_passes(Passes<scalar_t>& passes, bool eager) {
  using y_t = acc_t<scalar_t>;
  const int64_t n = passes.n();
  // Training with one scale value per column: the statistics of y give those of z.
  const bool column_scale = passes.args.training && passes.sv.row_stride == 0;
  // The resident kernel also needs whole 16-byte pieces in every row.
  const bool resident = column_scale && passes.y.is_contiguous() &&
                        is_16_byte_aligned(passes.y.data_ptr());
  if constexpr (!std::is_same_v<scalar_t, y_t>) {
    if (eager) {
      if (n % 8 == 0 && resident &&
          passes.template resident_for_batch<scalar_t, false, EagerTimesScale>()) {
        return;
      }
      if (n % 8 == 0) return passes.template streaming<scalar_t, 8, false, EagerTimesScale>();
      return passes.template streaming<scalar_t, 1, false, EagerTimesScale>();
    }
  }
  if constexpr (std::is_same_v<y_t, float>) {
    if (n % 4 == 0 && resident && passes.tiles == nullptr &&
        passes.template resident_for_batch<float, true, LinearTimesScale>()) {
      return;
    }
    if (n % 4 == 0 && column_scale) {
      return passes.template streaming<float, 4, true, LinearTimesScale>();
    }
    if (n % 4 == 0) return passes.template streaming<float, 4, false, LinearTimesScale>();
  }
  passes.template streaming<y_t, 1, false, LinearTimesScale>();
}

}  // namespace

TileMoments make_tile_moments(int64_t batch, int64_t n, int64_t rows, const at::Tensor& like) {
  const int64_t tiles = ceil_div(batch, rows);
  const auto options = like.options().dtype(at::kFloat);
  return {rows, at::empty({tiles, n}, options), at::empty({tiles, n}, options)};
}

void count_empty_batch(const at::Tensor& num_batches_tracked) {
  count_batch_kernel<<<1, 1, 0, at::cuda::getCurrentCUDAStream()>>>(
      num_batches_tracked.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void scale_batchnorm_pass(const at::Tensor& y, const BatchNormArgs& args, at::Tensor& out,
                          TileMoments* tiles) {
  const int64_t batch = y.size(0), n = y.size(1);
  const auto stream = at::cuda::getCurrentCUDAStream();
  // Eager: y is the model's dtype and holds the bias (batchnorm.h); its z is the reference's.
  const bool eager = args.eager;
  TORCH_INTERNAL_ASSERT(!eager || (y.scalar_type() == out.scalar_type() && !args.bias.defined()),
                        "fusedops: the eager BatchNorm pass takes the eager route's y");
  // y holds the bias (the eager route) with a float32 chain after it (the autocast form).
  const at::Tensor bias = eager || args.bias.defined() ? args.bias : at::zeros({n}, out.options());
  const at::Tensor scale = args.scale.expand({batch, n});
  // The kernels update the running statistics in place through flat pointers; strided buffers
  // (a view into a larger tensor) are updated through a contiguous copy, written back below.
  at::Tensor rm = args.running_mean.is_contiguous() ? args.running_mean
                                                    : args.running_mean.contiguous();
  at::Tensor rv = args.running_var.is_contiguous() ? args.running_var
                                                   : args.running_var.contiguous();
  const ScaleView sv{scale.stride(0), scale.stride(1)};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(),
                                  "gemm_scale_batchnorm", [&] {
    Passes<scalar_t> passes{y, bias.defined() ? bias.data_ptr<scalar_t>() : nullptr,
                            scale.data_ptr<scalar_t>(), sv, args, rm.data_ptr<scalar_t>(),
                            rv.data_ptr<scalar_t>(), out, stream, tiles};
    run_passes(passes, eager);
  });
  if (args.training && !args.running_mean.is_same(rm)) args.running_mean.copy_(rm);
  if (args.training && !args.running_var.is_same(rv)) args.running_var.copy_(rv);
}

}  // namespace fusedops::cuda
