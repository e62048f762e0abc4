// Argument contracts of every fusedops operator, written once and called at the top of each
// backend's host function (CPU, CUDA, Meta). Sizes are read as SymInts so the same checks
// run under torch.compile / torch.export with a dynamic batch dimension.
//
// Every failure throws c10::Error with "<op>: <tensor> must be <expected>, got <actual>".
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace fusedops::checks {

// t is float32, float64, float16 or bfloat16.
void floating(const char* op, const char* name, const at::Tensor& t);
// t.dim() == dim; `layout` names the dims for the message, e.g. "(batch, in_features)".
void dim(const char* op, const char* name, const at::Tensor& t, int64_t dim, const char* layout);
// t has the dtype / device of `ref` (named ref_name in the message: x, or weight for the folds).
void same_dtype(const char* op, const char* name, const at::Tensor& t, const at::Tensor& ref,
                const char* ref_name = "x");
void same_device(const char* op, const char* name, const at::Tensor& t, const at::Tensor& ref,
                 const char* ref_name = "x");
// t is 1-D with `size` elements; `what` says what the size is, e.g. "out_features".
void vector_of(const char* op, const char* name, const at::Tensor& t, const c10::SymInt& size,
               const char* what);

// x (B, in), weight (out, in), bias (out,): floating, one dtype, one device.
void linear(const char* op, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// The autocast form of models 39 and 62, what their CUDA Autocast kernels pass
// (ops/autocast/): x and weight float16/bfloat16 on CUDA, bias and every parameter after the
// Linear float32, the result float32 (the reference's dtype under torch.autocast). Returns the
// dtype those parameters (and the result) must have: float32 in the autocast form, else x's.
at::ScalarType params_dtype(const at::Tensor& x, const at::Tensor& bias);
// t's dtype is `dtype` (params_dtype's): "<op>: <name> must have the same dtype as x (...)",
// or "<name> must be float32 (the autocast form: ...)".
void params_dtype_is(const char* op, const char* name, const at::Tensor& t, const at::Tensor& x,
                     at::ScalarType dtype);

// t is not an inference tensor (made under torch.inference_mode()): what an Autograd kernel
// must check, before its kernel runs, of every tensor that autograd will save for backward or
// version as updated in place, since autograd's own refusal comes after the kernel ran.
void not_inference(const char* op, const char* name, const at::Tensor& t);

// Per-operator contracts.
void matmul_avgpool_gelu_scale_max(const at::Tensor& x, const at::Tensor& weight,
                                   const at::Tensor& bias, int64_t pool_kernel_size);
void matmul_sum_max_avgpool_logsumexp_logsumexp(const at::Tensor& x, const at::Tensor& weight,
                                                const at::Tensor& bias);
void gemm_scale_batchnorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                          const at::Tensor& scale, const at::Tensor& bn_weight,
                          const at::Tensor& bn_bias, const at::Tensor& running_mean,
                          const at::Tensor& running_var, const at::Tensor& num_batches_tracked,
                          bool training, double eps);
void matmul_groupnorm_leakyrelu_sum(const at::Tensor& x, const at::Tensor& weight,
                                    const at::Tensor& bias, int64_t num_groups,
                                    const at::Tensor& gn_weight, const at::Tensor& gn_bias);
void avgpool_fold_linear(const at::Tensor& weight, const at::Tensor& bias,
                         int64_t pool_kernel_size);
void sum_fold_linear(const at::Tensor& weight, const at::Tensor& bias);
void gemm_nt(const at::Tensor& a, const at::Tensor& b);
void groupnorm_leakyrelu_sum_backward(const at::Tensor& grad_out, const at::Tensor& y,
                                       const at::Tensor& gn_weight, const at::Tensor& gn_bias,
                                       int64_t num_groups);
void avgpool_gelu_scale_max_backward(const at::Tensor& grad_out, const at::Tensor& pooled,
                                     const at::Tensor& x, const at::Tensor& pooled_weight,
                                     int64_t pool_kernel_size, int64_t out_features);

}  // namespace fusedops::checks
