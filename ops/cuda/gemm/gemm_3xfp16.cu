// The 3xFP16 engine's composition: weight preparation (a cached fold), activation split with
// its range guard, the two GEMMs (sm90_kernels.h) or their split-K slices and their sum
// (epilogue_3xfp16.cuh), and the exact fixup of guarded rows.
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
#include "cuda/gemm/epilogue_3xfp16.cuh"
#include "cuda/gemm/heuristics.h"
#include "cuda/gemm/sm90_kernels.h"

namespace fusedops::cuda::gemm {
namespace {

// Scaled values lie in [2^14, 2^15) at their row's (x) or tensor's (W) maximum: the largest
// fp16 exponent range that keeps hi (up to 2^15 after rounding) finite; the products are summed
// in float32 by the tensor cores.
constexpr int kTopExponent = 15;
// lo holds the residual v - hi, at most 2^-11 |v| (half an fp16 ulp), scaled up by 2^11 so
// that it stays a normal fp16 number (11 more bits) for every value hi carries as a normal.
constexpr float kLoScale = 2048.0f;
constexpr float kCrossWeight = 1.0f / 2048.0f;
// A row of W whose largest magnitude is more than 2^26 below W's maximum is scaled below 2^-11
// (W has one scale): its values would sit in fp16's subnormal range and lose bits, so such a W
// takes the exact path altogether. (x has a scale per row: no such rule.)
constexpr int kRowRangeBits = 26;
// A row of x whose nonzero magnitudes span more than 2^30 is recomputed exactly: the split
// carries about 23 bits of each value (fp32 has 24), as good as float32 for ordinary rows, but
// a row of a few huge values that cancel (values 2^-40 .. 2^40, the result far below its terms)
// then misses the 1e-4 contract, where PyTorch's float32 does not. torch.rand rows span at most
// 2^24 (its 24-bit grid); a randn row of 8192 spans 2^30 about once in 40 tensors of 1024 rows.
constexpr int kRowSpreadBits = 30;
// K is padded to a whole number of 64-wide K steps (zeros, padded_k in heuristics.h): TMA
// needs 16-byte row strides, the main-term view starts kp values into each row of the weight's
// pair, and split-K slices are whole K steps.

constexpr int kThreads = 256;

// The weight's verdict and scale on the device ((2,) int32, its fold's second tensor): W's
// power-of-two shift, and 1 where the split carries W at float32 accuracy, 0 where the check
// refused it.
struct WeightState {
  static constexpr int kShift = 0, kCarried = 1, kSize = 2;
};

// The power of two that puts `max` into [2^14, 2^15).
__host__ __device__ inline int scale_shift(float max) {
  int e = 0;
  frexpf(max, &e);  // max = f 2^e, f in [0.5, 1); 0 gives e = 0
  return kTopExponent - e;
}

// Block-wide max of v; every thread gets it. scratch: kThreads / kWarpSize floats.
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

struct Half4 {
  __half2 a, b;
};

// Splits four values into hi and scaled lo parts.
__device__ __forceinline__ void split4(float4 q, int shift, Half4& hi, Half4& lo) {
  const float v[4] = {q.x, q.y, q.z, q.w};
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

// What a split row holds: the pair, kp halves apart, [hi | lo] (x) or [lo | hi] (W; the cross
// GEMM pairs x_hi with W_lo and x_lo with W_hi over 2K, the main term reads the hi halves); or
// x's hi part alone (kp halves), all the one- and two-product forms read: a third less traffic
// than the pair (read 4 bytes a value, write 2 instead of 4).
enum class Split { kPairHiFirst, kPairLoFirst, kHiOnly };

// The row length, in halves, of a split row.
__host__ __device__ constexpr int64_t split_width(Split split, int64_t kp) {
  return split == Split::kHiOnly ? kp : 2 * kp;
}

// Splits four values and writes them at col of a split row.
template <Split kSplit>
__device__ __forceinline__ void store_split(__half* d, int64_t col, int64_t kp, float4 q,
                                            int shift) {
  Half4 hi, lo;
  split4(q, shift, hi, lo);
  if constexpr (kSplit == Split::kHiOnly) {
    *reinterpret_cast<Half4*>(d + col) = hi;
  } else {
    constexpr bool lo_first = kSplit == Split::kPairLoFirst;
    *reinterpret_cast<Half4*>(d + col) = lo_first ? lo : hi;
    *reinterpret_cast<Half4*>(d + kp + col) = lo_first ? hi : lo;
  }
}

// One row of src (k floats) -> its split row. zero: write zeros (a guarded row).
template <Split kSplit>
__device__ __forceinline__ void split_row(const float* s, __half* d, int64_t k, int64_t kp,
                                          int shift, bool zero, bool vector) {
  for (int64_t col = 4 * static_cast<int64_t>(threadIdx.x); col < kp; col += 4 * kThreads) {
    store_split<kSplit>(d, col, kp,
                        zero ? make_float4(0.f, 0.f, 0.f, 0.f) : load4(s, col, k, vector), shift);
  }
}

// The weight's split: one scale for the whole tensor (state: WeightState), block per row. A
// weight the check refused is written as zeros: the GEMMs then add nothing, finite, to the
// rows the guard recomputes.
__global__ void __launch_bounds__(kThreads)
split_weight_kernel(const float* __restrict__ src, __half* __restrict__ dst, int64_t rows,
                    int64_t k, int64_t kp, const int* __restrict__ state) {
  const int shift = state[WeightState::kShift];
  const bool refused = state[WeightState::kCarried] == 0;
  const bool vector = k % 4 == 0 && is_16_byte_aligned(src);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    split_row<Split::kPairLoFirst>(src + row * k, dst + row * 2 * kp, k, kp, shift, refused,
                                   vector);
  }
}

// A row's range: its largest finite magnitude, whether it holds inf/nan, its smallest nonzero
// magnitude.
struct RowRange {
  float max = 0.0f, bad = 0.0f, least = INFINITY;
  __device__ __forceinline__ void take(float v) {
    const float a = fabsf(v);
    if (isfinite(a)) max = fmaxf(max, a); else bad = 1.0f;
    if (a > 0.0f) least = fminf(least, a);
  }
  __device__ __forceinline__ void take(float4 q) { take(q.x); take(q.y); take(q.z); take(q.w); }
};

// A block reads one row's range: 16-byte loads where the row allows them (the pass is bound by
// reading the row), else one value a thread.
__device__ __forceinline__ void take_row(RowRange& range, const float* src, int64_t k,
                                         bool vector) {
  if (vector) {
    for (int64_t c = 4 * static_cast<int64_t>(threadIdx.x); c < k; c += 4 * kThreads) {
      range.take(*reinterpret_cast<const float4*>(src + c));
    }
  } else {
    for (int64_t c = threadIdx.x; c < k; c += kThreads) range.take(src[c]);
  }
}

// W's range, block per row: each row's largest magnitude, or inf where the row holds inf/nan.
__global__ void __launch_bounds__(kThreads)
weight_rows_kernel(const float* __restrict__ w, float* __restrict__ row_max, int64_t rows,
                   int64_t k) {
  __shared__ float scratch[kThreads / kWarpSize];
  const bool vector = k % 4 == 0 && is_16_byte_aligned(w);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    RowRange range;
    take_row(range, w + row * k, k, vector);
    const float m = block_max(range.max, scratch);
    const float bad = block_max(range.bad, scratch);
    if (threadIdx.x == 0) row_max[row] = bad != 0.0f ? INFINITY : m;
  }
}

// W given transposed (gemm_nt's b = W^T as a view: W's row r is column r of wt, a (k, rows)
// row-major matrix) is read as it lies, without a transposed copy (a backward pass's dX = dY W
// would copy all of W first). Its range: a thread per row of W reads down wt's column over a
// chunk of k (coalesced across the warp); the chunks meet by atomicMax on the bits (non-negative
// floats order as their bits; inf/nan count as +inf, as weight_rows_kernel writes them).
// row_max: zeros on entry.
constexpr int64_t kColumnChunk = 256;
__global__ void __launch_bounds__(kThreads)
weight_cols_kernel(const float* __restrict__ wt, float* __restrict__ row_max, int64_t rows,
                   int64_t k) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (row >= rows) return;
  const int64_t c0 = blockIdx.y * kColumnChunk, c1 = std::min(k, c0 + kColumnChunk);
  RowRange range;
  for (int64_t c = c0; c < c1; ++c) range.take(wt[c * rows + row]);
  atomicMax(reinterpret_cast<int*>(row_max + row),
            __float_as_int(range.bad != 0.0f ? INFINITY : range.max));
}

