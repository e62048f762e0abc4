// The GEMM behind every fused operator: y = x W^T, written in the accumulation dtype
// (float32, or float64 for float64 inputs) so that the fused epilogues see unrounded values.
#pragma once

#include <ATen/core/Tensor.h>

namespace fusedops::cuda {

// How a float32 GEMM runs.
enum class Fp32GemmMode {
  kIeee,     // plain float32 SGEMM on the CUDA cores
  k3xFp16,   // float32-accurate on Hopper: three fp16 products with promotion (gemm/)
  k3xTf32,   // float32-accurate: three TF32 products on the tensor cores (see linear_gemm.cu)
  kTf32,     // one TF32 product: only when the user allowed it (precision "high"/"medium")
  kBf16,     // bfloat16 products: only when the user asked for fp32_precision="bf16"
};

const char* to_string(Fp32GemmMode mode);

// The mode for an (m x k) * (k x n) float32 GEMM: reads ATen's global float32 matmul
// precision (torch.set_float32_matmul_precision / torch.backends.cuda.matmul.fp32_precision)
// so that C++ callers and Python callers get the same behaviour; at full precision picks
// 3xFP16 (Hopper), 3xTF32 or SGEMM by size. FUSEDOPS_FP32_GEMM=ieee|3xtf32|3xfp16 overrides the
// full-precision choice (3xfp16 where it cannot run is an error, not a silent fallback).
Fp32GemmMode choose_fp32_gemm_mode(int64_t m, int64_t n, int64_t k);

// y (M, N) = x (M, K) * weight (N, K)^T. x and weight: same floating dtype, on the current CUDA
// device (made contiguous here). y is float32 for float32/float16/bfloat16 inputs (float32
// accumulation) and float64 for float64 inputs. The weight's preparation for the GEMM (the
// 3xFP16 or 3xTF32 split) is a fold cached on `weight` itself (common/fold_cache.h) when
// cache_folds.
at::Tensor linear_nt(const at::Tensor& x, const at::Tensor& weight, bool cache_folds);

// Whether a float16/bfloat16 operator runs its GEMM with its epilogue fused (gemm/gemm_half.h)
// instead of linear_nt followed by its own epilogue kernel. `epilogue_ok`: the operator's
// epilogue can take these sizes (e.g. model 62's group size); the operands' own requirements
// (sm_90 device with this build's kernels, TMA-aligned x and weight, 32-bit sizes) are checked
// here. FUSEDOPS_HALF_GEMM=auto (default: when possible and the output tiles fill the GPU:
// fewer would leave SMs idle, where cuBLAS splits K), cublas (never), fused (always; where it
// cannot run, an error naming why, never a silent fallback).
bool use_fused_half_gemm(const char* op, const at::Tensor& x, const at::Tensor& weight,
                         bool epilogue_ok);

}  // namespace fusedops::cuda
