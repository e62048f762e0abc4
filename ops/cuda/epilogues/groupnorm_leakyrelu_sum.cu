// Model 62's epilogue pass (groupnorm_leakyrelu_sum.h). A group is a short contiguous segment
// of one row (16 channels at the default sizes), so each segment is reduced by a power-of-two
// group of lanes inside one warp: no shared memory, no block barriers, one read of y and one
// write of out. The math per group is math/groupnorm_leakyrelu_sum.h.
//
// "eager" numerics must see the reference's roundings, and PyTorch's CUDA GroupNorm rounds
// more than the Linear output: it stores each group's mean and 1/std in the input's dtype (eps
// too) and normalizes with those. A bfloat16 statistic is off by up to 2^-9 of itself, which
// moves an output where gamma * x_hat and beta cancel by more than 1e-2 of itself: unrounded
// statistics put elements past KernelBench's bar (tests/python/test_numerics.py), and so do
// our own rounded ones, a whole bfloat16 ulp off wherever they differ from ATen's by an ulp
// across a rounding boundary. So under eager the statistics are ATen's, computed as its
// RowwiseMomentsCUDAKernel does for groups under 512 channels: Welford per lane over the
// channels c, c + 32, ..., the lanes combined by shuffles down (16, 8, ..., 1), var = m2 / n,
// 1/std = rsqrt(var + eps) with eps in the input's dtype (the kernel's eager branch).
#include "cuda/epilogues/groupnorm_leakyrelu_sum.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <type_traits>

#include "common/numerics.h"
#include "cuda/cuda_helpers.cuh"
#include "math/groupnorm_leakyrelu_sum.h"