// Its split: a block moves one K step (kTileK values, heuristics.h) of kSplitTileRows rows of W
// through shared memory (read along W's rows in wt, coalesced) and writes each row's pair as
// split_weight_kernel does, the same bits; columns k .. kp (whole K steps) as zeros.
constexpr int kSplitTileRows = 32;
__global__ void __launch_bounds__(kThreads)
split_weight_t_kernel(const float* __restrict__ wt, __half* __restrict__ dst, int64_t rows,
                      int64_t k, int64_t kp, const int* __restrict__ state) {
  __shared__ float tile[kTileK][kSplitTileRows + 1];  // +1: the column reads below skip banks
  const int shift = state[WeightState::kShift];
  const bool refused = state[WeightState::kCarried] == 0;
  const int64_t r0 = blockIdx.x * static_cast<int64_t>(kSplitTileRows);
  const int64_t c0 = blockIdx.y * static_cast<int64_t>(kTileK);
  const int tr = threadIdx.x % kSplitTileRows;
  for (int tc = threadIdx.x / kSplitTileRows; tc < kTileK; tc += kThreads / kSplitTileRows) {
    const int64_t c = c0 + tc, r = r0 + tr;
    tile[tc][tr] = !refused && c < k && r < rows ? wt[c * rows + r] : 0.0f;
  }
  __syncthreads();
  constexpr int kQuads = kTileK / 4;
  for (int q = threadIdx.x; q < kSplitTileRows * kQuads; q += kThreads) {
    const int tr_out = q / kQuads, quad = q % kQuads;
    const int64_t r = r0 + tr_out;
    if (r >= rows) continue;
    const float4 v = make_float4(tile[4 * quad][tr_out], tile[4 * quad + 1][tr_out],
                                 tile[4 * quad + 2][tr_out], tile[4 * quad + 3][tr_out]);
    store_split<Split::kPairLoFirst>(dst + r * 2 * kp, c0 + 4 * quad, kp, v, shift);
  }
}

