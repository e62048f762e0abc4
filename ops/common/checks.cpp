#include "common/checks.h"

#include <c10/util/Exception.h>

#include <utility>

namespace fusedops::checks {

void floating(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK(t.defined(), op, ": ", name, " must be a defined tensor, got None/undefined");
  const at::ScalarType s = t.scalar_type();
  TORCH_CHECK(s == at::kFloat || s == at::kDouble || s == at::kHalf || s == at::kBFloat16, op,
              ": ", name, " must be a floating-point tensor (float32, float64, float16 or "
              "bfloat16), got ", s);
}

void dim(const char* op, const char* name, const at::Tensor& t, int64_t dim, const char* layout) {
  TORCH_CHECK(t.dim() == dim, op, ": ", name, " must be a ", dim, "-D tensor ", layout, ", got a ",
              t.dim(), "-D tensor of shape ", t.sym_sizes());
}

void same_dtype(const char* op, const char* name, const at::Tensor& t, const at::Tensor& ref,
                const char* ref_name) {
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), op, ": ", name, " must have the same dtype as ",
              ref_name, " (", ref.scalar_type(), "), got ", t.scalar_type());
}

void same_device(const char* op, const char* name, const at::Tensor& t, const at::Tensor& ref,
                 const char* ref_name) {
  TORCH_CHECK(t.device() == ref.device(), op, ": ", name, " must be on the same device as ",
              ref_name, " (", ref.device(), "), got ", t.device());
}

void vector_of(const char* op, const char* name, const at::Tensor& t, const c10::SymInt& size,
               const char* what) {
  TORCH_CHECK(t.dim() == 1 && t.sym_size(0) == size, op, ": ", name, " must have shape [", size,
              "] (", what, "), got shape ", t.sym_sizes());
}

void not_inference(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK(!t.defined() || !t.is_inference(), op, ": ", name,
              " must not be an inference tensor when autograd records the call (it is saved "
              "for backward or updated in place; clone it, or call under torch.no_grad() or "
              "torch.inference_mode()), got an inference tensor (created under "
              "torch.inference_mode())");
}

namespace {

// x, weight, bias: everything linear() checks but the bias's dtype.
void linear_shapes(const char* op, const at::Tensor& x, const at::Tensor& weight,
                   const at::Tensor& bias) {
  floating(op, "x", x);
  floating(op, "weight", weight);
  floating(op, "bias", bias);
  dim(op, "x", x, 2, "(batch, in_features)");
  dim(op, "weight", weight, 2, "(out_features, in_features)");
  TORCH_CHECK(x.sym_size(1) == weight.sym_size(1), op, ": x must have ", weight.sym_size(1),
              " columns (in_features of weight ", weight.sym_sizes(), "), got ", x.sym_size(1),
              " (x has shape ", x.sym_sizes(), ")");
  vector_of(op, "bias", bias, weight.sym_size(0), "out_features");
  same_dtype(op, "weight", weight, x);
  same_device(op, "weight", weight, x);
  same_device(op, "bias", bias, x);
}

// weight (out, in) and bias (out,) of a fold helper: floating, one dtype, one device.
void fold_weight_and_bias(const char* op, const at::Tensor& weight, const at::Tensor& bias) {
  floating(op, "weight", weight);
  floating(op, "bias", bias);
  dim(op, "weight", weight, 2, "(out_features, in_features)");
  vector_of(op, "bias", bias, weight.sym_size(0), "out_features");
  same_dtype(op, "bias", bias, weight, "weight");
  same_device(op, "bias", bias, weight, "weight");
}

bool is_autocast_form(const at::Tensor& x, const at::Tensor& bias) {
  const bool half = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
  // Meta: the shapes of a CUDA call traced by torch.compile / torch.export.
  const bool cuda = x.is_cuda() || x.is_meta();
  return half && cuda && bias.scalar_type() == at::kFloat;
}

// A per-feature parameter after the Linear (BatchNorm's, GroupNorm's): `size` long (`what`),
// of params_dtype's dtype, on x's device.
void parameter(const char* op, const char* name, const at::Tensor& t, const c10::SymInt& size,
               const char* what, const at::Tensor& x, at::ScalarType dtype) {
  floating(op, name, t);
  vector_of(op, name, t, size, what);
  params_dtype_is(op, name, t, x, dtype);
  same_device(op, name, t, x);
}

}  // namespace

