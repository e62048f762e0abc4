// fusedops public C++ API.
//
// Each function calls the registered operator through the PyTorch dispatcher, so the same
// call runs the CPU or CUDA kernel (and autograd, where registered) exactly as
// torch.ops.fusedops.<name> does from Python. Link against libfusedops (CMake:
// find_package(fusedops) and fusedops::fusedops).
#pragma once

#include <ATen/core/Tensor.h>

#include <c10/util/string_view.h>

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace fusedops {

// Version string of the library, e.g. "0.1.0".
const char* version();

// Every model operator takes cache_folds, whether to reuse the weight folds it derives from the
// weights (model 98's pooled Linear, model 18's column sums, the GEMM engines' splits of W)
// while the weights' version counters say they are unchanged: true always does (ModelNew passes
// it); false computes them afresh on every call (exact, uncached), for hosts that write weights
// behind PyTorch's back; nullopt (the default) does too, except in a call that autograd records
// with a weight that requires grad (a gradient check perturbs weights through .data), which
// folds afresh. The rules: ops/common/fold_cache.h.
//
// Every model operator also takes numerics: "accurate" (the default) keeps intermediates in the
// accumulation dtype (float32 for float16/bfloat16 models) and rounds only the result; "eager"
// rounds each intermediate to the model's dtype where the reference's own ops write it, to
// match a reference run in float16/bfloat16 (docs/MODELS.md). Other values throw. float32 and
// float64 models compute the same either way.

// Model 98: max_j( scale_factor * gelu( avg_pool_k(x W^T + b) )_j ), x: (B, in) -> (B,).
at::Tensor matmul_avgpool_gelu_scale_max(const at::Tensor& x, const at::Tensor& weight,
                                         const at::Tensor& bias, int64_t pool_kernel_size,
                                         double scale_factor, std::optional<bool> cache_folds = std::nullopt,
                                         c10::string_view numerics = "accurate");

// Model 18: sum_j (x W^T + b)_j; the max/mean/logsumexp chain over a size-1 dim is identity.
// x: (B, in) -> (B, 1).
at::Tensor matmul_sum_max_avgpool_logsumexp_logsumexp(const at::Tensor& x,
                                                      const at::Tensor& weight,
                                                      const at::Tensor& bias,
                                                      std::optional<bool> cache_folds = std::nullopt,
                                                      c10::string_view numerics = "accurate");

// Model 39: BatchNorm1d((x W^T + b) * scale). In training mode uses batch statistics and
// updates running_mean, running_var and num_batches_tracked in place (momentum = nullopt
// means a cumulative average, as in BatchNorm). x: (B, in) -> (B, out).
at::Tensor gemm_scale_batchnorm(const at::Tensor& x, const at::Tensor& weight,
                                const at::Tensor& bias, const at::Tensor& scale,
                                const at::Tensor& bn_weight, const at::Tensor& bn_bias,
                                at::Tensor& running_mean, at::Tensor& running_var,
                                at::Tensor& num_batches_tracked, bool training,
                                std::optional<double> momentum, double eps,
                                std::optional<bool> cache_folds = std::nullopt,
                                c10::string_view numerics = "accurate");

// Model 62: 2 * leaky_relu(GroupNorm(x W^T + b)). x: (B, input) -> (B, hidden).
at::Tensor matmul_groupnorm_leakyrelu_sum(const at::Tensor& x, const at::Tensor& weight,
                                          const at::Tensor& bias, int64_t num_groups,
                                          const at::Tensor& gn_weight, const at::Tensor& gn_bias,
                                          double eps, double negative_slope,
                                          std::optional<bool> cache_folds = std::nullopt,
                                          c10::string_view numerics = "accurate");

// Helper: a Linear followed by AvgPool1d(k) is the Linear whose rows (and bias entries) are
// the means of each k consecutive rows; the last out % k rows are dropped.
// Returns (pooled_weight (out/k, in), pooled_bias (out/k,)).
std::tuple<at::Tensor, at::Tensor> avgpool_fold_linear(const at::Tensor& weight,
                                                       const at::Tensor& bias,
                                                       int64_t pool_kernel_size);

// Helper: sum over the outputs of a Linear is a dot product with the column sums of W.
// Returns (column_sums (in,), bias_sum ()).
std::tuple<at::Tensor, at::Tensor> sum_fold_linear(const at::Tensor& weight,
                                                   const at::Tensor& bias);

// Helper: a b^T, a (m, k) and b (n, k) of one floating dtype, on the GEMM the planner picks for
// the dtype and torch's float32 matmul precision: on CUDA in float32, as accurate as PyTorch's
// float32 GEMM (the 3xFP16 engine where it runs, ops/cuda/gemm/gemm_3xfp16.h); on the CPU,
// ATen's. The operators' backward passes run their GEMMs on it. Differentiable.
at::Tensor gemm_nt(const at::Tensor& a, const at::Tensor& b);

// Helper: model 62's backward after its Linear: from y = x W^T + b (batch, hidden) and
// grad_out = dL/d(2 LeakyReLU(GroupNorm(y))), returns (dL/dy, dL/dgn_weight, dL/dgn_bias). On
// CUDA one pass over y and grad_out; on the CPU, ATen's GroupNorm and LeakyReLU backward (the
// reference's). Not differentiable (a double backward of model 62 recomputes its chain).
std::tuple<at::Tensor, at::Tensor, at::Tensor> groupnorm_leakyrelu_sum_backward(
    const at::Tensor& grad_out, const at::Tensor& y, const at::Tensor& gn_weight,
    const at::Tensor& gn_bias, int64_t num_groups, double eps, double negative_slope);

// Helper: model 98's backward after its pooled Linear. From pooled = p (batch, out / k), the
// pooled Linear's output, grad_out = dL/dout (batch,), x (batch, in) and the pooled weight
// (out / k, in): each row's maximum of scale * gelu(p) (torch.max's argmax: the first index on
// a tie, a NaN's where there is one) sends c = dL/dout scale gelu'(p) back to its window r;
// returns (dL/dx = c Wp[r], dL/dW (out_features, in): each window's sum of c x over the rows
// whose argmax it is, 1/k of it to each of its k rows, zero for the rows past the last window,
// dL/db (out_features,) likewise), all in x's dtype (the sums in the accumulation dtype). An
// output whose output_mask entry is false is an empty tensor (no work). On CUDA two kernels;
// on the CPU, ATen's ops. Not differentiable (a double backward of model 98 recomputes its
// chain).
std::tuple<at::Tensor, at::Tensor, at::Tensor> avgpool_gelu_scale_max_backward(
    const at::Tensor& grad_out, const at::Tensor& pooled, const at::Tensor& x,
    const at::Tensor& pooled_weight, int64_t pool_kernel_size, double scale_factor,
    int64_t out_features, std::array<bool, 3> output_mask);

// The weight-fold cache (the rules are in ops/common/fold_cache.h). Folds are cached on their
// weight tensors and freed when those die. clear_fold_cache() frees every fold now: call it
// after writing weights in a way the version counter cannot see (memcpy into data_ptr(),
// in-place edits of inference tensors inside inference mode), or pass cache_folds = false.
struct FoldCacheStats {
  int64_t weights = 0;  // live weight tensors the cache tracks (each holds 0 to 16 folds)
  int64_t entries = 0;  // folds held
  int64_t bytes = 0;    // their memory, all devices together
  int64_t misses = 0;   // folds computed since the process started (cached or not)
};
FoldCacheStats fold_cache_stats();
// Streams still reading a fold keep its memory until their work is done.
void clear_fold_cache();
// Frees the folds of these weights only (after writing them behind the version counter).
void clear_fold_cache(at::TensorList weights);

// Fold checking, a debugging aid for writes no version counter sees: while a FoldCheckScope
// lives (in any thread; scopes nest), or with FUSEDOPS_CHECK_FOLDS=1, every cache hit is
// compared with a fresh fold, and a difference throws c10::Error naming the operator, the fold,
// the weight's shape and the largest difference. Off, it costs nothing measurable.
class FoldCheckScope {
 public:
  FoldCheckScope();
  FoldCheckScope(const FoldCheckScope&) = delete;
  FoldCheckScope& operator=(const FoldCheckScope&) = delete;
  ~FoldCheckScope();
};

// What ran: calls `run` on this thread and returns one line per GEMM the operators planned in
// it, e.g. "matmul_groupnorm_leakyrelu_sum float16 accurate m=1024 n=8192 k=8192 cuda:0:
// sm90-half-fused (epilogue fused into the Hopper half GEMM)". CPU kernels plan no GEMM.
// FUSEDOPS_LOG=routes prints each new such line to stderr instead, process-wide.
std::vector<std::string> explain(const std::function<void()>& run);

// The FUSEDOPS_* settings (FUSEDOPS_FP32_GEMM, FUSEDOPS_HALF_GEMM, FUSEDOPS_3XTF32_CHUNK,
// FUSEDOPS_LOG; README) are read from the environment once, at the first call that plans a
// GEMM; this reads them again, and throws c10::Error naming the variable, the allowed values and
// the value given when one is bad (every operator call throws the same while it stays).
void reload_settings();

}  // namespace fusedops
