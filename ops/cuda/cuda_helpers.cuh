// Device helpers shared by the fusedops CUDA kernels. One copy of each: a kernel that needs
// a reduction, a GELU or a NaN-aware max takes it from here.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace fusedops::cuda {

constexpr int kWarpSize = 32;

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// 16-byte vector loads and stores (float4) need 16-byte aligned addresses.
__host__ __device__ inline bool is_16_byte_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// N consecutive values moved as one access: 16-byte loads and stores where N * sizeof(T) is 16
// and the address 16-byte aligned (memory-bound passes: one value a load leaves most of the
// bandwidth unused).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Four consecutive floats of a row of k from column col, those past k read as zero: one 16-byte
// load where `vector` (the row 16-byte aligned, k a multiple of 4) and all four lie inside.
__device__ __forceinline__ float4 load4(const float* row, int64_t col, int64_t k, bool vector) {
  if (vector && col + 3 < k) return *reinterpret_cast<const float4*>(row + col);
  float v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = col + i < k ? row[col + i] : 0.0f;
  return make_float4(v[0], v[1], v[2], v[3]);
}

// Accumulation type: float for float/half/bfloat16, double for double.
template <typename T> struct AccType { using type = float; };
template <> struct AccType<double> { using type = double; };
template <typename T> using acc_t = typename AccType<T>::type;

template <typename T>
__device__ __forceinline__ T warp_sum(T v, int width = kWarpSize) {
  // xor-shuffles stay inside aligned groups of `width` lanes (width a power of two <= 32),
  // so several independent segments can share one warp.
  for (int offset = width / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset, width);
  }
  return v;
}

// max that propagates NaN, as torch.max does.
template <typename T>
__device__ __forceinline__ T nan_max(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

template <typename T>
__device__ __forceinline__ T warp_nan_max(T v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Sum over the block; every thread gets the result. `scratch` holds one T per warp.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int warps = (blockDim.x + kWarpSize - 1) / kWarpSize;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  return total;
}

// Two float16 / bfloat16 values packed in one 32-bit word (the lower at the lower address, as
// in memory), to and from two floats: one conversion a pair (cvt.rn ...x2.f32, round to nearest
// even as a single value's cast), and a kernel that keeps 16-bit values in registers holds them
// two a register. Values written one at a time into a word's halves were kept one a register
// by the compiler (model 39's resident kernel in bfloat16: 128 registers of values, spilled).
template <typename S>
struct Packed16;
template <>
struct Packed16<c10::Half> {
  __device__ __forceinline__ static float2 unpack(uint32_t w) {
    __half2 h;
    static_assert(sizeof(h) == sizeof(w));
    memcpy(&h, &w, sizeof(w));
    return __half22float2(h);
  }
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    uint32_t w;
    memcpy(&w, &h, sizeof(w));
    return w;
  }
};
template <>
struct Packed16<c10::BFloat16> {
  __device__ __forceinline__ static float2 unpack(uint32_t w) {
    // A bfloat16 is the upper half of the float with its bits.
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  }
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    uint32_t w;
    memcpy(&w, &h, sizeof(w));
    return w;
  }
};

// V consecutive values of type S from p (aligned to their whole size), widened to T: one 16-
// or 8-byte load when the V values make one (float x 4, half x 8 or x 4), else V loads.
template <int V, typename T, typename S>
__device__ __forceinline__ void load_vector(const S* p, T (&v)[V]) {
  constexpr int kBytes = V * static_cast<int>(sizeof(S));
  if constexpr (kBytes == 16 || kBytes == 8) {
    using Raw = std::conditional_t<kBytes == 16, uint4, uint2>;
    const Raw raw = *reinterpret_cast<const Raw*>(p);
    const S* e = reinterpret_cast<const S*>(&raw);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = static_cast<T>(e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = static_cast<T>(p[i]);
  }
}

// The same for a store, each value rounded to S.
template <int V, typename S, typename T>
__device__ __forceinline__ void store_vector(S* p, const T (&v)[V]) {
  constexpr int kBytes = V * static_cast<int>(sizeof(S));
  if constexpr (kBytes == 16 || kBytes == 8) {
    using Raw = std::conditional_t<kBytes == 16, uint4, uint2>;
    Raw raw;
    if constexpr (sizeof(S) == 2 && std::is_same_v<T, float>) {
      // Two values a word (Packed16): the same roundings, a conversion a pair.
      uint32_t* w = reinterpret_cast<uint32_t*>(&raw);
#pragma unroll
      for (int i = 0; i < V / 2; ++i) w[i] = Packed16<S>::pack(v[2 * i], v[2 * i + 1]);
    } else {
      S* e = reinterpret_cast<S*>(&raw);
#pragma unroll
      for (int i = 0; i < V; ++i) e[i] = static_cast<S>(v[i]);
    }
    // One vector store in the PTX itself: a plain assignment of `raw` came out as four 4-byte
    // stores where the kernel around it kept many registers live (model 39's resident kernel).
    // (__stwb's st.global.wb compiles to a strong store, not the plain one.)
    if constexpr (kBytes == 16) {
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(raw.x), "r"(raw.y),
                   "r"(raw.z), "r"(raw.w)
                   : "memory");
    } else {
      asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(raw.x), "r"(raw.y)
                   : "memory");
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) p[i] = static_cast<S>(v[i]);
  }
}

__device__ __forceinline__ bool is_finite(float v) { return isfinite(v); }
__device__ __forceinline__ bool is_finite(double v) { return isfinite(v); }

}  // namespace fusedops::cuda