void linear(const char* op, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  linear_shapes(op, x, weight, bias);
  same_dtype(op, "bias", bias, x);
}

at::ScalarType params_dtype(const at::Tensor& x, const at::Tensor& bias) {
  return is_autocast_form(x, bias) ? at::kFloat : x.scalar_type();
}

void params_dtype_is(const char* op, const char* name, const at::Tensor& t, const at::Tensor& x,
                     at::ScalarType dtype) {
  if (dtype == x.scalar_type()) {
    same_dtype(op, name, t, x);
    return;
  }
  TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, " must be float32 in the autocast form "
              "(x and weight ", x.scalar_type(), ", bias float32: what torch.autocast passes), got ",
              t.scalar_type());
}

void matmul_avgpool_gelu_scale_max(const at::Tensor& x, const at::Tensor& weight,
                                   const at::Tensor& bias, int64_t pool_kernel_size) {
  constexpr const char* op = "matmul_avgpool_gelu_scale_max";
  linear(op, x, weight, bias);
  TORCH_CHECK(pool_kernel_size > 0, op, ": pool_kernel_size must be greater than zero, got ",
              pool_kernel_size);
  // AvgPool1d floors: a width smaller than the window leaves nothing for the max to reduce.
  TORCH_CHECK(weight.sym_size(0) >= pool_kernel_size, op,
              ": out_features must be at least pool_kernel_size (the pooled width is "
              "floor(out_features / pool_kernel_size) and max over an empty dim is undefined), "
              "got out_features=", weight.sym_size(0), ", pool_kernel_size=", pool_kernel_size);
}

void matmul_sum_max_avgpool_logsumexp_logsumexp(const at::Tensor& x, const at::Tensor& weight,
                                                const at::Tensor& bias) {
  linear("matmul_sum_max_avgpool_logsumexp_logsumexp", x, weight, bias);
}

void gemm_scale_batchnorm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                          const at::Tensor& scale, const at::Tensor& bn_weight,
                          const at::Tensor& bn_bias, const at::Tensor& running_mean,
                          const at::Tensor& running_var, const at::Tensor& num_batches_tracked,
                          bool training, double eps) {
  constexpr const char* op = "gemm_scale_batchnorm";
  linear_shapes(op, x, weight, bias);
  const at::ScalarType dtype = params_dtype(x, bias);
  params_dtype_is(op, "bias", bias, x, dtype);
  // As torch.nn.functional.batch_norm (a ValueError there too): eps keeps the normalization
  // away from a division by zero. Written so that NaN passes, as it does there.
  TORCH_CHECK_VALUE(!(eps <= 0.0), op, ": eps must be positive, got ", eps);
  const c10::SymInt& batch = x.sym_size(0);
  const c10::SymInt& out = weight.sym_size(0);
  floating(op, "scale", scale);
  params_dtype_is(op, "scale", scale, x, dtype);
  same_device(op, "scale", scale, x);
  // scale multiplies the (batch, out_features) GEMM output and must broadcast to it without
  // changing its shape: (), (1,), (out,), (1, out), (batch, 1) or (batch, out).
  const int64_t scale_dim = scale.dim();
  TORCH_CHECK(scale_dim <= 2 &&
                  (scale_dim < 1 || scale.sym_size(-1) == 1 || scale.sym_size(-1) == out) &&
                  (scale_dim < 2 || scale.sym_size(0) == 1 || scale.sym_size(0) == batch),
              op, ": scale must broadcast to (batch, out_features) = (", batch, ", ", out,
              "), got shape ", scale.sym_sizes());
  parameter(op, "bn_weight", bn_weight, out, "out_features", x, dtype);
  parameter(op, "bn_bias", bn_bias, out, "out_features", x, dtype);
  parameter(op, "running_mean", running_mean, out, "out_features", x, dtype);
  parameter(op, "running_var", running_var, out, "out_features", x, dtype);
  TORCH_CHECK(num_batches_tracked.defined() && num_batches_tracked.dim() == 0 &&
                  num_batches_tracked.scalar_type() == at::kLong,
              op, ": num_batches_tracked must be a 0-D int64 tensor, got ",
              num_batches_tracked.defined() ? num_batches_tracked.toString() : "undefined",
              " of shape ", num_batches_tracked.sym_sizes());
  same_device(op, "num_batches_tracked", num_batches_tracked, x);
  // Same rule as BatchNorm: one sample has no variance.
  TORCH_CHECK(!training || batch != 1, op,
              ": x must have more than 1 row in training mode (batch statistics need at least 2 "
              "samples), got batch size 1 (x has shape ", x.sym_sizes(), ")");
}