// W's verdict from its row maxima, one block: carried (finite, and no nonzero row more than
// 2^kRowRangeBits below the largest) and W's scale, into `state` (WeightState).
__global__ void __launch_bounds__(kThreads)
weight_verdict_kernel(const float* __restrict__ row_max, int64_t rows, int* __restrict__ state) {
  __shared__ float scratch[kThreads / kWarpSize];
  float top = 0.0f, least = INFINITY;
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) {
    const float v = row_max[r];
    top = fmaxf(top, v);
    if (v > 0.0f) least = fminf(least, v);
  }
  top = block_max(top, scratch);
  least = -block_max(-least, scratch);
  if (threadIdx.x == 0) {
    const bool carried = isfinite(top) && !(top > 0.0f && least < ldexpf(top, -kRowRangeBits));
    state[WeightState::kShift] = carried ? scale_shift(top) : 0;
    state[WeightState::kCarried] = carried ? 1 : 0;
  }
}

// Rows up to kCachedK wide (16-byte aligned, K a multiple of 4) stay in registers between the
// range pass and the split: x is read from memory once.
constexpr int kCachedVectors = 8;
constexpr int64_t kCachedK = 4 * kThreads * kCachedVectors;

// The activation's split with its range guard, one pass over x, block per row: the row's range
// gives its scale or its place on the guard's list (GuardLayout); then the row is split, from
// registers (rows up to kCachedK) or from a second read that hits L2. Where list_rows, the
// guarded rows are also listed, for fixup_rows_kernel and the moments' changed rows: the
// guard's count must then be zero on entry. The partials' readers test alpha alone, so their
// split lists nothing and needs no zeroed count (a memset launch less a call). kSplit:
// kPairHiFirst (three products) or kHiOnly (one or two).
template <Split kSplit>
__global__ void __launch_bounds__(kThreads)
split_rows_kernel(const float* __restrict__ x, __half* __restrict__ dst, int64_t rows, int64_t k,
                  int64_t kp, int* __restrict__ guard, const int* __restrict__ weight_state,
                  bool list_rows) {
  __shared__ float scratch[kThreads / kWarpSize];
  __shared__ int row_shift;
  __shared__ bool zero_row;
  const GuardLayout layout{rows};
  float* alpha = reinterpret_cast<float*>(guard + layout.alpha());
  float* beta = reinterpret_cast<float*>(guard + layout.beta());
  int* listed = guard + layout.rows();
  const int sw = weight_state[WeightState::kShift];
  const bool weight_refused = weight_state[WeightState::kCarried] == 0;
  const bool vector = k % 4 == 0 && is_16_byte_aligned(x);
  const bool cached = vector && k <= kCachedK;  // then kp <= kCachedK as well
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* src = x + row * k;
    RowRange range;
    float4 cache[kCachedVectors];
    if (cached) {
#pragma unroll
      for (int i = 0; i < kCachedVectors; ++i) {
        const int64_t c = 4 * (threadIdx.x + static_cast<int64_t>(i) * kThreads);
        cache[i] = c < k ? *reinterpret_cast<const float4*>(src + c) : make_float4(0.f, 0.f, 0.f, 0.f);
        range.take(cache[i]);
      }
    } else {
      take_row(range, src, k, vector);
    }
    const float m = block_max(range.max, scratch);
    const float bad = block_max(range.bad, scratch);
    const float least = -block_max(-range.least, scratch);
    if (threadIdx.x == 0) {
      const int shift = scale_shift(m);
      // alpha = 2^-(sx + sw) and beta = alpha 2^-11 must be normal float32 numbers.
      const int total = shift + sw;
      const bool zero = weight_refused || bad != 0.0f || total > 126 - 11 || total < -127 ||
                        (m > 0.0f && least < ldexpf(m, -kRowSpreadBits));
      alpha[row] = zero ? 0.0f : ldexpf(1.0f, -total);
      beta[row] = zero ? 0.0f : ldexpf(kCrossWeight, -total);
      if (zero && list_rows) listed[atomicAdd(guard, 1)] = static_cast<int>(row);
      row_shift = shift;
      zero_row = zero;
    }
    __syncthreads();
    __half* d = dst + row * split_width(kSplit, kp);
    if (cached) {
#pragma unroll
      for (int i = 0; i < kCachedVectors; ++i) {
        const int64_t col = 4 * (threadIdx.x + static_cast<int64_t>(i) * kThreads);
        if (col < kp) {  // columns k .. kp are zeros in the cache
          store_split<kSplit>(d, col, kp, zero_row ? make_float4(0.f, 0.f, 0.f, 0.f) : cache[i],
                              row_shift);
        }
      }
    } else {
      split_row<kSplit>(src, d, k, kp, row_shift, zero_row, vector);
    }
    __syncthreads();  // row_shift and zero_row are read before the next row writes them
  }
}