namespace fusedops::cuda {
namespace {

using Chain = epilogues::GroupNormLeakyReluSum<float>;
constexpr int kWarpsPerBlock = 8;

// ATen's WelfordOps (SharedReduceOps.h) on one accumulator: the same operations in the same
// order, so that the same inputs give the same bits.
template <typename T>
struct Welford {
  T mean = 0, m2 = 0, nf = 0;
};

template <typename T>
__device__ __forceinline__ Welford<T> welford_add(const Welford<T>& a, T x) {
  const T new_nf = a.nf + static_cast<T>(1);
  const T delta = x - a.mean;
  // A lane's first value (the only one for groups of up to 32 channels): delta / 1 is delta
  // exactly, so the division, the costliest step, is skipped with the same bits.
  const T new_mean = a.mean + (a.nf == static_cast<T>(0) ? delta : delta / new_nf);
  const T new_delta = x - new_mean;
  return {new_mean, a.m2 + delta * new_delta, new_nf};
}

template <typename T>
__device__ __forceinline__ Welford<T> welford_combine(const Welford<T>& a, const Welford<T>& b) {
  if (a.nf == 0) return b;
  if (b.nf == 0) return a;
  const T delta = b.mean - a.mean;
  const T new_count = a.nf + b.nf;
  const T nb_over_n = b.nf / new_count;
  return {a.mean + delta * nb_over_n, a.m2 + b.m2 + delta * delta * a.nf * nb_over_n, new_count};
}

// Lanes per segment: the group size rounded up to a power of two, at most a warp.
int lanes_per_segment(int64_t group_size) {
  int lanes = 1;
  while (lanes < group_size && lanes < kWarpSize) lanes *= 2;
  return lanes;
}

// segment mod groups: 32-bit where the sizes allow (a 64-bit remainder is a long instruction
// sequence, once per segment and lane).
__device__ __forceinline__ int64_t group_of(int64_t segment, int64_t groups) {
  if (segment <= UINT32_MAX && groups <= UINT32_MAX) {
    return static_cast<uint32_t>(segment) % static_cast<uint32_t>(groups);
  }
  return segment % groups;
}

// How the segment kernels walk the segments: `lanes` lanes a segment (a power of two, at most
// a warp), kWarpSize / lanes segments a warp, a grid-stride loop in which every lane runs every
// iteration, so that the shuffles stay full-warp. segment(first): this lane's segment in the
// iteration that starts at `first` (past the last segment where the lane idles).
struct SegmentWalk {
  int lanes, lane;
  int64_t begin, stride;
  __device__ explicit SegmentWalk(int lanes_per_segment)
      : lanes(lanes_per_segment), lane(static_cast<int>(threadIdx.x) % kWarpSize) {
    const int per_warp = kWarpSize / lanes;
    begin = (blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize) *
            per_warp;
    stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock * per_warp;
  }
  __device__ int sub() const { return lane % lanes; }
  __device__ int64_t segment(int64_t first) const { return first + lane / lanes; }
};

// Segment s = (row, group) covers y[s * group_size, (s + 1) * group_size) (hidden = groups *
// group_size); its first channel is (s mod groups) * group_size. Past the last segment: empty.
struct SegmentSpan {
  int64_t base = 0, channel0 = 0, len = 0;
};
__device__ __forceinline__ SegmentSpan span_of(int64_t segment, int64_t segments, int64_t groups,
                                               int64_t group_size) {
  if (segment >= segments) return {};
  return {segment * group_size, group_of(segment, groups) * group_size, group_size};
}

template <typename T>
__device__ __forceinline__ T param(const T* p, int64_t i) {
  return p != nullptr ? p[i] : T(0);
}

// Any group size, any dtype (float64 included), and eager's ATen statistics: lane `sub` of a
// segment (SegmentSpan) reads channels sub, sub + lanes, ...
// y is read in its own dtype ys_t (the accumulation dtype, or the model's under eager: the
// Linear output as the reference stores it) and computed on in y_t, the accumulation dtype.
template <typename scalar_t, typename ys_t, typename Store, typename y_t = acc_t<scalar_t>>
__global__ void groupnorm_segments_kernel(const ys_t* __restrict__ y,
                                          const scalar_t* __restrict__ bias,
                                          const scalar_t* __restrict__ gamma,
                                          const scalar_t* __restrict__ beta,
                                          scalar_t* __restrict__ out, int64_t segments,
                                          int64_t groups, int64_t group_size, int lanes,
                                          epilogues::GroupNormLeakyReluSum<y_t> chain) {
  constexpr bool kEager = !std::is_same_v<Store, Unrounded>;
  const SegmentWalk walk(lanes);
  const int sub = walk.sub();
  const y_t count = static_cast<y_t>(group_size);
  for (int64_t first = walk.begin; first < segments; first += walk.stride) {
    const SegmentSpan span = span_of(walk.segment(first), segments, groups, group_size);
    const int64_t base = span.base, channel0 = span.channel0, len = span.len;

    auto linear = [&](int64_t c) {
      return static_cast<y_t>(y[base + c]) + static_cast<y_t>(param(bias, channel0 + c));
    };
    y_t mean, rstd;
    if constexpr (kEager) {
      // ATen's statistics (file comment): lane `sub` of a segment is ATen's thread `sub`, which
      // reads channels sub, sub + 32, ...; lanes <= 32, so the lanes past the group are the
      // ones ATen leaves empty, and a shuffle down stays inside the segment.
      Welford<y_t> w;
      for (int64_t c = sub; c < len; c += lanes) w = welford_add(w, linear(c));
      for (int offset = lanes / 2; offset > 0; offset /= 2) {
        Welford<y_t> other;
        other.mean = __shfl_down_sync(0xffffffffu, w.mean, offset, lanes);
        other.m2 = __shfl_down_sync(0xffffffffu, w.m2, offset, lanes);
        other.nf = __shfl_down_sync(0xffffffffu, w.nf, offset, lanes);
        w = welford_combine(w, other);
      }
      const y_t group_mean = __shfl_sync(0xffffffffu, w.mean, 0, lanes);
      const y_t var = __shfl_sync(0xffffffffu, w.m2 / w.nf, 0, lanes);
      const y_t eps_stored = Store::store(chain.eps);
      // c10::cuda::compat::rsqrt: rsqrtf (eager runs only float16/bfloat16 models, whose
      // accumulation type is float).
      mean = Store::store(group_mean);
      rstd = Store::store(rsqrtf(var + eps_stored));
    } else {
      y_t sum = 0;
      for (int64_t c = sub; c < len; c += lanes) sum += linear(c);
      mean = chain.mean(warp_sum(sum, lanes), count);
      y_t sq = 0;  // second pass over the (cache-resident) segment: no E[v^2] - E[v]^2 cancellation
      for (int64_t c = sub; c < len; c += lanes) {
        const y_t d = linear(c) - mean;
        sq += d * d;
      }
      rstd = chain.rstd(warp_sum(sq, lanes), count);
    }
    for (int64_t c = sub; c < len; c += lanes) {
      out[base + c] = static_cast<scalar_t>(chain.template output<Store>(
          linear(c) - mean, rstd, static_cast<y_t>(gamma[channel0 + c]),
          static_cast<y_t>(beta[channel0 + c])));
    }
  }
}

// ATen's warp reduction of one segment, replayed in registers: the levels Offset, Offset / 2,
// ..., 1 as compile-time steps (every index constant: the array stays in registers).
template <int Offset, typename T, int N>
__device__ __forceinline__ void welford_tree(Welford<T> (&w)[N]) {
  if constexpr (Offset > 0) {
#pragma unroll
    for (int i = 0; i < Offset; ++i) w[i] = welford_combine(w[i], w[i + Offset]);
    welford_tree<Offset / 2>(w);
  }
}

// The tree over a segment's L values (those past group_size empty). kWhole: all L present,
// so every count in the tree is a constant and its divisions fold to exact powers of two at
// compile time (the same values, so the same bits, as computed at run time); the runtime
// divisions and branches had made the eager kernel bound by its instructions, not by memory.
template <int L, bool kWhole>
__device__ __forceinline__ Welford<float> group_welford(const float (&v)[L], int group_size) {
  Welford<float> w[L];
#pragma unroll
  for (int c = 0; c < L; ++c) {
    if (kWhole || c < group_size) w[c] = welford_add(Welford<float>{}, v[c]);
  }
  welford_tree<L / 2>(w);
  return w[0];
}

// A group's L values (those past group_size zero), widened to float: 16-byte loads when the
// group is whole pieces of 16 bytes (`whole`), else one load a value.
template <int L, typename scalar_t>
__device__ __forceinline__ void load_group(const scalar_t* p, int group_size, bool whole,
                                           float (&v)[L]) {
  constexpr int kPiece = 16 / static_cast<int>(sizeof(scalar_t));
  if constexpr (L % kPiece == 0) {
    if (whole) {
#pragma unroll
      for (int piece = 0; piece < L / kPiece; ++piece) {
        float part[kPiece];
        load_vector<kPiece>(p + piece * kPiece, part);
#pragma unroll
        for (int e = 0; e < kPiece; ++e) v[piece * kPiece + e] = part[e];
      }
      return;
    }
  }
#pragma unroll
  for (int c = 0; c < L; ++c) v[c] = c < group_size ? static_cast<float>(p[c]) : 0.f;
}

template <int L, typename scalar_t>
__device__ __forceinline__ void store_group(scalar_t* p, int group_size, bool whole,
                                            const float (&v)[L]) {
  constexpr int kPiece = 16 / static_cast<int>(sizeof(scalar_t));
  if constexpr (L % kPiece == 0) {
    if (whole) {
#pragma unroll
      for (int piece = 0; piece < L / kPiece; ++piece) {
        float part[kPiece];
#pragma unroll
        for (int e = 0; e < kPiece; ++e) part[e] = v[piece * kPiece + e];
        store_vector<kPiece>(p + piece * kPiece, part);
      }
      return;
    }
  }
#pragma unroll
  for (int c = 0; c < L; ++c) {
    if (c < group_size) p[c] = static_cast<scalar_t>(v[c]);
  }
}

// Blocks of 256 an SM the eager thread kernel is compiled for: four (64 registers) up to 16
// channels a thread, whose 32-byte segments alone leave too few bytes in flight at two.
template <int L>
constexpr int kEagerThreadBlocks = L <= 16 ? 4 : 2;

// Eager statistics for groups of at most 32 channels, one thread a segment. There each of
// ATen's threads holds at most one value (thread c reads channel c), so its warp reduction is a
// fixed tree over the group's values: offset L/2, ..., 1, w[i] = combine(w[i], w[i + offset])
// (the offsets above L/2 meet only empty lanes, which combine leaves unchanged). One thread
// replays that tree in registers, the same operations in the same order, so the statistics
// have the same bits as the lanes kernel's; it reads its segment with 16-byte loads where the
// group allows, where the lanes kernel spent a warp's shuffles and divisions on every segment
// and was bound by latency, not by memory.
template <typename scalar_t, int L>
__global__ void __launch_bounds__(256, kEagerThreadBlocks<L>)
groupnorm_eager_thread_kernel(const scalar_t* __restrict__ y, const scalar_t* __restrict__ gamma,
                              const scalar_t* __restrict__ beta, scalar_t* __restrict__ out,
                              int64_t segments, int64_t groups, int group_size, Chain chain) {
  using Store = RoundedTo<scalar_t>;
  // Every group (of y, out and the affine parameters) whole 16-byte pieces, aligned.
  const bool whole = group_size == L && (L * sizeof(scalar_t)) % 16 == 0 &&
                     is_16_byte_aligned(y) && is_16_byte_aligned(out) &&
                     is_16_byte_aligned(gamma) && is_16_byte_aligned(beta);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t segment = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       segment < segments; segment += stride) {
    const int64_t base = segment * group_size;
    const int64_t channel0 = group_of(segment, groups) * group_size;
    float v[L];
    load_group<L>(y + base, group_size, whole, v);
    // As the lanes kernel's linear(c) with no bias (the eager route's y holds it): + 0.
#pragma unroll
    for (int c = 0; c < L; ++c) v[c] += 0.f;
    const Welford<float> w = whole ? group_welford<L, true>(v, group_size)
                                   : group_welford<L, false>(v, group_size);
    const float mean = Store::store(w.mean);
    const float rstd = Store::store(rsqrtf(w.m2 / w.nf + Store::store(chain.eps)));
    float g[L], b[L], o[L];
    load_group<L>(gamma + channel0, group_size, whole, g);
    load_group<L>(beta + channel0, group_size, whole, b);
#pragma unroll
    for (int c = 0; c < L; ++c) o[c] = chain.output<Store>(v[c] - mean, rstd, g[c], b[c]);
    store_group<L>(out + base, group_size, whole, o);
  }
}

// float32 y, accurate numerics, groups of 4..128 channels (a multiple of 4; the default is
// 16): each lane owns 4 consecutive channels, loaded once with one 16-byte load and kept in
// registers through both statistics and the output.
template <typename scalar_t>
__global__ void groupnorm_quads_kernel(const float* __restrict__ y,
                                       const scalar_t* __restrict__ bias,
                                       const scalar_t* __restrict__ gamma,
                                       const scalar_t* __restrict__ beta,
                                       scalar_t* __restrict__ out, int64_t segments,
                                       int64_t groups, int group_size, int lanes, Chain chain) {
  const SegmentWalk walk(lanes);
  const int quad = walk.sub();
  const bool quad_in_group = 4 * quad < group_size;
  const float count = static_cast<float>(group_size);
  for (int64_t first = walk.begin; first < segments; first += walk.stride) {
    const int64_t segment = walk.segment(first);
    const bool active = segment < segments && quad_in_group;
    const int64_t offset = segment * group_size + 4 * quad;
    const int64_t channel = active ? group_of(segment, groups) * group_size + 4 * quad : 0;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    if (active) {
      const float4 t = *reinterpret_cast<const float4*>(y + offset);
      v[0] = t.x + static_cast<float>(bias[channel]);
      v[1] = t.y + static_cast<float>(bias[channel + 1]);
      v[2] = t.z + static_cast<float>(bias[channel + 2]);
      v[3] = t.w + static_cast<float>(bias[channel + 3]);
    }
    const float mean = Chain::mean(warp_sum(v[0] + v[1] + v[2] + v[3], lanes), count);
    float sq = 0.f;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[e] = active ? v[e] - mean : 0.f;
      sq += v[e] * v[e];
    }
    const float rstd = chain.rstd(warp_sum(sq, lanes), count);
    if (active) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        out[offset + e] = static_cast<scalar_t>(chain.output<Unrounded>(
            v[e], rstd, static_cast<float>(gamma[channel + e]),
            static_cast<float>(beta[channel + e])));
      }
    }
  }
}

