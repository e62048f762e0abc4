// y = x W^T: the mode choice, and the cuBLAS paths (SGEMM, TF32, bf16, 3xTF32).
//
// On Hopper, large float32 GEMMs run the 3xFP16 engine (gemm/gemm_3xfp16.h): fp16 tensor-core
// rate with in-register promotion, one W of fold memory. 3xTF32 below stays the float32-accurate
// tensor-core path elsewhere (A100-class GPUs, builds without the sm_90a kernels).
//
// Why 3xTF32: an SGEMM runs on the CUDA cores at ~50 TFLOP/s; TF32 tensor cores run at
// ~400 TFLOP/s but keep only 10 mantissa bits of each operand (relative error ~3e-4, which
// fails the float32 contract). Splitting each operand v = hi + lo with hi = tf32(v) and
// lo = v - hi, and computing hi*hi + hi*lo + lo*hi, restores ~21 bits per product.
//
// The tensor cores' own accumulation over a long K then limits accuracy (8.5e-5 measured when
// all of K runs in one GEMM), but only for the large hi*hi term: the cross terms are 2^-11
// smaller, so their accumulation error does not show. Hence two kinds of GEMM over one
// interleaved layout, chunk c of K holding [hi_c | lo_c] for x and [lo_c | hi_c] for W:
//   - cross terms: the full-width product x' . W'^T = sum_c x_hi_c W_lo_c + x_lo_c W_hi_c,
//   - main term: per chunk, the windows x_hi_c . W_hi_c, promoted into a float32 sum after
//     every chunk (the "promotion").
// The cross GEMM runs first, then the chunks one after another, cuBLAS adding each into y in
// float32 (beta = 1).
// The weight's split (twice its memory) is cached with the weight (common/fold_cache.h); the
// activation's split is redone per call.
//
// At most 4 rows of x (batch-1 serving) run a skinny kernel of our own instead (below).
#include "cuda/linear_gemm.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Exceptions.h>
#include <c10/cuda/CUDAException.h>

#include <cstdlib>
#include <cstring>

#include "common/fold_cache.h"
#include "cuda/cuda_helpers.cuh"
#include "cuda/gemm/gemm_3xfp16.h"
#include "cuda/gemm/gemm_half.h"