void matmul_groupnorm_leakyrelu_sum(const at::Tensor& x, const at::Tensor& weight,
                                    const at::Tensor& bias, int64_t num_groups,
                                    const at::Tensor& gn_weight, const at::Tensor& gn_bias) {
  constexpr const char* op = "matmul_groupnorm_leakyrelu_sum";
  linear_shapes(op, x, weight, bias);
  const at::ScalarType dtype = params_dtype(x, bias);
  params_dtype_is(op, "bias", bias, x, dtype);
  const c10::SymInt& hidden = weight.sym_size(0);
  TORCH_CHECK(num_groups > 0, op, ": num_groups must be greater than zero, got ", num_groups);
  TORCH_CHECK(hidden % num_groups == 0, op,
              ": num_groups must divide hidden_size (out_features of weight), got num_groups=",
              num_groups, ", hidden_size=", hidden);
  // GroupNorm's own rule: a (sample, group) segment of one value has no variance.
  TORCH_CHECK(x.sym_size(0) * (hidden / num_groups) != 1, op,
              ": x must give more than 1 value per group (batch * hidden_size / num_groups), got "
              "batch 1 with groups of 1 channel (x has shape ", x.sym_sizes(), ", num_groups=",
              num_groups, ")");
  parameter(op, "gn_weight", gn_weight, hidden, "hidden_size", x, dtype);
  parameter(op, "gn_bias", gn_bias, hidden, "hidden_size", x, dtype);
}

void avgpool_fold_linear(const at::Tensor& weight, const at::Tensor& bias,
                         int64_t pool_kernel_size) {
  constexpr const char* op = "avgpool_fold_linear";
  fold_weight_and_bias(op, weight, bias);
  TORCH_CHECK(pool_kernel_size > 0, op, ": pool_kernel_size must be greater than zero, got ",
              pool_kernel_size);
  TORCH_CHECK(weight.sym_size(0) >= pool_kernel_size, op,
              ": out_features must be at least pool_kernel_size, got out_features=",
              weight.sym_size(0), ", pool_kernel_size=", pool_kernel_size);
}

void sum_fold_linear(const at::Tensor& weight, const at::Tensor& bias) {
  fold_weight_and_bias("sum_fold_linear", weight, bias);
}

void gemm_nt(const at::Tensor& a, const at::Tensor& b) {
  constexpr const char* op = "gemm_nt";
  floating(op, "a", a);
  floating(op, "b", b);
  dim(op, "a", a, 2, "(m, k)");
  dim(op, "b", b, 2, "(n, k)");
  TORCH_CHECK(a.sym_size(1) == b.sym_size(1), op, ": a must have ", b.sym_size(1),
              " columns (k, the columns of b ", b.sym_sizes(), "), got ", a.sym_size(1),
              " (a has shape ", a.sym_sizes(), ")");
  same_dtype(op, "b", b, a, "a");
  same_device(op, "b", b, a, "a");
}