// The eager thread kernel for a float16/bfloat16 y (false, nothing run, for other dtypes), its
// L lanes a power of two covering the group, as lanes_per_segment.
template <typename scalar_t>
bool eager_thread_pass(const at::Tensor& y, const at::Tensor& gamma, const at::Tensor& beta,
                       at::Tensor& out, int64_t segments, int64_t groups, int group_size,
                       const epilogues::GroupNormLeakyReluSum<acc_t<scalar_t>>& chain,
                       cudaStream_t stream) {
  if constexpr (!std::is_same_v<scalar_t, at::Half> && !std::is_same_v<scalar_t, at::BFloat16>) {
    return false;
  } else {
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>(ceil_div(segments, threads), 65535LL * 32);
    auto run = [&](auto lanes) {
      constexpr int kLanes = decltype(lanes)::value;
      groupnorm_eager_thread_kernel<scalar_t, kLanes><<<blocks, threads, 0, stream>>>(
          y.data_ptr<scalar_t>(), gamma.data_ptr<scalar_t>(), beta.data_ptr<scalar_t>(),
          out.data_ptr<scalar_t>(), segments, groups, group_size, chain);
    };
    switch (lanes_per_segment(group_size)) {
      case 1: run(std::integral_constant<int, 1>{}); break;
      case 2: run(std::integral_constant<int, 2>{}); break;
      case 4: run(std::integral_constant<int, 4>{}); break;
      case 8: run(std::integral_constant<int, 8>{}); break;
      case 16: run(std::integral_constant<int, 16>{}); break;
      default: run(std::integral_constant<int, 32>{}); break;
    }
    return true;
  }
}


