#include "cuda/gemm/cublas.h"

#include <ATen/ATen.h>
#include <ATen/cuda/Exceptions.h>

namespace fusedops::cuda::gemm {
namespace {

cudaDataType_t cuda_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return CUDA_R_32F;
    case at::kDouble: return CUDA_R_64F;
    case at::kHalf: return CUDA_R_16F;
    case at::kBFloat16: return CUDA_R_16BF;
    default: TORCH_CHECK(false, "fusedops cuBLAS engine: unsupported dtype ", t);
  }
}

}  // namespace

MathModeGuard::MathModeGuard(cublasHandle_t handle, cublasMath_t mode) : handle_(handle) {
  TORCH_CUDABLAS_CHECK(cublasGetMathMode(handle_, &saved_));
  TORCH_CUDABLAS_CHECK(cublasSetMathMode(handle_, mode));
}

MathModeGuard::~MathModeGuard() { cublasSetMathMode(handle_, saved_); }

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

void cublas_linear(const at::Tensor& x, const at::Tensor& weight, at::Tensor& y, CublasMath math) {
  const int64_t m = x.size(0), n = weight.size(0), k = x.size(1);
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  const cudaDataType_t in_type = cuda_type(x.scalar_type());
  switch (math) {
    case CublasMath::kDouble:
      gemm_nt(handle, CUBLAS_COMPUTE_64F, weight.data_ptr(), k, x.data_ptr(), k, y.data_ptr(), m,
              n, k, in_type, CUDA_R_64F, false);
      return;
    case CublasMath::kFastBf16:
      gemm_nt(handle, CUBLAS_COMPUTE_32F_FAST_16BF, weight.data_ptr(), k, x.data_ptr(), k,
              y.data_ptr(), m, n, k, CUDA_R_32F, CUDA_R_32F, false);
      return;
    case CublasMath::kIeee:
    case CublasMath::kHalf: {
      const MathModeGuard mode(handle, CUBLAS_DEFAULT_MATH);
      gemm_nt(handle, CUBLAS_COMPUTE_32F, weight.data_ptr(), k, x.data_ptr(), k, y.data_ptr(), m,
              n, k, in_type, CUDA_R_32F, false);
      return;
    }
  }
}

void aten_tf32_linear(const at::Tensor& x, const at::Tensor& weight, at::Tensor& y) {
  at::mm_out(y, x, weight.t());
}

}  // namespace fusedops::cuda::gemm
