// The fusedops operator schemas (the one place they are defined) and the public C++ API,
// which calls each operator through the dispatcher.
#include "fusedops/fusedops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "common/fold_cache.h"
#include "plan/explain.h"
#include "plan/settings.h"

namespace fusedops {

#ifndef FUSEDOPS_VERSION
#define FUSEDOPS_VERSION "unknown"
#endif

const char* version() { return FUSEDOPS_VERSION; }

namespace {
template <typename Signature>
c10::TypedOperatorHandle<Signature> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}
}  // namespace

at::Tensor matmul_avgpool_gelu_scale_max(const at::Tensor& x, const at::Tensor& weight,
                                         const at::Tensor& bias, int64_t pool_kernel_size,
                                         double scale_factor, std::optional<bool> cache_folds,
                                         c10::string_view numerics) {
  static auto op = find_op<decltype(matmul_avgpool_gelu_scale_max)>(
      "fusedops::matmul_avgpool_gelu_scale_max");
  return op.call(x, weight, bias, pool_kernel_size, scale_factor, cache_folds, numerics);
}

at::Tensor matmul_sum_max_avgpool_logsumexp_logsumexp(const at::Tensor& x,
                                                      const at::Tensor& weight,
                                                      const at::Tensor& bias, std::optional<bool> cache_folds,
                                                      c10::string_view numerics) {
  static auto op = find_op<decltype(matmul_sum_max_avgpool_logsumexp_logsumexp)>(
      "fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp");
  return op.call(x, weight, bias, cache_folds, numerics);
}

at::Tensor gemm_scale_batchnorm(const at::Tensor& x, const at::Tensor& weight,
                                const at::Tensor& bias, const at::Tensor& scale,
                                const at::Tensor& bn_weight, const at::Tensor& bn_bias,
                                at::Tensor& running_mean, at::Tensor& running_var,
                                at::Tensor& num_batches_tracked, bool training,
                                std::optional<double> momentum, double eps,
                                std::optional<bool> cache_folds,
                                c10::string_view numerics) {
  static auto op = find_op<decltype(gemm_scale_batchnorm)>("fusedops::gemm_scale_batchnorm");
  return op.call(x, weight, bias, scale, bn_weight, bn_bias, running_mean, running_var,
                 num_batches_tracked, training, momentum, eps, cache_folds, numerics);
}

at::Tensor matmul_groupnorm_leakyrelu_sum(const at::Tensor& x, const at::Tensor& weight,
                                          const at::Tensor& bias, int64_t num_groups,
                                          const at::Tensor& gn_weight, const at::Tensor& gn_bias,
                                          double eps, double negative_slope,
                                          std::optional<bool> cache_folds,
                                          c10::string_view numerics) {
  static auto op = find_op<decltype(matmul_groupnorm_leakyrelu_sum)>(
      "fusedops::matmul_groupnorm_leakyrelu_sum");
  return op.call(x, weight, bias, num_groups, gn_weight, gn_bias, eps, negative_slope,
                 cache_folds, numerics);
}

std::tuple<at::Tensor, at::Tensor> avgpool_fold_linear(const at::Tensor& weight,
                                                       const at::Tensor& bias,
                                                       int64_t pool_kernel_size) {
  static auto op = find_op<decltype(avgpool_fold_linear)>("fusedops::avgpool_fold_linear");
  return op.call(weight, bias, pool_kernel_size);
}

std::tuple<at::Tensor, at::Tensor> sum_fold_linear(const at::Tensor& weight,
                                                   const at::Tensor& bias) {
  static auto op = find_op<decltype(sum_fold_linear)>("fusedops::sum_fold_linear");
  return op.call(weight, bias);
}

