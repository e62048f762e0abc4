// The one place an unfused route becomes an engine call (linear.h).
#include "cuda/linear.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAFunctions.h>

#include <limits>

#include "common/fold_cache.h"
#include "cuda/cuda_helpers.cuh"
#include "cuda/device_facts.h"
#include "cuda/gemm/cublas.h"
#include "cuda/gemm/gemm_3xfp16.h"
#include "cuda/gemm/skinny.h"
#include "cuda/gemm/skinny_half.h"
#include "cuda/gemm/tf32x3.h"
#include "plan/explain.h"
#include "plan/precision.h"

namespace fusedops::cuda {
namespace {

static_assert(plan::kMaxSkinnyHalfRows <= gemm::kSkinnyHalfFusedCapacity &&
                  plan::kMaxSkinnyHalfNarrowRows <= gemm::kSkinnyHalfCapacity,
              "the planner sends the skinny-half engine more rows than it takes");
static_assert(plan::kMaxSkinnyPairRows <= gemm::kSkinnyPairCapacity,
              "the planner sends the float32 skinny engine more rows than it takes");

plan::DType dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return plan::DType::kFloat64;
    case at::kHalf: return plan::DType::kFloat16;
    case at::kBFloat16: return plan::DType::kBFloat16;
    default: return plan::DType::kFloat32;
  }
}

}  // namespace

PlannedLinear plan_linear(const LinearNeeds& needs, const at::Tensor& x, const at::Tensor& weight,
                          Numerics numerics, bool cache_folds) {
  PlannedLinear p;
  p.device_index = x.device().index();
  plan::GemmRequest& r = p.request;
  r.op = needs.op;
  r.epilogue = needs.epilogue;
  r.epilogue_fits = needs.epilogue_fits;
  r.one_pass_rows = needs.one_pass_rows;
  r.folded_weight = needs.folded_weight;
  r.autocast_form = needs.autocast_form;
  r.dtype = dtype_of(x.scalar_type());
  r.numerics = numerics;
  r.precision = plan::cuda_matmul_precision();
  r.m = x.size(0);
  r.n = weight.size(0);
  r.k = x.size(1);
  r.x_aligned = is_16_byte_aligned(x.data_ptr());
  r.w_aligned = is_16_byte_aligned(weight.data_ptr());
  // A training step's folds last one call, cached or not (common/fold_cache.h, TrainingCall).
  r.folds_cached = cache_folds && !TrainingCall::active();
  r.device = device_facts(p.device_index);
  p.plan = plan::plan_gemm(r);
  plan::note_plan(r, p.plan, p.device_index);
  return p;
}

namespace {

LinearOutput run_route(plan::Route route, const PlannedLinear& planned, const at::Tensor& x,
                       const at::Tensor& weight_as_given, const at::Tensor& bias,
                       const at::Tensor& weight_key, bool cache_folds) {
  using plan::Route;
  // A weight given transposed (gemm_nt's b, a view of W^T) is read as it lies by the 3xFP16
  // engine, whose split takes it so; every other route takes it contiguous.
  const bool reads_transposed = route == Route::kFp16x3 || route == Route::kFp16x3SplitK ||
                                route == Route::kFp16x1 || route == Route::kFp16x1SplitK;
  const at::Tensor weight = reads_transposed ? weight_as_given : weight_as_given.contiguous();
  if (route == Route::kAtenLinear) return {linear_as_the_reference_writes_it(x, weight, bias), true};
  const int64_t m = x.size(0), n = weight.size(0), k = x.size(1);
  const bool is_double = x.scalar_type() == at::kDouble;
  at::Tensor y = at::empty({m, n}, x.options().dtype(is_double ? at::kDouble : at::kFloat));
  if (m == 0 || n == 0) return {y};
  if (k == 0) return {y.zero_()};
  const int64_t limit = std::numeric_limits<int32_t>::max();
  TORCH_CHECK(m <= limit && n <= limit && 2 * k + 2 * plan::settings().tf32x3_chunk <= limit,
              "fusedops: GEMM sizes must fit cuBLAS's 32-bit dimensions, got m=", m, ", n=", n,
              ", k=", k);
  switch (route) {
    case Route::kCublasDouble: gemm::cublas_linear(x, weight, y, gemm::CublasMath::kDouble); break;
    case Route::kCublasHalf: gemm::cublas_linear(x, weight, y, gemm::CublasMath::kHalf); break;
    case Route::kSgemm: gemm::cublas_linear(x, weight, y, gemm::CublasMath::kIeee); break;
    case Route::kBf16x: gemm::cublas_linear(x, weight, y, gemm::CublasMath::kFastBf16); break;
    case Route::kTf32: gemm::aten_tf32_linear(x, weight, y); break;
    case Route::kSkinny:
      gemm::skinny_linear(x, weight, y, planned.request.device.sm_count);
      break;
    case Route::kSkinnyHalf:
    case Route::kSkinny3xFp16: {
      gemm::SkinnyOperands ops;
      if (!gemm::skinny_operands(x, weight, weight_key, cache_folds, ops)) {
        return run_fallback(planned, x, weight, bias, weight_key, cache_folds,
                            kWeightRefused3xFp16);
      }
      gemm::skinny_half_linear(ops, y, planned.request.device.sm_count);
      break;
    }
    case Route::kTf32x3:
      gemm::tf32x3_linear(x, weight, weight_key, cache_folds, plan::settings().tf32x3_chunk, y);
      break;
    case Route::kFp16x3:
    case Route::kFp16x3SplitK:
    case Route::kFp16x1:
    case Route::kFp16x1SplitK: {
      if (!gemm::linear_nt_3xfp16(x, weight, weight_key, cache_folds, *plan::fp16_products(route),
                                  planned.request.device.sm_count, y)) {
        return run_fallback(planned, x, weight, bias, weight_key, cache_folds,
                            kWeightRefused3xFp16);
      }
      break;
    }
    default:
      TORCH_INTERNAL_ASSERT(false, "fusedops: route ", plan::route_name(route),
                            " is not an unfused GEMM");
  }
  return {y};
}

}  // namespace

LinearOutput run_linear(const PlannedLinear& planned, const at::Tensor& x, const at::Tensor& weight,
                        const at::Tensor& bias, const at::Tensor& weight_key, bool cache_folds) {
  if (plan::fused_route(planned.plan.route)) {  // the operator ran it; its engine refused
    return run_fallback(planned, x, weight, bias, weight_key, cache_folds, kWeightRefused3xFp16);
  }
  return run_route(planned.plan.route, planned, x, weight, bias, weight_key, cache_folds);
}

at::Tensor y_for_epilogue(const LinearOutput& linear, at::ScalarType out_dtype) {
  const at::ScalarType acc = at::toOpMathType(out_dtype);
  const at::ScalarType y = linear.y.scalar_type();
  return y == out_dtype || y == acc ? linear.y : linear.y.to(acc);
}

LinearOutput run_fallback(const PlannedLinear& planned, const at::Tensor& x,
                          const at::Tensor& weight, const at::Tensor& bias,
                          const at::Tensor& weight_key, bool cache_folds, const char* refused) {
  TORCH_INTERNAL_ASSERT(planned.plan.fallback != plan::Route::kNone);
  plan::note_fallback(planned.request, planned.plan, planned.device_index, refused);
  return run_route(planned.plan.fallback, planned, x, weight, bias, weight_key, cache_folds);
}

}  // namespace fusedops::cuda