namespace fusedops::cuda {
namespace {

// K-chunk between float32 promotions of the main (hi*hi) term. 1024 keeps the error under
// SGEMM's at the default sizes (docs/PERFORMANCE.md); FUSEDOPS_3XTF32_CHUNK overrides it for
// tuning (a multiple of 32).
constexpr int64_t kDefaultChunk = 1024;
// Below these sizes SGEMM wins: small batches are bound by reading W (which 3xTF32 reads
// twice), and narrow outputs (model 98's folded N = 512) leave too few output tiles for the
// chunked GEMMs to fill the GPU; there SGEMM measured faster and more accurate
// (docs/PERFORMANCE.md).
constexpr int64_t kMin3xTf32M = 128;
constexpr int64_t kMin3xTf32N = 2048;
// The 3xFP16 engine pays two passes over x, reads W's fp16 pair 1.5 times (cross + main term)
// and launches five kernels: it measured faster than SGEMM and 3xTF32 at batch 1024 for all
// three models, model 98's N = 512 included (split-K; docs/PERFORMANCE.md). Few rows make the
// GEMM a read of W, where SGEMM reads W once: below 128 rows (not measured with the engine
// yet) or 2^30 FLOP the skinny kernel or SGEMM run, as before this engine.
constexpr int64_t kMin3xFp16M = 128;
constexpr double kMin3xFp16Flop = 1073741824.0;

int64_t chunk_size() {
  static const int64_t chunk = [] {
    const char* env = std::getenv("FUSEDOPS_3XTF32_CHUNK");
    const int64_t v = env ? std::atoll(env) : kDefaultChunk;
    TORCH_CHECK(v >= 32 && v % 32 == 0,
                "FUSEDOPS_3XTF32_CHUNK must be a positive multiple of 32, got ", env ? env : "");
    return v;
  }();
  return chunk;
}

// Which part goes first in each chunk: x stores [hi | lo], W stores [lo | hi].
enum class SplitOrder : bool { kHiFirst, kLoFirst };

__device__ __forceinline__ float round_to_tf32(float v) {
  uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(v));
  return __uint_as_float(bits);
}

constexpr int kSplitThreads = 256;

struct HiLo {
  float hi, lo;
};
__device__ __forceinline__ HiLo split_value(float v) {
  const float hi = round_to_tf32(v);
  return {hi, v - hi};  // v - hi is exact in float32
}

// src (rows, k) -> dst (rows, 2 * k_padded): chunk c of dst holds src's columns
// [c*chunk, (c+1)*chunk) twice, as hi then lo parts (or lo then hi); columns past k are zero.
// Each thread moves 4 consecutive columns (16-byte loads and stores when k allows; chunk is a
// multiple of 32, so the 4 never straddle a chunk). blockIdx.y walks the rows: no per-element
// 64-bit division by k.
__global__ void split_3xtf32_kernel(const float* __restrict__ src, float* __restrict__ dst,
                                    int64_t rows, int64_t k, int64_t k_padded, int chunk,
                                    SplitOrder order) {
  const bool hi_first = order == SplitOrder::kHiFirst;
  const bool vector_loads = k % 4 == 0 && is_16_byte_aligned(src);
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const float* s = src + row * k;
    float* d = dst + row * 2 * k_padded;
    for (int64_t col = 4 * (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x);
         col < k_padded; col += 4 * static_cast<int64_t>(gridDim.x) * blockDim.x) {
      float4 v;
      if (vector_loads && col < k) {
        v = *reinterpret_cast<const float4*>(s + col);
      } else {
        v.x = col < k ? s[col] : 0.0f;
        v.y = col + 1 < k ? s[col + 1] : 0.0f;
        v.z = col + 2 < k ? s[col + 2] : 0.0f;
        v.w = col + 3 < k ? s[col + 3] : 0.0f;
      }
      const HiLo a = split_value(v.x), b = split_value(v.y), c = split_value(v.z),
                 e = split_value(v.w);
      const float4 hi = {a.hi, b.hi, c.hi, e.hi};
      const float4 lo = {a.lo, b.lo, c.lo, e.lo};
      const int64_t chunk_index = col / chunk;
      float* out = d + chunk_index * 2 * chunk + (col - chunk_index * chunk);
      *reinterpret_cast<float4*>(out) = hi_first ? hi : lo;
      *reinterpret_cast<float4*>(out + chunk) = hi_first ? lo : hi;
    }
  }
}

at::Tensor split_3xtf32(const at::Tensor& src, SplitOrder order, int64_t chunk) {
  const int64_t rows = src.size(0), k = src.size(1);
  const int64_t k_padded = ceil_div(k, chunk) * chunk;
  at::Tensor dst = at::empty({rows, 2 * k_padded}, src.options());
  if (rows == 0 || k_padded == 0) return dst;
  dim3 grid(static_cast<unsigned>(std::min<int64_t>(ceil_div(k_padded, 4 * kSplitThreads), 64)),
            static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  split_3xtf32_kernel<<<grid, kSplitThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      src.data_ptr<float>(), dst.data_ptr<float>(), rows, k, k_padded, static_cast<int>(chunk),
      order);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return dst;
}

// Batch-1 serving (m <= 4 rows of x): y = x W^T is then bound by reading W once (268 MB at
// 8192 x 8192: 63 us at 4.2 TB/s), where cuBLAS's SGEMM measured ~2.8 TB/s. A warp owns two
// rows of W and its lanes stride along K with 16-byte loads (W streamed with an evict-first
// hint; x, at most 128 KB, re-read from L1/L2). Accuracy: a first version with one float
// chain per lane (K/32 terms) measured twice PyTorch's error at batch 1 (3.0e-7 against
// 1.7e-7), so each lane now sums kSkinnyFold 16-byte steps in float (one accumulator per
// component: 4-term chains), adds that into a double, and the warp reduces in double. Used at
// full precision and with TF32 allowed alike.
constexpr int kSkinnyThreads = 256;
constexpr int kSkinnyRowsPerWarp = 2;
constexpr int kSkinnyFold = 4;
constexpr int64_t kMaxSkinnyM = 4;