// Model 62's backward after the Linear (issue 40), with the forward's segment layout: y holds
// the bias, the statistics are the accurate ones (a float32/float64 model's; ATen computes its
// own in the model's dtype too). Per segment: mean and rstd again, dn = 2 g (g where GroupNorm's
// output v > 0, else g * negative_slope: leaky_relu_backward, NaN taking the slope), and
// GroupNorm's backward dy = rstd (gamma dn - mean(gamma dn) - xhat mean(gamma dn xhat)),
// xhat = (y - mean) rstd. Per element, dn xhat and dn go to `partials` (2, rows, hidden) in the
// accumulation dtype: their column sums are gamma's and beta's gradients.
// A product rounded on its own, never contracted into an FMA with what follows: gamma dn less
// its segment mean is then exactly 0 in a group of one channel, where an FMA would leave the
// product's rounding error, times rstd = eps^-1/2.
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

template <typename scalar_t, typename y_t = acc_t<scalar_t>>
__global__ void groupnorm_backward_segments_kernel(
    const scalar_t* __restrict__ y, const scalar_t* __restrict__ grad_out,
    const scalar_t* __restrict__ gamma, const scalar_t* __restrict__ beta,
    scalar_t* __restrict__ grad_y, y_t* __restrict__ partials, int64_t segments, int64_t groups,
    int64_t group_size, int lanes, epilogues::GroupNormLeakyReluSum<y_t> chain) {
  const SegmentWalk walk(lanes);
  const int sub = walk.sub();
  const y_t count = static_cast<y_t>(group_size);
  const int64_t elements = segments * group_size;
  for (int64_t first = walk.begin; first < segments; first += walk.stride) {
    const SegmentSpan span = span_of(walk.segment(first), segments, groups, group_size);
    const int64_t base = span.base, channel0 = span.channel0, len = span.len;
    y_t sum = 0;
    for (int64_t c = sub; c < len; c += lanes) sum += static_cast<y_t>(y[base + c]);
    const y_t mean = chain.mean(warp_sum(sum, lanes), count);
    y_t sq = 0;
    for (int64_t c = sub; c < len; c += lanes) {
      const y_t d = static_cast<y_t>(y[base + c]) - mean;
      sq += d * d;
    }
    const y_t rstd = chain.rstd(warp_sum(sq, lanes), count);
    // dn, xhat and gamma dn of channel c.
    auto terms = [&](int64_t c, y_t& dn, y_t& xhat, y_t& gdn) {
      xhat = (static_cast<y_t>(y[base + c]) - mean) * rstd;
      const y_t g = static_cast<y_t>(gamma[channel0 + c]);
      const y_t v = xhat * g + static_cast<y_t>(beta[channel0 + c]);
      const y_t d = static_cast<y_t>(grad_out[base + c]);
      dn = (v > y_t(0) ? d : d * chain.negative_slope) * y_t(2);
      gdn = mul_rn(g, dn);
    };
    y_t a = 0, b = 0;
    for (int64_t c = sub; c < len; c += lanes) {
      y_t dn, xhat, gdn;
      terms(c, dn, xhat, gdn);
      a += gdn;
      b += gdn * xhat;
    }
    const y_t mean_a = warp_sum(a, lanes) / count, mean_b = warp_sum(b, lanes) / count;
    for (int64_t c = sub; c < len; c += lanes) {
      y_t dn, xhat, gdn;
      terms(c, dn, xhat, gdn);
      grad_y[base + c] = static_cast<scalar_t>(rstd * (gdn - mean_a - xhat * mean_b));
      partials[base + c] = dn * xhat;
      partials[elements + base + c] = dn;
    }
  }
}
}  // namespace