// The exact path for the rows the guard listed (exact_dot, epilogue_3xfp16.cuh), one warp an
// output. A persistent grid: with no listed rows (the usual case) every block returns at once.
__global__ void __launch_bounds__(kThreads)
fixup_rows_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                  int64_t m, int64_t n, int64_t k, int64_t w_row_step, int64_t w_step,
                  const int* __restrict__ guard) {
  const int count = guard[0];
  const int* listed = guard + GuardLayout{m}.rows();
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / kWarpSize);
  const int64_t first = blockIdx.x * static_cast<int64_t>(kThreads / kWarpSize) +
                        threadIdx.x / kWarpSize;
  for (int i = blockIdx.y; i < count; i += gridDim.y) {
    const int64_t row = listed[i];
    for (int64_t j = first; j < n; j += warps) {
      const float v = exact_dot(x + row * k, w + j * w_row_step, k, lane, w_step);
      if (lane == 0) y[row * n + j] = v;
    }
  }
}

// y from split-K partials (Partials3xFp16View::at4), 4 consecutive outputs a thread (N is a
// multiple of 4, so they share a row).
__global__ void __launch_bounds__(kThreads)
combine_slices_kernel(Partials3xFp16View view, float* __restrict__ y) {
  const int64_t count4 = view.count / 4;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < count4;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = 4 * i / view.n, col = 4 * i - row * view.n;
    reinterpret_cast<float4*>(y)[i] = view.at4(row, col);
  }
}

unsigned grid_rows(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(rows, 1), 65535));
}

// W's scale and fp16 pair: one fold of this engine's kind (param: the padded K).
constexpr FoldKind kSplit3xFp16Fold{"3xfp16 weight split"};