template <int kM>
__global__ void __launch_bounds__(kSkinnyThreads)
skinny_linear_kernel(const float* __restrict__ x, const float* __restrict__ w,
                     float* __restrict__ y, int64_t n, int64_t k) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warp = blockIdx.x * static_cast<int64_t>(kSkinnyThreads / kWarpSize) +
                       threadIdx.x / kWarpSize;
  const int64_t j0 = warp * kSkinnyRowsPerWarp;
  if (j0 >= n) return;
  const bool second = j0 + 1 < n;  // the last warp may own one row: it reads that row twice
  const float4* w0 = reinterpret_cast<const float4*>(w + j0 * k);
  const float4* w1 = reinterpret_cast<const float4*>(w + (second ? j0 + 1 : j0) * k);
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const int64_t k4 = k / 4;
  double total[kM][2];
#pragma unroll
  for (int r = 0; r < kM; ++r) total[r][0] = total[r][1] = 0.0;
  for (int64_t base = lane; base < k4; base += kWarpSize * kSkinnyFold) {
    float4 part[kM][2];
#pragma unroll
    for (int r = 0; r < kM; ++r) part[r][0] = part[r][1] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int u = 0; u < kSkinnyFold; ++u) {
      const int64_t q = base + static_cast<int64_t>(u) * kWarpSize;
      if (q < k4) {
        const float4 a = __ldcs(w0 + q);
        const float4 b = __ldcs(w1 + q);
#pragma unroll
        for (int r = 0; r < kM; ++r) {
          const float4 v = __ldg(x4 + r * k4 + q);
          float4& p = part[r][0];
          float4& t = part[r][1];
          p.x = fmaf(v.x, a.x, p.x); p.y = fmaf(v.y, a.y, p.y);
          p.z = fmaf(v.z, a.z, p.z); p.w = fmaf(v.w, a.w, p.w);
          t.x = fmaf(v.x, b.x, t.x); t.y = fmaf(v.y, b.y, t.y);
          t.z = fmaf(v.z, b.z, t.z); t.w = fmaf(v.w, b.w, t.w);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kM; ++r) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float4 p = part[r][c];
        total[r][c] += static_cast<double>((p.x + p.y) + (p.z + p.w));
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kM; ++r) {
    const double s0 = warp_sum(total[r][0]);
    const double s1 = warp_sum(total[r][1]);
    if (lane == 0) {
      y[r * n + j0] = static_cast<float>(s0);
      if (second) y[r * n + j0 + 1] = static_cast<float>(s1);
    }
  }
}

// The skinny kernel needs 16-byte rows: K a multiple of 4 and aligned base pointers (a
// contiguous view at an odd storage offset is not); otherwise cuBLAS runs.
bool can_run_skinny(const at::Tensor& x, const at::Tensor& weight) {
  return x.size(0) <= kMaxSkinnyM && x.size(1) % 4 == 0 && is_16_byte_aligned(x.data_ptr()) &&
         is_16_byte_aligned(weight.data_ptr());
}

void linear_nt_skinny(const at::Tensor& x, const at::Tensor& weight, at::Tensor& y) {
  const int64_t m = x.size(0), n = weight.size(0), k = x.size(1);
  const int64_t rows_per_block = kSkinnyRowsPerWarp * (kSkinnyThreads / kWarpSize);
  const dim3 grid(static_cast<unsigned>(ceil_div(n, rows_per_block)));
  auto kernel = m == 1   ? skinny_linear_kernel<1>
                : m == 2 ? skinny_linear_kernel<2>
                : m == 3 ? skinny_linear_kernel<3>
                         : skinny_linear_kernel<4>;
  kernel<<<grid, kSkinnyThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), weight.data_ptr<float>(), y.data_ptr<float>(), n, k);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