void groupnorm_leakyrelu_sum_pass(const at::Tensor& y, const at::Tensor& bias, int64_t num_groups,
                                  const at::Tensor& gamma, const at::Tensor& beta, double eps,
                                  double negative_slope, bool eager, at::Tensor& out) {
  const int64_t batch = y.size(0), hidden = y.size(1);
  const int64_t group_size = hidden / num_groups;
  const int64_t segments = batch * num_groups;
  // Eager takes the segments kernel: its lanes are ATen's threads (its eager branch).
  const bool quads = !eager && y.scalar_type() == at::kFloat && bias.defined() &&
                     group_size % 4 == 0 && group_size <= 4 * kWarpSize;
  const int lanes = lanes_per_segment(quads ? group_size / 4 : group_size);
  const int64_t warps_needed = ceil_div(segments, kWarpSize / lanes);
  const int64_t blocks = std::min<int64_t>(ceil_div(warps_needed, kWarpsPerBlock), 65535LL * 32);
  const int threads = kWarpsPerBlock * kWarpSize;
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, out.scalar_type(),
                                  "groupnorm_leakyrelu_sum", [&] {
    using y_t = acc_t<scalar_t>;
    const scalar_t* b = bias.defined() ? bias.data_ptr<scalar_t>() : nullptr;
    const epilogues::GroupNormLeakyReluSum<y_t> chain{static_cast<y_t>(eps),
                                                      static_cast<y_t>(negative_slope)};
    if constexpr (std::is_same_v<y_t, float>) {
      if (quads) {
        groupnorm_quads_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
            y.data_ptr<float>(), b, gamma.data_ptr<scalar_t>(), beta.data_ptr<scalar_t>(),
            out.data_ptr<scalar_t>(), segments, num_groups, static_cast<int>(group_size), lanes,
            Chain{static_cast<float>(eps), static_cast<float>(negative_slope)});
        return;
      }
    }
    if (eager && y.scalar_type() == out.scalar_type() && group_size <= kWarpSize &&
        eager_thread_pass<scalar_t>(y, gamma, beta, out, segments, num_groups,
                                    static_cast<int>(group_size), chain, stream)) {
      return;
    }
    auto launch = [&](auto store, const auto* ys) {
      groupnorm_segments_kernel<scalar_t, std::remove_cv_t<std::remove_pointer_t<decltype(ys)>>,
                                decltype(store)><<<blocks, threads, 0, stream>>>(
          ys, b, gamma.data_ptr<scalar_t>(), beta.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
          segments, num_groups, group_size, lanes, chain);
    };
    if (y.scalar_type() == out.scalar_type() && !std::is_same_v<scalar_t, y_t>) {
      // The eager route's y, in the model's dtype: read as it is, no widened copy.
      with_store<scalar_t>(eager, [&](auto store) { launch(store, y.data_ptr<scalar_t>()); });
    } else {
      with_store<scalar_t>(eager, [&](auto store) { launch(store, y.data_ptr<y_t>()); });
    }
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void groupnorm_leakyrelu_sum_backward_pass(const at::Tensor& y, const at::Tensor& grad_out,
                                           int64_t num_groups, const at::Tensor& gamma,
                                           const at::Tensor& beta, double eps,
                                           double negative_slope, at::Tensor& grad_y,
                                           at::Tensor& partials) {
  const int64_t batch = y.size(0), hidden = y.size(1);
  const int64_t group_size = hidden / num_groups;
  const int64_t segments = batch * num_groups;
  const int lanes = lanes_per_segment(group_size);
  const int64_t warps_needed = ceil_div(segments, kWarpSize / lanes);
  const int64_t blocks = std::min<int64_t>(ceil_div(warps_needed, kWarpsPerBlock), 65535LL * 32);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, y.scalar_type(),
                                  "groupnorm_leakyrelu_sum_backward", [&] {
    using y_t = acc_t<scalar_t>;
    groupnorm_backward_segments_kernel<scalar_t>
        <<<blocks, kWarpsPerBlock * kWarpSize, 0, at::cuda::getCurrentCUDAStream()>>>(
            y.data_ptr<scalar_t>(), grad_out.data_ptr<scalar_t>(), gamma.data_ptr<scalar_t>(),
            beta.data_ptr<scalar_t>(), grad_y.data_ptr<scalar_t>(), partials.data_ptr<y_t>(),
            segments, num_groups, group_size, lanes,
            epilogues::GroupNormLeakyReluSum<y_t>{static_cast<y_t>(eps),
                                                  static_cast<y_t>(negative_slope)});
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace fusedops::cuda
