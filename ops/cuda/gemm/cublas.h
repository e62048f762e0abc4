// The cuBLAS engine: y = x W^T through cublasGemmEx in the math the route asks for, and the
// pieces the 3xTF32 engine builds on (the raw call, the math-mode guard).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>

namespace fusedops::cuda::gemm {

enum class CublasMath {
  kIeee,      // float32 SGEMM on the CUDA cores
  kFastBf16,  // float32 operands as bfloat16 products (fp32_precision "bf16" only)
  kHalf,      // float16/bfloat16 operands, float32 accumulation
  kDouble,    // float64
};

// y (M, N) = x (M, K) W (N, K)^T, all contiguous on the current device: y float32 for float32,
// float16 and bfloat16 operands, float64 for float64 ones.
void cublas_linear(const at::Tensor& x, const at::Tensor& weight, at::Tensor& y, CublasMath math);

// TF32 allowed by the user: the very GEMM PyTorch's own matmul runs (cuBLASLt with its
// heuristics), which measured a few percent faster than cublasGemmEx's choice.
void aten_tf32_linear(const at::Tensor& x, const at::Tensor& weight, at::Tensor& y);

// Row-major y (m, n) = x (m, k) w (n, k)^T with leading dimensions ldw and ldx (elements),
// cuBLAS's column-major y^T = op_T(w) x^T. accumulate: y += instead of y =.
void gemm_nt(cublasHandle_t handle, cublasComputeType_t compute, const void* w, int64_t ldw,
             const void* x, int64_t ldx, void* y, int64_t m, int64_t n, int64_t k,
             cudaDataType_t in_type, cudaDataType_t out_type, bool accumulate);

// cuBLAS's math mode is handle state shared with PyTorch; pin it for our calls.
class MathModeGuard {
 public:
  MathModeGuard(cublasHandle_t handle, cublasMath_t mode);
  ~MathModeGuard();
  MathModeGuard(const MathModeGuard&) = delete;
  MathModeGuard& operator=(const MathModeGuard&) = delete;

 private:
  cublasHandle_t handle_;
  cublasMath_t saved_;
};

}  // namespace fusedops::cuda::gemm