cudaDataType_t cuda_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return CUDA_R_32F;
    case at::kDouble: return CUDA_R_64F;
    case at::kHalf: return CUDA_R_16F;
    case at::kBFloat16: return CUDA_R_16BF;
    default: TORCH_CHECK(false, "fusedops linear_nt: unsupported dtype ", t);
  }
}

// Row-major y (m, n) = x (m, k) * w (n, k)^T is, in cuBLAS's column-major terms,
// y^T (n, m) = op_T(w) * x^T with leading dimensions ldw and ldx (elements).
void gemm_nt(cublasHandle_t handle, cublasComputeType_t compute, const void* w, int64_t ldw,
             const void* x, int64_t ldx, void* y, int64_t m, int64_t n, int64_t k,
             cudaDataType_t in_type, cudaDataType_t out_type, bool accumulate) {
  const float alpha_f = 1.0f, beta_f = accumulate ? 1.0f : 0.0f;
  const double alpha_d = 1.0, beta_d = accumulate ? 1.0 : 0.0;
  const bool is_double = compute == CUBLAS_COMPUTE_64F;
  TORCH_CUDABLAS_CHECK(cublasGemmEx(
      handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
      static_cast<int>(k), is_double ? static_cast<const void*>(&alpha_d) : &alpha_f, w, in_type,
      static_cast<int>(ldw), x, in_type, static_cast<int>(ldx),
      is_double ? static_cast<const void*>(&beta_d) : &beta_f, y, out_type, static_cast<int>(n),
      compute, CUBLAS_GEMM_DEFAULT));
}

// cuBLAS's math mode is handle state shared with PyTorch; pin it for our calls.
class MathModeGuard {
 public:
  MathModeGuard(cublasHandle_t handle, cublasMath_t mode) : handle_(handle) {
    TORCH_CUDABLAS_CHECK(cublasGetMathMode(handle_, &saved_));
    TORCH_CUDABLAS_CHECK(cublasSetMathMode(handle_, mode));
  }
  ~MathModeGuard() { cublasSetMathMode(handle_, saved_); }

 private:
  cublasHandle_t handle_;
  cublasMath_t saved_;
};

// weight_key: the caller's weight tensor, which owns the cached split (weight may be its
// contiguous copy).
void linear_nt_3xtf32(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_key,
                      bool cache_folds, at::Tensor& y) {
  const int64_t m = x.size(0), n = weight.size(0);
  const int64_t chunk = chunk_size();
  const at::Tensor w_split =
      fold_weights(FoldKind::kSplit3xTf32, chunk, {weight_key}, cache_folds, [&] {
        return FoldTensors{split_3xtf32(weight, SplitOrder::kLoFirst, chunk), at::Tensor()};
      })[0];
  const at::Tensor x_split = split_3xtf32(x, SplitOrder::kHiFirst, chunk);
  const int64_t ld = x_split.size(1);
  const int64_t chunks = ld / (2 * chunk);
  const float* w_lo_hi = w_split.data_ptr<float>();
  const float* x_hi_lo = x_split.data_ptr<float>();
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  MathModeGuard math(handle, CUBLAS_DEFAULT_MATH);
  gemm_nt(handle, CUBLAS_COMPUTE_32F_FAST_TF32, w_lo_hi, ld, x_hi_lo, ld, y.data_ptr(), m, n, ld,
          CUDA_R_32F, CUDA_R_32F, /*accumulate=*/false);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t offset = c * 2 * chunk;
    gemm_nt(handle, CUBLAS_COMPUTE_32F_FAST_TF32, w_lo_hi + offset + chunk, ld, x_hi_lo + offset,
            ld, y.data_ptr(), m, n, chunk, CUDA_R_32F, CUDA_R_32F, /*accumulate=*/true);
  }
}

}  // namespace

const char* to_string(Fp32GemmMode mode) {
  switch (mode) {
    case Fp32GemmMode::kIeee: return "ieee";
    case Fp32GemmMode::k3xFp16: return "3xfp16";
    case Fp32GemmMode::k3xTf32: return "3xtf32";
    case Fp32GemmMode::kTf32: return "tf32";
    case Fp32GemmMode::kBf16: return "bf16";
  }
  return "?";
}