// The prepared weight, named; stored in the cache as its three tensors.
struct PreparedWeight {
  at::Tensor pair;     // (N, 2 kp) fp16, [lo | hi] (zeros where W was refused)
  at::Tensor state;    // (2,) int32 on W's device: WeightState
  at::Tensor verdict;  // (1,) int32, pinned host memory: WeightState::kCarried's value once
                       // its copy lands, -1 before
  static PreparedWeight of(const FoldTensors& t) { return {t[0], t[1], t[2]}; }
  FoldTensors tensors() const { return {pair, state, verdict}; }
  // The host knows W was refused: its verdict arrived (asynchronously) and says so. Read while
  // the copy may still be in flight: a 4-byte aligned value lands whole, -1 or the verdict.
  bool known_refused() const {
    return !pair.defined() || *static_cast<volatile const int*>(verdict.data_ptr<int>()) == 0;
  }
};

// The weight preparation, all on the GPU, nothing read on the host: W's row maxima, its
// verdict and scale (one power of two for the tensor), its fp16 pair [lo | hi]; one fold. The
// verdict is also copied to pinned host memory, asynchronously: calls that find it there run
// the caller's exact path; until then the split guards every row of x (split_rows_kernel),
// which the guard's exact fixup recomputes: a refused weight is exact from its first call.
PreparedWeight prepare_weight_3xfp16(const at::Tensor& weight) {
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    return {};  // not cached during capture (common/fold_cache.h); the exact path runs
  }
  const int64_t n = weight.size(0), k = weight.size(1), kp = padded_k(k);
  // W as it lies (a contiguous W, or W^T's view: gemm_nt's b, weight_cols_kernel).
  const bool transposed = !weight.is_contiguous();
  TORCH_INTERNAL_ASSERT(!transposed || weight.t().is_contiguous(),
                        "fusedops: the 3xFP16 engine reads W contiguous or transposed, got strides ",
                        weight.strides());
  const float* w = weight.data_ptr<float>();
  at::Tensor row_max;
  if (transposed) {
    row_max = at::zeros({n}, weight.options());
    const dim3 grid(static_cast<unsigned>(ceil_div(n, kThreads)),
                    static_cast<unsigned>(ceil_div(k, kColumnChunk)));
    weight_cols_kernel<<<grid, kThreads, 0, stream>>>(w, row_max.data_ptr<float>(), n, k);
  } else {
    row_max = at::empty({n}, weight.options());
    weight_rows_kernel<<<grid_rows(n), kThreads, 0, stream>>>(w, row_max.data_ptr<float>(), n, k);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  PreparedWeight prepared;
  prepared.state = at::empty({WeightState::kSize}, weight.options().dtype(at::kInt));
  weight_verdict_kernel<<<1, kThreads, 0, stream>>>(row_max.data_ptr<float>(), n,
                                                    prepared.state.data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  prepared.pair = at::empty({n, 2 * kp}, weight.options().dtype(at::kHalf));
  auto* pair = reinterpret_cast<__half*>(prepared.pair.data_ptr<at::Half>());
  if (transposed) {
    const dim3 grid(static_cast<unsigned>(ceil_div(n, kSplitTileRows)),
                    static_cast<unsigned>(kp / kTileK));
    split_weight_t_kernel<<<grid, kThreads, 0, stream>>>(w, pair, n, k, kp,
                                                         prepared.state.data_ptr<int>());
  } else {
    split_weight_kernel<<<grid_rows(n), kThreads, 0, stream>>>(w, pair, n, k, kp,
                                                               prepared.state.data_ptr<int>());
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  prepared.verdict = at::empty({1}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
  *prepared.verdict.data_ptr<int>() = -1;
  prepared.verdict.copy_(prepared.state.narrow(0, WeightState::kCarried, 1),
                         /*non_blocking=*/true);
  return prepared;
}

// Both operands split: W's fp16 pair from its fold (made once), x's split now with the guard
// (its pair, or its hi part alone for the one-product form: lda says which).
struct Operands {
  at::Tensor w_pair, x_split, guard;
  int64_t lda = 0;
};

bool split_operands(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_key,
                    bool cache_folds, Products products, bool list_rows, Operands& ops) {
  const int64_t m = x.size(0), k = x.size(1), kp = padded_k(k);
  const PreparedWeight prepared = PreparedWeight::of(
      fold_weights(kSplit3xFp16Fold, kp, {weight_key}, cache_folds,
                   [&] { return prepare_weight_3xfp16(weight).tensors(); }));
  if (prepared.known_refused()) return false;
  ops.w_pair = prepared.pair;
  const GuardLayout layout{m};
  ops.guard = at::empty({layout.size()}, x.options().dtype(at::kInt));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (list_rows) {
    C10_CUDA_CHECK(cudaMemsetAsync(ops.guard.data_ptr<int>(), 0, sizeof(int), stream));
  }
  const Split split = products == Products::kThree ? Split::kPairHiFirst : Split::kHiOnly;
  ops.lda = split_width(split, kp);
  ops.x_split = at::empty({m, ops.lda}, x.options().dtype(at::kHalf));
  auto* kernel = split == Split::kHiOnly ? split_rows_kernel<Split::kHiOnly>
                                         : split_rows_kernel<Split::kPairHiFirst>;
  kernel<<<grid_rows(m), kThreads, 0, stream>>>(
      x.data_ptr<float>(), reinterpret_cast<__half*>(ops.x_split.data_ptr<at::Half>()), m, k, kp,
      ops.guard.data_ptr<int>(), prepared.state.data_ptr<int>(), list_rows);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

// The two GEMMs as K-slice partials (cross_slices, then main_slices, of M x N each; no cross
// slices in the one-product form), and the view through which y is read from them. The cross
// GEMM's K is x's split row (ops.lda: [x_hi | x_lo] against [W_lo | W_hi], or x_hi against W_lo).
void run_partials(const Operands& ops, int64_t m, int64_t n, int64_t kp, Fp16Slices slices,
                  int sm_count, Partials3xFp16& out) {
  const int cross_slices = slices.cross, main_slices = slices.main;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const at::Half* xp = ops.x_split.data_ptr<at::Half>();
  const at::Half* wp = ops.w_pair.data_ptr<at::Half>();
  const int mi = static_cast<int>(m), ni = static_cast<int>(n);
  out.guard = ops.guard;
  out.partials =
      at::empty({(cross_slices + main_slices) * m * n}, ops.guard.options().dtype(at::kFloat));
  float* pc = out.partials.data_ptr<float>();
  const GuardLayout layout{m};
  const int* g = ops.guard.data_ptr<int>();
  out.view = Partials3xFp16View{pc, cross_slices, main_slices, n, m * n,
                                reinterpret_cast<const float*>(g + layout.alpha()),
                                reinterpret_cast<const float*>(g + layout.beta())};
  if (cross_slices > 0) {
    const int64_t cross_k = ops.lda / cross_slices;
    cross_gemm_sm90({mi, ni, static_cast<int>(cross_k), cross_slices, ops.lda, 2 * kp, cross_k,
                     m * n, sm_count}, xp, wp, pc, stream);
  }
  const int64_t main_k = kp / main_slices;
  promoted_partial_gemm_sm90({mi, ni, static_cast<int>(main_k), main_slices, ops.lda, 2 * kp,
                              main_k, m * n, sm_count}, xp, wp + kp, pc + cross_slices * m * n,
                             stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// CUTLASS reports what it cannot run as std::runtime_error; make it a c10::Error with the sizes.
template <class F>
void with_sizes(int64_t m, int64_t n, int64_t k, F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, e.what(), " (m=", m, ", n=", n, ", k=", k, ")");
  }
}

}  // namespace

bool split_pair(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_key,
                bool cache_folds, SplitPair& out) {
  Operands ops;
  if (!split_operands(x, weight, weight_key, cache_folds, Products::kThree,
                      /*list_rows=*/false, ops)) {
    return false;
  }
  out = {ops.x_split, ops.w_pair, ops.guard, padded_k(x.size(1))};
  return true;
}

bool linear_nt_3xfp16_partials(const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& weight_key, bool cache_folds, Products products,
                               int sm_count, Partials3xFp16& out) {
  const int64_t m = x.size(0), n = weight.size(0), k = x.size(1);
  Operands ops;
  if (!split_operands(x, weight, weight_key, cache_folds, products, /*list_rows=*/false, ops)) {
    return false;
  }
  const Fp16Slices slices = fp16_engine_slices(m, n, k, products, /*partials=*/true, sm_count);
  with_sizes(m, n, k, [&] { run_partials(ops, m, n, padded_k(k), slices, sm_count, out); });
  return true;
}

namespace {

// y, and, where `moments` is given (the one-product form, unsplit: the planner's rule), the
// tile moments from its epilogue. guard: the guard.
bool run_3xfp16(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_key,
                bool cache_folds, Products products, int sm_count, at::Tensor& y,
                TileMoments* moments, at::Tensor* guard) {
  const int64_t m = x.size(0), n = weight.size(0), k = x.size(1), kp = padded_k(k);
  Operands ops;
  if (!split_operands(x, weight, weight_key, cache_folds, products, /*list_rows=*/true, ops)) {
    return false;
  }
  if (guard != nullptr) *guard = ops.guard;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const GuardLayout layout{m};
  const int* g = ops.guard.data_ptr<int>();
  const float* alpha = reinterpret_cast<const float*>(g + layout.alpha());
  const at::Half* xp = ops.x_split.data_ptr<at::Half>();
  const at::Half* wp = ops.w_pair.data_ptr<at::Half>();
  float* out = y.data_ptr<float>();
  const bool one = products == Products::kOne;
  const Fp16Slices slices = fp16_engine_slices(m, n, k, products, /*partials=*/false, sm_count);
  const int cross_slices = slices.cross, main_slices = slices.main;
  TORCH_INTERNAL_ASSERT(moments == nullptr || (one && !slices.split()),
                        "fusedops: the column-moments epilogue needs the one-product GEMM unsplit "
                        "(the planner's rule), got m=", m, ", n=", n, ", k=", k);
  with_sizes(m, n, k, [&] {
    const int mi = static_cast<int>(m), ni = static_cast<int>(n);
    const Fp16GemmShape whole{mi, ni, static_cast<int>(kp), 1, ops.lda, 2 * kp, 0, 0, sm_count};
    if (moments != nullptr) {
      scaled_moments_gemm_sm90(whole, xp, wp + kp, out, alpha, moments->mean.data_ptr<float>(),
                               moments->m2.data_ptr<float>(), stream);
      moments->written = true;
    } else if (one && main_slices == 1) {
      scaled_gemm_sm90(whole, xp, wp + kp, out, alpha, stream);
    } else if (cross_slices == 1 && main_slices == 1) {
      // The cross terms land in y; the main GEMM's epilogue reads them back as its source
      // (y = alpha_r * main + beta_r * cross, in place: each tile reads its source first). The
      // cross GEMM's K is x's split row (run_partials).
      cross_gemm_sm90({mi, ni, static_cast<int>(ops.lda), 1, ops.lda, 2 * kp, 0, 0, sm_count},
                      xp, wp, out, stream);
      promoted_gemm_sm90({mi, ni, static_cast<int>(kp), 1, ops.lda, 2 * kp, 0, 0, sm_count}, xp,
                         wp + kp, out, out, alpha,
                         reinterpret_cast<const float*>(g + layout.beta()), stream);
    } else {
      Partials3xFp16 partials;
      run_partials(ops, m, n, kp, slices, sm_count, partials);
      const int64_t blocks = std::min<int64_t>(ceil_div(m * n / 4, kThreads), 1024);
      combine_slices_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(partials.view,
                                                                                out);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  fixup_rows_kernel<<<dim3(static_cast<unsigned>(sm_count), 4), kThreads, 0, stream>>>(
      x.data_ptr<float>(), weight.data_ptr<float>(), out, m, n, k, weight.stride(0),
      weight.stride(1), g);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

}  // namespace

bool linear_nt_3xfp16(const at::Tensor& x, const at::Tensor& weight,
                      const at::Tensor& weight_key, bool cache_folds, Products products,
                      int sm_count, at::Tensor& y) {
  return run_3xfp16(x, weight, weight_key, cache_folds, products, sm_count, y, nullptr, nullptr);
}

bool linear_nt_1xfp16_moments(const at::Tensor& x, const at::Tensor& weight,
                              const at::Tensor& weight_key, bool cache_folds, int sm_count,
                              at::Tensor& y, TileMoments& moments) {
  const int64_t tiles = ceil_div(x.size(0), kMomentsTileRows), n = weight.size(0);
  TORCH_INTERNAL_ASSERT(moments.rows == kMomentsTileRows && moments.mean.numel() == tiles * n &&
                            moments.m2.numel() == tiles * n,
                        "fusedops: tile moments of the wrong shape");
  moments.written = false;
  return run_3xfp16(x, weight, weight_key, cache_folds, Products::kOne, sm_count, y, &moments,
                    &moments.changed_rows);
}

}  // namespace fusedops::cuda::gemm