at::Tensor gemm_nt(const at::Tensor& a, const at::Tensor& b) {
  static auto op = find_op<decltype(gemm_nt)>("fusedops::gemm_nt");
  return op.call(a, b);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> groupnorm_leakyrelu_sum_backward(
    const at::Tensor& grad_out, const at::Tensor& y, const at::Tensor& gn_weight,
    const at::Tensor& gn_bias, int64_t num_groups, double eps, double negative_slope) {
  static auto op = find_op<decltype(groupnorm_leakyrelu_sum_backward)>(
      "fusedops::groupnorm_leakyrelu_sum_backward");
  return op.call(grad_out, y, gn_weight, gn_bias, num_groups, eps, negative_slope);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> avgpool_gelu_scale_max_backward(
    const at::Tensor& grad_out, const at::Tensor& pooled, const at::Tensor& x,
    const at::Tensor& pooled_weight, int64_t pool_kernel_size, double scale_factor,
    int64_t out_features, std::array<bool, 3> output_mask) {
  static auto op = find_op<decltype(avgpool_gelu_scale_max_backward)>(
      "fusedops::avgpool_gelu_scale_max_backward");
  return op.call(grad_out, pooled, x, pooled_weight, pool_kernel_size, scale_factor,
                 out_features, output_mask);
}

std::vector<std::string> explain(const std::function<void()>& run) {
  plan::record_routes(true);
  try {
    run();
  } catch (...) {
    plan::record_routes(false);
    throw;
  }
  plan::record_routes(false);
  return plan::take_routes();
}

void reload_settings() { plan::reload_settings(); }

// numerics (common/numerics.h) comes last and has a default, so that a TorchScript module
// exported before it existed (its graph calls the op without it) still loads and runs.
// cache_folds (common/fold_cache.h): a module exported when it was a plain bool passes a bool,
// which the optional takes.
TORCH_LIBRARY(fusedops, m) {
  m.def("matmul_avgpool_gelu_scale_max(Tensor x, Tensor weight, Tensor bias, "
        "int pool_kernel_size, float scale_factor, *, bool? cache_folds=None, "
        "str numerics=\"accurate\") -> Tensor");
  m.def("matmul_sum_max_avgpool_logsumexp_logsumexp(Tensor x, Tensor weight, Tensor bias, *, "
        "bool? cache_folds=None, str numerics=\"accurate\") -> Tensor");
  m.def("gemm_scale_batchnorm(Tensor x, Tensor weight, Tensor bias, Tensor scale, "
        "Tensor bn_weight, Tensor bn_bias, Tensor(a!) running_mean, Tensor(b!) running_var, "
        "Tensor(c!) num_batches_tracked, bool training, float? momentum, float eps, *, "
        "bool? cache_folds=None, str numerics=\"accurate\") -> Tensor");
  m.def("matmul_groupnorm_leakyrelu_sum(Tensor x, Tensor weight, Tensor bias, "
        "int num_groups, Tensor gn_weight, Tensor gn_bias, float eps, float negative_slope, *, "
        "bool? cache_folds=None, str numerics=\"accurate\") -> Tensor");
  m.def("avgpool_fold_linear(Tensor weight, Tensor bias, int pool_kernel_size) "
        "-> (Tensor, Tensor)");
  m.def("sum_fold_linear(Tensor weight, Tensor bias) -> (Tensor, Tensor)");
  m.def("gemm_nt(Tensor a, Tensor b) -> Tensor");
  m.def("groupnorm_leakyrelu_sum_backward(Tensor grad_out, Tensor y, Tensor gn_weight, "
        "Tensor gn_bias, int num_groups, float eps, float negative_slope) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("avgpool_gelu_scale_max_backward(Tensor grad_out, Tensor pooled, Tensor x, "
        "Tensor pooled_weight, int pool_kernel_size, float scale_factor, int out_features, "
        "bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
  // The weight-fold cache (ops/common/fold_cache.h), from Python, TorchScript and C++:
  // clear_fold_cache frees every fold now, or the folds of the weights given; fold_cache_stats
  // reports weights (holding folds), entries, bytes and misses (folds computed since the process
  // started).
  m.def("clear_fold_cache(Tensor[]? weights=None) -> ()",
        [](const std::optional<std::vector<at::Tensor>>& weights) {
          if (weights) {
            clear_fold_cache(*weights);
          } else {
            clear_fold_cache();
          }
        });
  m.def("fold_cache_stats() -> Dict(str, int)", [] {
    const FoldCacheStats stats = fold_cache_stats();
    c10::Dict<std::string, int64_t> dict;
    dict.insert("weights", stats.weights);
    dict.insert("entries", stats.entries);
    dict.insert("bytes", stats.bytes);
    dict.insert("misses", stats.misses);
    return dict;
  });
  // Fold checking (common/fold_cache.h, "Checking"): fold_check(True) opens a scope in which
  // every cache hit is compared with a fresh fold, fold_check(False) closes one
  // (fusedops.checking_folds() pairs them).
  m.def("fold_check(bool open) -> ()", [](bool open) { set_fold_check(open); });
  m.def("version() -> str", [] { return std::string(version()); });
  // What ran (plan/explain.h): record_routes(True) starts recording this thread's GEMM routes,
  // routes_taken() returns them (fusedops.explain wraps the two); reload_settings() reads the
  // FUSEDOPS_* environment variables again (plan/settings.h).
  m.def("record_routes(bool on) -> ()", [](bool on) { plan::record_routes(on); });
  m.def("routes_taken() -> str[]", [] { return plan::take_routes(); });
  m.def("reload_settings() -> ()", [] { plan::reload_settings(); });
}

}  // namespace fusedops