Fp32GemmMode choose_fp32_gemm_mode(int64_t m, int64_t n, int64_t k) {
  const at::Float32Precision precision =
      at::globalContext().float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL);
  if (precision == at::Float32Precision::TF32) return Fp32GemmMode::kTf32;
  if (precision == at::Float32Precision::BF16) return Fp32GemmMode::kBf16;
  if (const char* forced = std::getenv("FUSEDOPS_FP32_GEMM")) {
    if (std::strcmp(forced, "ieee") == 0) return Fp32GemmMode::kIeee;
    if (std::strcmp(forced, "3xtf32") == 0) return Fp32GemmMode::k3xTf32;
    if (std::strcmp(forced, "3xfp16") == 0) {
      TORCH_CHECK(gemm::can_run_3xfp16(m, n, k),
                  "fusedops: FUSEDOPS_FP32_GEMM=3xfp16 needs an sm_90 GPU, a build with the sm_90a "
                  "kernels and N a multiple of 4, got m=", m, ", n=", n, ", k=", k);
      return Fp32GemmMode::k3xFp16;
    }
    TORCH_CHECK(std::strcmp(forced, "auto") == 0,
                "fusedops: FUSEDOPS_FP32_GEMM must be auto, ieee, 3xtf32 or 3xfp16, got ", forced);
  }
  const double flop = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (m >= kMin3xFp16M && flop >= kMin3xFp16Flop && gemm::can_run_3xfp16(m, n, k)) {
    return Fp32GemmMode::k3xFp16;
  }
  const bool large = m >= kMin3xTf32M && n >= kMin3xTf32N && k >= chunk_size();
  return large ? Fp32GemmMode::k3xTf32 : Fp32GemmMode::kIeee;
}

bool use_fused_half_gemm(const char* op, const at::Tensor& x, const at::Tensor& weight,
                         bool epilogue_ok) {
  TORCH_INTERNAL_ASSERT(x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16);
  const char* setting = std::getenv("FUSEDOPS_HALF_GEMM");
  const bool forced = setting && std::strcmp(setting, "fused") == 0;
  if (setting && !forced) {
    if (std::strcmp(setting, "cublas") == 0) return false;
    TORCH_CHECK(std::strcmp(setting, "auto") == 0,
                "fusedops: FUSEDOPS_HALF_GEMM must be auto, cublas or fused, got ", setting);
  }
  const int64_t m = x.size(0), n = weight.size(0), k = x.size(1);
  // TMA reads rows of 16-byte granules from 16-byte aligned addresses; the epilogue stores
  // pairs of channels (4 bytes).
  auto aligned = [](const at::Tensor& t, int64_t bytes) {
    return reinterpret_cast<uintptr_t>(t.data_ptr()) % bytes == 0;
  };
  const cudaDeviceProp* device = at::cuda::getCurrentDeviceProperties();
  const char* why_not = nullptr;
  if (!gemm::sm90_kernels_built()) {
    why_not = "this build has no sm_90a kernels";
  } else if (device->major != 9 || device->minor != 0) {
    why_not = "the device is not sm_90";
  } else if (!epilogue_ok) {
    why_not = "the operator's epilogue cannot take these sizes";
  } else if (k == 0 || k % 8 != 0 || !x.is_contiguous() || !weight.is_contiguous() ||
             !aligned(x, 16) || !aligned(weight, 16)) {
    why_not =
        "x and weight must be contiguous, 16-byte aligned, with in_features a positive multiple "
        "of 8";
  } else if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) {
    why_not = "sizes must fit 32 bits";
  }
  TORCH_CHECK(!forced || why_not == nullptr, "fusedops ", op,
              ": FUSEDOPS_HALF_GEMM=fused cannot run here: ", why_not, " (got m=", m, ", n=", n,
              ", k=", k, ")");
  if (why_not != nullptr) return false;
  if (forced) return true;
  const int64_t tiles =
      ceil_div(m, int64_t{gemm::kHalfTileM}) * ceil_div(n, int64_t{gemm::kHalfTileN});
  return tiles >= device->multiProcessorCount;
}