void groupnorm_leakyrelu_sum_backward(const at::Tensor& grad_out, const at::Tensor& y,
                                       const at::Tensor& gn_weight, const at::Tensor& gn_bias,
                                       int64_t num_groups) {
  constexpr const char* op = "groupnorm_leakyrelu_sum_backward";
  floating(op, "y", y);
  dim(op, "y", y, 2, "(batch, hidden_size)");
  floating(op, "grad_out", grad_out);
  TORCH_CHECK(grad_out.sym_sizes() == y.sym_sizes(), op, ": grad_out must have y's shape ",
              y.sym_sizes(), ", got ", grad_out.sym_sizes());
  same_dtype(op, "grad_out", grad_out, y, "y");
  same_device(op, "grad_out", grad_out, y, "y");
  const c10::SymInt& hidden = y.sym_size(1);
  TORCH_CHECK(num_groups > 0, op, ": num_groups must be greater than zero, got ", num_groups);
  TORCH_CHECK(hidden % num_groups == 0, op,
              ": num_groups must divide hidden_size (the columns of y), got num_groups=",
              num_groups, ", hidden_size=", hidden);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor&>{"gn_weight", gn_weight},
                                {"gn_bias", gn_bias}}) {
    floating(op, name, t);
    vector_of(op, name, t, hidden, "hidden_size");
    same_dtype(op, name, t, y, "y");
    same_device(op, name, t, y, "y");
  }
}

void avgpool_gelu_scale_max_backward(const at::Tensor& grad_out, const at::Tensor& pooled,
                                     const at::Tensor& x, const at::Tensor& pooled_weight,
                                     int64_t pool_kernel_size, int64_t out_features) {
  constexpr const char* op = "avgpool_gelu_scale_max_backward";
  floating(op, "x", x);
  dim(op, "x", x, 2, "(batch, in_features)");
  TORCH_CHECK(pool_kernel_size > 0, op, ": pool_kernel_size must be greater than zero, got ",
              pool_kernel_size);
  TORCH_CHECK(out_features >= pool_kernel_size, op,
              ": out_features must be at least pool_kernel_size (", pool_kernel_size,
              ": one pooling window), got ", out_features);
  const int64_t windows = out_features / pool_kernel_size;
  floating(op, "pooled_weight", pooled_weight);
  dim(op, "pooled_weight", pooled_weight, 2, "(out_features / pool_kernel_size, in_features)");
  TORCH_CHECK(pooled_weight.sym_size(0) == windows && pooled_weight.sym_size(1) == x.sym_size(1),
              op, ": pooled_weight must have shape [", windows, ", ", x.sym_size(1),
              "] (out_features / pool_kernel_size, in_features), got ",
              pooled_weight.sym_sizes());
  floating(op, "pooled", pooled);
  dim(op, "pooled", pooled, 2, "(batch, out_features / pool_kernel_size)");
  TORCH_CHECK(pooled.sym_size(0) == x.sym_size(0) && pooled.sym_size(1) == windows, op,
              ": pooled must have shape [", x.sym_size(0), ", ", windows,
              "] (batch, out_features / pool_kernel_size), got ", pooled.sym_sizes());
  floating(op, "grad_out", grad_out);
  vector_of(op, "grad_out", grad_out, x.sym_size(0), "batch");
  const std::pair<const char*, const at::Tensor&> tensors[] = {
      {"grad_out", grad_out}, {"pooled", pooled}, {"pooled_weight", pooled_weight}};
  for (const auto& [name, t] : tensors) {
    same_dtype(op, name, t, x);
    same_device(op, name, t, x);
  }
}

}  // namespace fusedops::checks