at::Tensor linear_nt(const at::Tensor& x_any, const at::Tensor& weight_any, bool cache_folds) {
  TORCH_INTERNAL_ASSERT(x_any.scalar_type() == weight_any.scalar_type());
  const at::Tensor x = x_any.contiguous();
  const at::Tensor weight = weight_any.contiguous();
  const int64_t m = x.size(0), n = weight.size(0), k = x.size(1);
  const bool is_double = x.scalar_type() == at::kDouble;
  at::Tensor y = at::empty({m, n}, x.options().dtype(is_double ? at::kDouble : at::kFloat));
  if (m == 0 || n == 0) return y;
  if (k == 0) return y.zero_();
  TORCH_CHECK(m <= INT32_MAX && n <= INT32_MAX && 2 * k + 2 * chunk_size() <= INT32_MAX,
              "fusedops: GEMM sizes must fit cuBLAS's 32-bit dimensions, got m=", m, ", n=", n,
              ", k=", k);
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  const cudaDataType_t in_type = cuda_type(x.scalar_type());
  if (is_double) {
    gemm_nt(handle, CUBLAS_COMPUTE_64F, weight.data_ptr(), k, x.data_ptr(), k, y.data_ptr(), m,
            n, k, in_type, CUDA_R_64F, false);
    return y;
  }
  if (x.scalar_type() != at::kFloat) {  // float16 / bfloat16 operands, float32 accumulation
    MathModeGuard math(handle, CUBLAS_DEFAULT_MATH);
    gemm_nt(handle, CUBLAS_COMPUTE_32F, weight.data_ptr(), k, x.data_ptr(), k, y.data_ptr(), m,
            n, k, in_type, CUDA_R_32F, false);
    return y;
  }
  const Fp32GemmMode mode = choose_fp32_gemm_mode(m, n, k);
  if ((mode == Fp32GemmMode::kIeee || mode == Fp32GemmMode::kTf32) && can_run_skinny(x, weight)) {
    linear_nt_skinny(x, weight, y);
    return y;
  }
  switch (mode) {
    case Fp32GemmMode::k3xFp16:
      if (gemm::linear_nt_3xfp16(x, weight, weight_any, cache_folds, y)) break;
      // The weight failed the engine's range check (inf/nan, or rows far below its largest):
      // the exact path, plain float32 SGEMM, with IEEE inf/nan semantics.
      {
        MathModeGuard math(handle, CUBLAS_DEFAULT_MATH);
        gemm_nt(handle, CUBLAS_COMPUTE_32F, weight.data_ptr(), k, x.data_ptr(), k, y.data_ptr(),
                m, n, k, CUDA_R_32F, CUDA_R_32F, false);
      }
      break;
    case Fp32GemmMode::k3xTf32:
      linear_nt_3xtf32(x, weight, weight_any, cache_folds, y);
      break;
    case Fp32GemmMode::kTf32:
      // The user allowed TF32: this is then the very GEMM PyTorch's own matmul runs (cuBLASLt
      // with its heuristics), which measured a few percent faster than cublasGemmEx's choice.
      at::mm_out(y, x, weight.t());
      break;
    case Fp32GemmMode::kBf16:
      gemm_nt(handle, CUBLAS_COMPUTE_32F_FAST_16BF, weight.data_ptr(), k, x.data_ptr(), k,
              y.data_ptr(), m, n, k, CUDA_R_32F, CUDA_R_32F, false);
      break;
    case Fp32GemmMode::kIeee: {
      MathModeGuard math(handle, CUBLAS_DEFAULT_MATH);
      gemm_nt(handle, CUBLAS_COMPUTE_32F, weight.data_ptr(), k, x.data_ptr(), k, y.data_ptr(), m,
              n, k, CUDA_R_32F, CUDA_R_32F, false);
      break;
    }
  }
  return y;
}

}  // namespace fusedops::cuda
