// The GEMM planner (ops/plan/planner.h) walked as a table on the CPU: operator x dtype x
// numerics x precision x settings x device x sizes -> route. No GPU: the device is a row of
// facts, and an operator is what it tells the planner of itself (as ops/cuda/<op>.cu does).
// Then the capability table, the split-K heuristic, the settings parser, and invariants over
// the whole cross product.
#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include <map>
#include <string>
#include <vector>

#include "cuda/gemm/heuristics.h"
#include "plan/planner.h"
#include "plan/settings.h"

namespace fusedops::testing {
namespace {

using plan::DeviceFacts;
using plan::DType;
using plan::Epilogue;
using plan::GemmRequest;
using plan::MatmulPrecision;
using plan::Route;

// The four models' operators (the table's shorthand; the planner never sees which).
enum class Op { k62, k39, k98, k18 };
const char* op_name(Op op) {
  switch (op) {
    case Op::k62: return "matmul_groupnorm_leakyrelu_sum";
    case Op::k39: return "gemm_scale_batchnorm";
    case Op::k98: return "matmul_avgpool_gelu_scale_max";
    case Op::k18: return "matmul_sum_max_avgpool_logsumexp_logsumexp";
  }
  return "?";
}
using plan::Settings;

const DeviceFacts kH100{9, 0, 132, true};
const DeviceFacts kH100NoSm90Build{9, 0, 132, false};
const DeviceFacts kA100{8, 0, 108, true};
const DeviceFacts kT4{7, 5, 40, false};

Settings settings_with(plan::Fp32GemmSetting fp32, plan::HalfGemmSetting half) {
  Settings s;
  s.fp32_gemm = fp32;
  s.half_gemm = half;
  return s;
}
const Settings kAuto;
const Settings kIeee = settings_with(plan::Fp32GemmSetting::kIeee, plan::HalfGemmSetting::kAuto);
const Settings k3xTf32 =
    settings_with(plan::Fp32GemmSetting::k3xTf32, plan::HalfGemmSetting::kAuto);
const Settings k3xFp16 =
    settings_with(plan::Fp32GemmSetting::k3xFp16, plan::HalfGemmSetting::kAuto);
const Settings kCublas = settings_with(plan::Fp32GemmSetting::kAuto, plan::HalfGemmSetting::kCublas);
const Settings kFused = settings_with(plan::Fp32GemmSetting::kAuto, plan::HalfGemmSetting::kFused);

struct Row {
  const char* name;
  Op op;
  DType dtype;
  Numerics numerics;
  MatmulPrecision precision;
  const Settings* settings;
  DeviceFacts device;
  int64_t m, n, k;
  bool aligned;   // x and the weight start on 16-byte boundaries
  bool fusable;   // the operator's epilogue can take these sizes inside a GEMM
  Route route;
  Route fallback;
  bool training = false;  // model 39's BatchNorm in training mode
  bool folds_cached = true;  // no gradient to the weights: W's folds outlive the call
};

constexpr Op k62 = Op::k62, k39 = Op::k39, k98 = Op::k98, k18 = Op::k18;
constexpr DType f32 = DType::kFloat32, f64 = DType::kFloat64, f16 = DType::kFloat16,
                bf16 = DType::kBFloat16;
constexpr Numerics acc = Numerics::kAccurate, eager = Numerics::kEager;
constexpr MatmulPrecision ieee = MatmulPrecision::kIeee, tf32 = MatmulPrecision::kTf32,
                          bf16x = MatmulPrecision::kBf16;
constexpr Route none = Route::kNone;

const std::vector<Row> kTable = {
    // float32 at full precision: the float32-accurate engines by device and size.
    {"62 f32 default size on H100", k62, f32, acc, ieee, &kAuto, kH100, 1024, 8192, 8192, true, true, Route::kFp16x3, Route::kSgemm},
    {"39 f32 KernelBench size on H100", k39, f32, acc, ieee, &kAuto, kH100, 16384, 4096, 4096, true, false, Route::kFp16x3, Route::kSgemm},
    {"62 f32 on A100: 3xTF32", k62, f32, acc, ieee, &kAuto, kA100, 1024, 8192, 8192, true, true, Route::kTf32x3, none},
    {"62 f32 on H100 without the sm_90a build", k62, f32, acc, ieee, &kAuto, kH100NoSm90Build, 1024, 8192, 8192, true, true, Route::kTf32x3, none},
    {"N not a multiple of 4: no 3xFP16", k39, f32, acc, ieee, &kAuto, kH100, 1024, 8190, 8192, true, false, Route::kTf32x3, none},
    {"64 rows: the fp16 pairs' skinny kernel on two chunks of x", k39, f32, acc, ieee, &kAuto, kH100, 64, 8192, 8192, true, false, Route::kSkinny3xFp16, Route::kSgemm},
    {"64 rows, 62: fused on two chunks of x", k62, f32, acc, ieee, &kAuto, kH100, 64, 8192, 8192, true, true, Route::kSkinny3xFp16Fused, Route::kSgemm},
    {"65 rows, W's fold cached: 3xFP16 (64 tiles: split over K)", k39, f32, acc, ieee, &kAuto, kH100, 65, 8192, 8192, true, false, Route::kFp16x3SplitK, Route::kSgemm},
    {"127 rows, W's fold cached: 3xFP16 (64 tiles: split over K)", k62, f32, acc, ieee, &kAuto, kH100, 127, 8192, 8192, true, true, Route::kFp16x3SplitK, Route::kSgemm},
    {"127 rows, fold per call: neither split", k39, f32, acc, ieee, &kAuto, kH100, 127, 8192, 8192, true, false, Route::kSgemm, none, false, false},
    {"96 rows, TF32 allowed: TF32 (the one-product rule is 128 rows)", k62, f32, acc, tf32, &kAuto, kH100, 96, 8192, 8192, true, true, Route::kTf32, none},
    {"98 f32, 96 rows under 2^30 FLOP: the pairs' kernel's partials", k98, f32, acc, ieee, &kAuto, kH100, 96, 512, 8192, true, true, Route::kSkinny3xFp16Fused, Route::kSgemm},
    {"98 f32, 128 rows: the 3xFP16 engine's partials", k98, f32, acc, ieee, &kAuto, kH100, 128, 512, 8192, true, true, Route::kFp16x3Fused, Route::kSgemm},
    {"98 f32, 129 rows on A100: past the partials' rows, SGEMM", k98, f32, acc, ieee, &kAuto, kA100, 129, 512, 8192, true, true, Route::kSgemm, none},
    {"98 f32, 128 rows on A100: the pairs' kernel's partials", k98, f32, acc, ieee, &kAuto, kA100, 128, 512, 8192, true, true, Route::kSkinny3xFp16Fused, Route::kSgemm},
    {"98 f32, 64 rows, W's fold made per call: SGEMM", k98, f32, acc, ieee, &kAuto, kH100, 64, 512, 8192, true, true, Route::kSgemm, none, false, false},
    {"98 f32, 64 rows, pooled width not a multiple of 4: SGEMM", k98, f32, acc, ieee, &kAuto, kH100, 64, 510, 8192, true, false, Route::kSgemm, none},
    {"128 rows under 2^30 FLOP", k39, f32, acc, ieee, &kAuto, kH100, 128, 1024, 4095, true, false, Route::kSgemm, none},
    {"3xTF32 needs a whole K chunk", k39, f32, acc, ieee, &kAuto, kA100, 1024, 8192, 1023, true, false, Route::kSgemm, none},
    {"3xTF32 needs 2048 outputs", k39, f32, acc, ieee, &kAuto, kA100, 1024, 2047, 8192, true, false, Route::kSgemm, none},
    {"4 rows: the fp16 pairs' skinny kernel, fused", k62, f32, acc, ieee, &kAuto, kH100, 4, 8192, 8192, true, true, Route::kSkinny3xFp16Fused, Route::kSkinny},
    {"1 row on A100: the float32 skinny kernel", k39, f32, acc, ieee, &kAuto, kA100, 1, 8192, 8192, true, false, Route::kSkinny, none},
    {"3 rows on A100: the fp16 pairs' skinny kernel", k39, f32, acc, ieee, &kAuto, kA100, 3, 8192, 8192, true, false, Route::kSkinny3xFp16, Route::kSkinny},
    {"2 rows, unaligned: the fp16 pairs' skinny kernel", k39, f32, acc, ieee, &kAuto, kH100, 2, 8192, 8192, false, false, Route::kSkinny3xFp16, Route::kSgemm},
    {"16 rows, 39 in eval: fused", k39, f32, acc, ieee, &kAuto, kH100, 16, 8192, 8192, true, true, Route::kSkinny3xFp16Fused, Route::kSgemm},
    {"16 rows, 39 in training: unfused", k39, f32, acc, ieee, &kAuto, kH100, 16, 8192, 8192, true, true, Route::kSkinny3xFp16, Route::kSgemm, true},
    {"32 rows, N = 8192: the fp16 pairs' skinny kernel", k39, f32, acc, ieee, &kAuto, kH100, 32, 8192, 8192, true, false, Route::kSkinny3xFp16, Route::kSgemm},
    {"8 rows, W's fold made per call (gradients): SGEMM", k62, f32, acc, ieee, &kAuto, kH100, 8, 8192, 8192, true, true, Route::kSgemm, none, false, false},
    {"33 rows: the fp16 pairs' skinny kernel", k39, f32, acc, ieee, &kAuto, kH100, 33, 8192, 8192, true, false, Route::kSkinny3xFp16, Route::kSgemm},
    {"48 rows, 39 in eval: fused", k39, f32, acc, ieee, &kAuto, kH100, 48, 8192, 8192, true, true, Route::kSkinny3xFp16Fused, Route::kSgemm},
    {"64 rows, W's fold made per call (gradients): SGEMM", k62, f32, acc, ieee, &kAuto, kH100, 64, 8192, 8192, true, true, Route::kSgemm, none, false, false},
    {"17 rows, N = 4223 < 32 SMs: SGEMM", k62, f32, acc, ieee, &kAuto, kH100, 17, 4223, 8192, true, true, Route::kSgemm, none},
    {"17 rows, N = 4224: fused", k62, f32, acc, ieee, &kAuto, kH100, 17, 4224, 8192, true, true, Route::kSkinny3xFp16Fused, Route::kSgemm},
    {"2 rows on T4 (no bf16 mma.sync): the skinny kernel", k39, f32, acc, ieee, &kAuto, kT4, 2, 8192, 8192, true, false, Route::kSkinny, none},
    {"4 rows, unaligned: SGEMM if refused", k39, f32, acc, ieee, &kAuto, kH100, 4, 8192, 8192, false, false, Route::kSkinny3xFp16, Route::kSgemm},
    {"4 rows, K not a multiple of 4: any K", k39, f32, acc, ieee, &kAuto, kH100, 4, 8192, 8190, true, false, Route::kSkinny3xFp16, Route::kSgemm},
    {"98 f32, 8 rows: the pairs' kernel's partials", k98, f32, acc, ieee, &kAuto, kH100, 8, 512, 8192, true, true, Route::kSkinny3xFp16Fused, Route::kSgemm},
    {"98 f32, 8 rows, pooled width not a multiple of 4: unfused", k98, f32, acc, ieee, &kAuto, kH100, 8, 510, 8192, true, false, Route::kSkinny3xFp16, Route::kSgemm},
    {"98 f32, 4 rows, N = 512 < 32 SMs: the skinny kernel first", k98, f32, acc, ieee, &kAuto, kH100, 4, 512, 8192, true, true, Route::kSkinny, none},
    {"3 rows, N = 4223 < 32 SMs: skinny first", k62, f32, acc, ieee, &kAuto, kH100, 3, 4223, 8192, true, true, Route::kSkinny, none},
    {"3 rows, N = 4224: the fp16 pairs' kernel", k62, f32, acc, ieee, &kAuto, kH100, 3, 4224, 8192, true, true, Route::kSkinny3xFp16Fused, Route::kSkinny},
    {"5 rows, N = 512: the fp16 pairs' kernel", k39, f32, acc, ieee, &kAuto, kH100, 5, 512, 8192, true, true, Route::kSkinny3xFp16Fused, Route::kSgemm},
    // torch's float32 matmul precision.
    {"TF32 allowed on H100: one fp16 product", k62, f32, acc, tf32, &kAuto, kH100, 1024, 8192, 8192, true, true, Route::kFp16x1, Route::kTf32},
    {"TF32 allowed on A100: TF32", k62, f32, acc, tf32, &kAuto, kA100, 1024, 8192, 8192, true, true, Route::kTf32, none},
    {"TF32 allowed, 64 rows: TF32", k39, f32, acc, tf32, &kAuto, kH100, 64, 8192, 8192, true, false, Route::kTf32, none},
    {"TF32 allowed, 9 rows: TF32", k62, f32, acc, tf32, &kAuto, kH100, 9, 8192, 8192, true, true, Route::kTf32, none},
    {"TF32 allowed, 8 rows: the exact skinny kernel", k62, f32, acc, tf32, &kAuto, kH100, 8, 8192, 8192, true, true, Route::kSkinny3xFp16Fused, Route::kTf32},
    {"TF32 allowed, N not a multiple of 4: TF32", k39, f32, acc, tf32, &kAuto, kH100, 1024, 8190, 8192, true, false, Route::kTf32, none},
    {"TF32 allowed, 98 on H100: two products, fused", k98, f32, acc, tf32, &kAuto, kH100, 1024, 512, 8192, true, true, Route::kFp16x2Fused, Route::kSgemm},
    {"TF32 allowed, 98 unfused: float32-exact", k98, f32, acc, tf32, &kAuto, kH100, 1024, 512, 8192, true, false, Route::kFp16x3SplitK, Route::kSgemm},
    {"TF32 allowed, 98 small: float32-exact", k98, f32, acc, tf32, &kAuto, kH100, 257, 512, 1001, true, true, Route::kSgemm, none},
    {"TF32 allowed, 98 on A100: float32-exact", k98, f32, acc, tf32, &kAuto, kA100, 1024, 512, 8192, true, true, Route::kSgemm, none},
    {"TF32 allowed, 2 rows: skinny", k62, f32, acc, tf32, &kAuto, kH100, 2, 8192, 8192, true, true, Route::kSkinny, none},
    {"TF32 allowed, 3 rows: the exact pairs' kernel", k62, f32, acc, tf32, &kAuto, kH100, 3, 8192, 8192, true, true, Route::kSkinny3xFp16Fused, Route::kSkinny},
    {"TF32 allowed, 12 rows: TF32", k39, f32, acc, tf32, &kAuto, kH100, 12, 8192, 8192, true, false, Route::kTf32, none},
    {"TF32 allowed, 39 training, 16384 rows: moments in the epilogue", k39, f32, acc, tf32, &kAuto, kH100, 16384, 4096, 4096, true, true, Route::kFp16x1Fused, Route::kTf32, true},
    {"TF32 allowed, 39 training, 1025 rows: moments in the epilogue", k39, f32, acc, tf32, &kAuto, kH100, 1025, 4096, 4096, true, true, Route::kFp16x1Fused, Route::kTf32, true},
    {"TF32 allowed, 39 training, 1024 rows: the one-read BatchNorm", k39, f32, acc, tf32, &kAuto, kH100, 1024, 4096, 4096, true, true, Route::kFp16x1, Route::kTf32, true},
    {"TF32 allowed, 39 eval, 16384 rows: no statistics", k39, f32, acc, tf32, &kAuto, kH100, 16384, 4096, 4096, true, true, Route::kFp16x1, Route::kTf32},
    {"TF32 allowed, 39 training, a scale per element", k39, f32, acc, tf32, &kAuto, kH100, 16384, 4096, 4096, true, false, Route::kFp16x1, Route::kTf32, true},
    {"39 f32 training, 16384 rows, TF32 not allowed: 3xFP16", k39, f32, acc, ieee, &kAuto, kH100, 16384, 4096, 4096, true, true, Route::kFp16x3, Route::kSgemm, true},
    {"TF32 allowed ignores FUSEDOPS_FP32_GEMM", k39, f32, acc, tf32, &k3xFp16, kH100, 1024, 8192, 8192, true, false, Route::kFp16x1, Route::kTf32},
    {"bf16 allowed", k39, f32, acc, bf16x, &kAuto, kH100, 1024, 8192, 8192, true, false, Route::kBf16x, none},
    {"bf16 allowed, 2 rows: still bf16", k39, f32, acc, bf16x, &kAuto, kH100, 2, 8192, 8192, true, false, Route::kBf16x, none},
    // FUSEDOPS_FP32_GEMM.
    {"forced ieee", k62, f32, acc, ieee, &kIeee, kH100, 1024, 8192, 8192, true, true, Route::kSgemm, none},
    {"forced ieee, 3 rows: skinny", k62, f32, acc, ieee, &kIeee, kH100, 3, 8192, 8192, true, true, Route::kSkinny, none},
    {"forced 3xtf32 at a small size", k39, f32, acc, ieee, &k3xTf32, kH100, 8, 64, 64, true, false, Route::kTf32x3, none},
    {"forced 3xfp16 at a small size", k39, f32, acc, ieee, &k3xFp16, kH100, 8, 64, 64, true, false, Route::kFp16x3, Route::kSgemm},
    // Model 98: the K-slices summed in its epilogue.
    {"98 f32 on H100: fused into the epilogue", k98, f32, acc, ieee, &kAuto, kH100, 1024, 512, 8192, true, true, Route::kFp16x3Fused, Route::kSgemm},
    {"98 f32 pooled width not a multiple of 4", k98, f32, acc, ieee, &kAuto, kH100, 1024, 510, 8192, true, false, Route::kSgemm, none},
    {"98 f32 on A100", k98, f32, acc, ieee, &kAuto, kA100, 1024, 512, 8192, true, true, Route::kSgemm, none},
    {"98 f32 forced 3xfp16, small", k98, f32, acc, ieee, &k3xFp16, kH100, 2, 512, 8192, true, true, Route::kFp16x3Fused, Route::kSgemm},
    {"98 f16 eager: rounding in the epilogue only", k98, f16, eager, ieee, &kAuto, kH100, 1024, 512, 8192, true, true, Route::kCublasHalf, none},
    {"98 bf16 accurate", k98, bf16, acc, ieee, &kAuto, kH100, 1024, 512, 8192, true, true, Route::kCublasHalf, none},
    // Model 18: the fold, or eager's full GEMM.
    {"18 f32", k18, f32, acc, ieee, &kAuto, kH100, 1024, 8192, 8192, true, false, Route::kFoldedMatvec, none},
    {"18 f16 accurate", k18, f16, acc, ieee, &kAuto, kH100, 1024, 8192, 8192, true, false, Route::kFoldedMatvec, none},
    {"18 bf16 eager", k18, bf16, eager, ieee, &kAuto, kH100, 1024, 8192, 8192, true, false, Route::kAtenLinear, none},
    {"18 f32 eager: nothing to round", k18, f32, eager, ieee, &kAuto, kH100, 1024, 8192, 8192, true, false, Route::kFoldedMatvec, none},
    {"18 f64", k18, f64, acc, ieee, &kAuto, kA100, 7, 9, 11, true, false, Route::kFoldedMatvec, none},
    // float64, and eager float32 (the same computation as accurate).
    {"39 f64", k39, f64, acc, ieee, &kAuto, kH100, 1024, 8192, 8192, true, false, Route::kCublasDouble, none},
    {"62 f64 eager", k62, f64, eager, ieee, &kAuto, kH100, 1024, 8192, 8192, true, true, Route::kCublasDouble, none},
    {"39 f32 eager", k39, f32, eager, ieee, &kAuto, kH100, 1024, 8192, 8192, true, false, Route::kFp16x3, Route::kSgemm},
    // float16/bfloat16: model 62's fused epilogue.
    {"62 f16 on H100: fused", k62, f16, acc, ieee, &kAuto, kH100, 1024, 8192, 8192, true, true, Route::kSm90HalfFused, none},
    {"62 bf16 on H100: fused", k62, bf16, acc, ieee, &kAuto, kH100, 1024, 8192, 8192, true, true, Route::kSm90HalfFused, none},
    {"62 f16, 132 tiles: fused", k62, f16, acc, ieee, &kAuto, kH100, 128 * 2, 128 * 66, 512, true, true, Route::kSm90HalfFused, none},
    {"62 f16, 131 tiles: cuBLAS", k62, f16, acc, ieee, &kAuto, kH100, 128, 128 * 131, 512, true, true, Route::kCublasHalf, none},
    {"62 f16 group the epilogue cannot take", k62, f16, acc, ieee, &kAuto, kH100, 1024, 8192, 8192, true, false, Route::kCublasHalf, none},
    {"62 f16 K not a multiple of 8", k62, f16, acc, ieee, &kAuto, kH100, 1024, 8192, 8188, true, true, Route::kCublasHalf, none},
    {"62 f16 unaligned", k62, f16, acc, ieee, &kAuto, kH100, 1024, 8192, 8192, false, true, Route::kCublasHalf, none},
    {"62 f16 on A100", k62, f16, acc, ieee, &kAuto, kA100, 1024, 8192, 8192, true, true, Route::kCublasHalf, none},
    {"62 f16 eager: ATen's GEMM", k62, f16, eager, ieee, &kAuto, kH100, 1024, 8192, 8192, true, true, Route::kAtenLinear, none},
    {"62 f16 eager ignores FUSEDOPS_HALF_GEMM=fused", k62, f16, eager, ieee, &kFused, kH100, 1024, 8192, 8192, true, true, Route::kAtenLinear, none},
    {"62 f16 FUSEDOPS_HALF_GEMM=cublas", k62, f16, acc, ieee, &kCublas, kH100, 1024, 8192, 8192, true, true, Route::kCublasHalf, none},
    {"62 f16 FUSEDOPS_HALF_GEMM=fused, small", k62, f16, acc, ieee, &kFused, kH100, 3, 64, 64, true, true, Route::kSm90HalfFused, none},
    {"62 f32 ignores FUSEDOPS_HALF_GEMM", k62, f32, acc, ieee, &kFused, kA100, 1024, 8192, 8192, true, true, Route::kTf32x3, none},
    {"39 f16: no fused epilogue", k39, f16, acc, ieee, &kAuto, kH100, 16384, 4096, 4096, true, false, Route::kCublasHalf, none},
    {"39 bf16 eager", k39, bf16, eager, ieee, &kAuto, kH100, 16384, 4096, 4096, true, false, Route::kAtenLinear, none},
    // float16/bfloat16: model 39's column moments in training, above the one-read kernel's rows.
    {"39 f16 training, 16384 rows: moments in the half GEMM", k39, f16, acc, ieee, &kAuto, kH100, 16384, 4096, 4096, true, true, Route::kSm90HalfFused, none, true},
    {"39 bf16 training, 1025 rows: moments in the half GEMM", k39, bf16, acc, ieee, &kAuto, kH100, 1025, 4096, 4096, true, true, Route::kSm90HalfFused, none, true},
    {"39 f16 training, 1024 rows: the one-read BatchNorm kernel", k39, f16, acc, ieee, &kAuto, kH100, 1024, 4096, 4096, true, true, Route::kCublasHalf, none, true},
    {"39 f16 training, N not a multiple of 4", k39, f16, acc, ieee, &kAuto, kH100, 16384, 4094, 4096, true, true, Route::kCublasHalf, none, true},
    {"39 f16 training, a scale not per column", k39, f16, acc, ieee, &kAuto, kH100, 16384, 4096, 4096, true, false, Route::kCublasHalf, none, true},
    {"39 f16 training, 9 x 1 tiles of 128 x 256: cuBLAS", k39, f16, acc, ieee, &kAuto, kH100, 1025, 256, 4096, true, true, Route::kCublasHalf, none, true},
    {"39 f16 training on A100", k39, f16, acc, ieee, &kAuto, kA100, 16384, 4096, 4096, true, true, Route::kCublasHalf, none, true},
    {"39 f16 training, eager", k39, f16, eager, ieee, &kAuto, kH100, 16384, 4096, 4096, true, true, Route::kAtenLinear, none, true},
    {"39 bf16 training, FUSEDOPS_HALF_GEMM=cublas", k39, bf16, acc, ieee, &kCublas, kH100, 16384, 4096, 4096, true, true, Route::kCublasHalf, none, true},
    {"39 f16 eval, 16384 rows: no moments", k39, f16, acc, ieee, &kAuto, kH100, 16384, 4096, 4096, true, true, Route::kCublasHalf, none},
    // float16/bfloat16 at small batch: the skinny-half kernel up to the measured crossover.
    {"62 f16 16 rows: skinny-half, fused", k62, f16, acc, ieee, &kAuto, kH100, 16, 8192, 8192, true, true, Route::kSkinnyHalfFused, none},
    {"62 bf16 1 row on A100: skinny-half, fused", k62, bf16, acc, ieee, &kAuto, kA100, 1, 8192, 8192, true, true, Route::kSkinnyHalfFused, none},
    {"62 f16 16 rows, a group it cannot own: skinny-half", k62, f16, acc, ieee, &kAuto, kH100, 16, 8192, 8192, true, false, Route::kSkinnyHalf, none},
    {"62 f16 17 rows: cuBLAS (too few tiles to fuse)", k62, f16, acc, ieee, &kAuto, kH100, 17, 8192, 8192, true, true, Route::kCublasHalf, none},
    {"98 f16 24 rows: skinny-half's partials", k98, f16, acc, ieee, &kAuto, kH100, 24, 512, 8192, true, true, Route::kSkinnyHalfFused, none},
    {"98 bf16 128 rows: skinny-half's partials", k98, bf16, acc, ieee, &kAuto, kH100, 128, 512, 8192, true, true, Route::kSkinnyHalfFused, none},
    {"98 f16 129 rows: cuBLAS", k98, f16, acc, ieee, &kAuto, kH100, 129, 512, 8192, true, true, Route::kCublasHalf, none},
    {"98 f16 24 rows, N = 4224 = 32 SMs: skinny-half's partials", k98, f16, acc, ieee, &kAuto, kH100, 24, 4224, 8192, true, true, Route::kSkinnyHalfFused, none},
    {"98 f16 24 rows, pooled width not a multiple of 4: skinny-half", k98, f16, acc, ieee, &kAuto, kH100, 24, 510, 8192, true, false, Route::kSkinnyHalf, none},
    {"98 f16 33 rows, pooled width not a multiple of 4: cuBLAS", k98, f16, acc, ieee, &kAuto, kH100, 33, 510, 8192, true, false, Route::kCublasHalf, none},
    {"62 f16 24 rows, narrow, fusable: cuBLAS (the epilogues take 16 rows)", k62, f16, acc, ieee, &kAuto, kH100, 24, 1024, 8192, true, true, Route::kCublasHalf, none},
    {"62 f16 24 rows, narrow, a group it cannot own: skinny-half", k62, f16, acc, ieee, &kAuto, kH100, 24, 1000, 1032, true, false, Route::kSkinnyHalf, none},
    {"39 bf16 1 row, training: skinny-half", k39, bf16, acc, ieee, &kAuto, kH100, 1, 8192, 8192, true, true, Route::kSkinnyHalf, none, true},
    {"39 bf16 1 row, eval: skinny-half, fused", k39, bf16, acc, ieee, &kAuto, kH100, 1, 8192, 8192, true, true, Route::kSkinnyHalfFused, none},
    {"39 f16 eval at 1024 rows: no fused route for 39 there", k39, f16, acc, ieee, &kAuto, kH100, 1024, 8192, 8192, true, true, Route::kCublasHalf, none},
    {"98 f16 8 rows: skinny-half's partials", k98, f16, acc, ieee, &kAuto, kH100, 8, 512, 8192, true, true, Route::kSkinnyHalfFused, none},
    {"39 f16 1 row on A100: skinny-half", k39, f16, acc, ieee, &kAuto, kA100, 1, 8192, 8192, true, false, Route::kSkinnyHalf, none},
    {"39 f16 1 row on sm_75: no mma.sync bf16, cuBLAS", k39, f16, acc, ieee, &kAuto, kT4, 1, 8192, 8192, true, false, Route::kCublasHalf, none},
    {"98 f16 eager 8 rows: skinny-half (rounding in the epilogue)", k98, f16, eager, ieee, &kAuto, kH100, 8, 512, 8192, true, true, Route::kSkinnyHalf, none},
    {"98 bf16 16 rows, autocast: skinny-half's partials", k98, bf16, acc, ieee, &kAuto, kH100, 16, 512, 8192, true, true, Route::kSkinnyHalfFused, none},
    {"62 f16 8 rows, K not a multiple of 8: cuBLAS", k62, f16, acc, ieee, &kAuto, kH100, 8, 8192, 8188, true, true, Route::kCublasHalf, none},
    {"62 f16 8 rows, unaligned: cuBLAS", k62, f16, acc, ieee, &kAuto, kH100, 8, 8192, 8192, false, true, Route::kCublasHalf, none},
    {"62 f16 8 rows, FUSEDOPS_HALF_GEMM=cublas", k62, f16, acc, ieee, &kCublas, kH100, 8, 8192, 8192, true, true, Route::kCublasHalf, none},
    {"39 f16 8 rows, FUSEDOPS_HALF_GEMM=fused: not 39's, skinny-half", k39, f16, acc, ieee, &kFused, kH100, 8, 8192, 8192, true, false, Route::kSkinnyHalf, none},
    {"62 f16 FUSEDOPS_HALF_GEMM=fused, 8 rows: the Hopper GEMM", k62, f16, acc, ieee, &kFused, kH100, 8, 8192, 8192, true, true, Route::kSm90HalfFused, none},
    {"62 f16 eager 1 row: ATen's GEMM", k62, f16, eager, ieee, &kAuto, kH100, 1, 8192, 8192, true, true, Route::kAtenLinear, none},
    // Split-K: too few output tiles to fill the GPU; column moments only where it is unsplit.
    {"39 f32 1024 x 512: 3xFP16 split over K", k39, f32, acc, ieee, &kAuto, kH100, 1024, 512, 8192, true, false, Route::kFp16x3SplitK, Route::kSgemm},
    {"62 TF32 1024 x 512: 1xFP16 split over K", k62, f32, acc, tf32, &kAuto, kH100, 1024, 512, 8192, true, false, Route::kFp16x1SplitK, Route::kTf32},
    {"39 TF32 training 2048 x 512: moments need the GEMM unsplit", k39, f32, acc, tf32, &kAuto, kH100, 2048, 512, 8192, true, true, Route::kFp16x1SplitK, Route::kTf32, true},
    {"39 TF32 training 2048 x 512 on 32 SMs: unsplit, moments", k39, f32, acc, tf32, &kAuto, plan::DeviceFacts{9, 0, 32, true}, 2048, 512, 8192, true, true, Route::kFp16x1Fused, Route::kTf32, true},
    // Empty outputs.
    {"no rows", k39, f32, acc, ieee, &kAuto, kH100, 0, 8192, 8192, true, false, none, none},
    {"no columns", k62, f16, acc, ieee, &kAuto, kH100, 8, 0, 8192, true, true, none, none},
};

// What each operator tells the planner (ops/cuda/<op>.cu): its epilogue where it can take the
// sizes (model 39's by mode), the rows its own BatchNorm pass reads once, model 98's folded
// weight.
GemmRequest request_of(const Row& row) {
  GemmRequest r;
  r.op = op_name(row.op);
  switch (row.op) {
    case Op::k62: r.epilogue = Epilogue::kGroupStatistics; break;
    case Op::k39:
      r.epilogue = row.training ? Epilogue::kColumnMoments : Epilogue::kColumnAffine;
      r.one_pass_rows = 1024;
      break;
    case Op::k98:
      r.epilogue = Epilogue::kRowReduction;
      r.folded_weight = true;
      break;
    case Op::k18: r.epilogue = Epilogue::kRowSum; break;
  }
  r.epilogue_fits = row.fusable || row.op == Op::k18;
  r.dtype = row.dtype;
  r.numerics = row.numerics;
  r.precision = row.precision;
  r.m = row.m;
  r.n = row.n;
  r.k = row.k;
  r.x_aligned = r.w_aligned = row.aligned;
  r.folds_cached = row.folds_cached;
  r.device = row.device;
  r.settings = row.settings;
  return r;
}

TEST(Planner, Table) {
  for (const Row& row : kTable) {
    const plan::Plan p = plan::plan_gemm(request_of(row));
    EXPECT_EQ(plan::route_name(p.route), std::string(plan::route_name(row.route))) << row.name;
    EXPECT_EQ(plan::route_name(p.fallback), std::string(plan::route_name(row.fallback))) << row.name;
    EXPECT_STRNE(p.why, "") << row.name;
  }
}

// The capability table: each fused route hosts an epilogue, none hosts "none", and an operator
// whose epilogue a route does not host never gets it.
TEST(Planner, EpiloguesMatchWhatEnginesHost) {
  const Route fused[] = {Route::kFoldedMatvec, Route::kSm90HalfFused, Route::kSkinnyHalfFused,
                         Route::kSkinny3xFp16Fused, Route::kFp16x3Fused, Route::kFp16x2Fused,
                         Route::kFp16x1Fused};
  const Epilogue all[] = {Epilogue::kNone, Epilogue::kRowSum, Epilogue::kRowReduction,
                          Epilogue::kColumnAffine, Epilogue::kGroupStatistics,
                          Epilogue::kColumnMoments};
  for (Route r : fused) {
    int hosted = 0;
    for (Epilogue e : all) hosted += plan::hosts(r, e);
    EXPECT_GT(hosted, 0) << plan::route_name(r);
    EXPECT_FALSE(plan::hosts(r, Epilogue::kNone)) << plan::route_name(r);
    EXPECT_TRUE(plan::fused_route(r)) << plan::route_name(r);
  }
  EXPECT_FALSE(plan::hosts(Route::kFp16x3SplitK, Epilogue::kRowReduction));
  EXPECT_FALSE(plan::hosts(Route::kSkinnyHalfFused, Epilogue::kColumnMoments));
  // A fifth operator with only a per-column affine map gets the skinny kernels' fused routes and
  // no other: the planner asks what the epilogue is, not who calls.
  GemmRequest r;
  r.op = "a fifth operator";
  r.epilogue = Epilogue::kColumnAffine;
  r.device = kH100;
  r.settings = &kAuto;
  r.m = 8;
  r.n = r.k = 8192;
  r.dtype = f16;
  EXPECT_EQ(plan::plan_gemm(r).route, Route::kSkinnyHalfFused);
  r.m = 1024;
  EXPECT_EQ(plan::plan_gemm(r).route, Route::kCublasHalf);
}

// Split-K's heuristic (cuda/gemm/heuristics.h), which names the split routes: whole K steps, at
// least 8 a slice, a divisor of the steps, no more slices than the SMs give each tile.
TEST(Heuristics, SplitKSlices) {
  using cuda::gemm::split_k_slices;
  EXPECT_EQ(split_k_slices(1024, 8192, 8192, 128, 132), 1);    // 512 tiles: no split
  EXPECT_EQ(split_k_slices(1024, 512, 8192, 128, 132), 4);     // 32 tiles, 128 steps
  EXPECT_EQ(split_k_slices(1024, 512, 16384, 256, 132), 8);    // 16 tiles, 256 steps
  EXPECT_EQ(split_k_slices(128, 128, 8 * 64, 128, 132), 1);    // 8 steps: a slice needs 8
  EXPECT_EQ(split_k_slices(128, 128, 33 * 64, 128, 132), 3);   // 33 steps: 3 divides, 4 not
  EXPECT_EQ(split_k_slices(1024, 512, 8192, 128, 32), 1);      // 32 tiles fill 32 SMs
  using cuda::gemm::Products;
  const auto s = cuda::gemm::fp16_engine_slices(65, 4104, 2056, Products::kThree, false, 132);
  EXPECT_TRUE(s.split());
  EXPECT_EQ(s.main, 3);  // 33 tiles of 128, K padded to 33 steps
  // The cross GEMM's K: 2 kp for three products (256 steps: 8 slices), kp for two (128 steps:
  // 8), none for one.
  const auto three = cuda::gemm::fp16_engine_slices(1024, 512, 8192, Products::kThree, true, 132);
  const auto two = cuda::gemm::fp16_engine_slices(1024, 512, 8192, Products::kTwo, true, 132);
  const auto one = cuda::gemm::fp16_engine_slices(1024, 512, 8192, Products::kOne, true, 132);
  EXPECT_EQ(three.cross, 8);
  EXPECT_EQ(two.cross, 8);
  EXPECT_EQ(one.cross, 0);
  EXPECT_EQ(three.main, two.main);
  // 33 K steps: two products' cross GEMM takes 3 slices (its 33 steps), three products' 6 (66).
  EXPECT_EQ(cuda::gemm::fp16_engine_slices(1024, 512, 64 * 33, Products::kTwo, true, 132).cross, 3);
  EXPECT_EQ(cuda::gemm::fp16_engine_slices(1024, 512, 64 * 33, Products::kThree, true, 132).cross,
            6);
}

// The weight-streaming kernel's K slices for a row reduction (heuristics.h): two blocks an SM
// from slices of whole 256-k rounds; under a cap on resident blocks (the reader in the same
// launch needs the whole grid at once) fewer, longer slices, never below one.
TEST(Heuristics, SkinnyPartialsSlices) {
  using cuda::gemm::skinny_partials_shape;
  using cuda::gemm::skinny_tiles;
  using cuda::gemm::tiles_of;
  // Model 98's pooled weight (512 x 8192) on 132 SMs: 32 column tiles.
  auto s = skinny_partials_shape(1, 512, 8192, 132);
  EXPECT_EQ(skinny_tiles(1), 1);
  EXPECT_EQ(s.chunks, 1);
  EXPECT_EQ(s.slice_k, 1024);  // 264 blocks wanted, 9 slices: 4 of the 32 rounds each
  EXPECT_EQ(s.slices, 8);       // which 8 slices cover
  EXPECT_EQ(tiles_of(8192, s.slice_k), s.slices);
  s = skinny_partials_shape(40, 512, 8192, 132);  // two chunks of 32 rows: 64 blocks a slice
  EXPECT_EQ(skinny_tiles(40), 4);
  EXPECT_EQ(skinny_tiles(16), 2);
  EXPECT_EQ(s.chunks, 2);
  EXPECT_EQ(s.slices, 5);  // slices of 7 rounds (1792 k): 320 blocks, over 264
  const auto capped = skinny_partials_shape(40, 512, 8192, 132, 264);
  EXPECT_EQ(capped.chunks, 2);
  EXPECT_LE(32 * capped.slices * capped.chunks, 264);
  EXPECT_EQ(capped.slices, 4);  // 256 blocks of 2048 k
  EXPECT_EQ(capped.slice_k, 2048);
  // A cap below one slice's blocks leaves one slice (the caller then declines the launch).
  EXPECT_EQ(skinny_partials_shape(128, 512, 8192, 132, 100).slices, 1);
  // No cap, or a cap the grid is within: the same shape.
  EXPECT_EQ(skinny_partials_shape(1, 512, 8192, 132, 264).slices, 8);
}

// A forced route that cannot run is an error naming the setting and why, never a fallback.
TEST(Planner, ForcedRoutesThatCannotRunAreErrors) {
  Row row = kTable[0];
  row.settings = &k3xFp16;
  row.device = kA100;
  try {
    plan::plan_gemm(request_of(row));
    FAIL() << "FUSEDOPS_FP32_GEMM=3xfp16 on an A100 planned a route";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("FUSEDOPS_FP32_GEMM=3xfp16 needs an sm_90 GPU"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the device is not sm_90"), std::string::npos) << e.what();
  }
  row = kTable[0];
  row.dtype = f16;
  row.settings = &kFused;
  row.k = 8188;
  try {
    plan::plan_gemm(request_of(row));
    FAIL() << "FUSEDOPS_HALF_GEMM=fused with K = 8188 planned a route";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "FUSEDOPS_HALF_GEMM=fused cannot run here: x and weight must be contiguous, "
                  "16-byte aligned, with in_features a positive multiple of 8"),
              std::string::npos) << e.what();
  }
}

const char* lookup_in(const char* name, void* context) {
  const auto& env = *static_cast<const std::map<std::string, std::string>*>(context);
  const auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}

Settings parse(std::map<std::string, std::string> env) {
  return plan::parse_settings(lookup_in, &env);
}

TEST(Settings, ParsesEachVariable) {
  const Settings none = parse({});
  EXPECT_EQ(none.fp32_gemm, plan::Fp32GemmSetting::kAuto);
  EXPECT_EQ(none.half_gemm, plan::HalfGemmSetting::kAuto);
  EXPECT_EQ(none.tf32x3_chunk, 1024);
  EXPECT_FALSE(none.log_routes);
  EXPECT_FALSE(none.check_folds);
  EXPECT_EQ(none.error, "");
  const Settings all = parse({{"FUSEDOPS_FP32_GEMM", "3xtf32"},
                              {"FUSEDOPS_HALF_GEMM", "cublas"},
                              {"FUSEDOPS_3XTF32_CHUNK", "256"},
                              {"FUSEDOPS_LOG", "routes"},
                              {"FUSEDOPS_CHECK_FOLDS", "1"}});
  EXPECT_EQ(all.fp32_gemm, plan::Fp32GemmSetting::k3xTf32);
  EXPECT_EQ(all.half_gemm, plan::HalfGemmSetting::kCublas);
  EXPECT_EQ(all.tf32x3_chunk, 256);
  EXPECT_TRUE(all.log_routes);
  EXPECT_TRUE(all.check_folds);
  EXPECT_EQ(all.error, "");
  EXPECT_FALSE(parse({{"FUSEDOPS_CHECK_FOLDS", "0"}}).check_folds);
}

TEST(Settings, OneMessageStyleForBadValues) {
  EXPECT_EQ(parse({{"FUSEDOPS_HALF_GEMM", "fast"}}).error,
            "fusedops: FUSEDOPS_HALF_GEMM must be auto, cublas or fused, got fast");
  EXPECT_EQ(parse({{"FUSEDOPS_FP32_GEMM", "tf32"}}).error,
            "fusedops: FUSEDOPS_FP32_GEMM must be auto, ieee, 3xtf32 or 3xfp16, got tf32");
  for (const char* chunk : {"100", "0", "-64", "64x", "", "99999999999"}) {
    EXPECT_EQ(parse({{"FUSEDOPS_3XTF32_CHUNK", chunk}}).error,
              std::string("fusedops: FUSEDOPS_3XTF32_CHUNK must be a positive multiple of 32 (at "
                           "most 1048576), got ") + chunk);
  }
  EXPECT_EQ(parse({{"FUSEDOPS_LOG", "all"}}).error,
            "fusedops: FUSEDOPS_LOG must be empty or routes, got all");
  EXPECT_EQ(parse({{"FUSEDOPS_CHECK_FOLDS", "yes"}}).error,
            "fusedops: FUSEDOPS_CHECK_FOLDS must be 0 or 1, got yes");
  // The planner reports it at the first call, naming the variable.
  Settings bad = parse({{"FUSEDOPS_HALF_GEMM", "fast"}});
  GemmRequest r = request_of(kTable[0]);
  r.settings = &bad;
  EXPECT_THROW(
      {
        try {
          plan::plan_gemm(r);
        } catch (const c10::Error& e) {
          EXPECT_NE(std::string(e.what()).find("FUSEDOPS_HALF_GEMM must be auto, cublas or fused, "
                                               "got fast"), std::string::npos);
          throw;
        }
      },
      c10::Error);
}

// Over the whole cross product: the contracts every route choice keeps.
TEST(Planner, InvariantsOverTheCrossProduct) {
  const Op ops[] = {k62, k39, k98, k18};
  const DType dtypes[] = {f32, f64, f16, bf16};
  const Numerics numerics[] = {acc, eager};
  const MatmulPrecision precisions[] = {ieee, tf32, bf16x};
  const Settings* settings[] = {&kAuto, &kIeee, &k3xTf32, &kCublas};
  const DeviceFacts devices[] = {kH100, kA100, kH100NoSm90Build};
  const int64_t sizes[][3] = {{1, 8192, 8192}, {4, 4096, 4096}, {64, 8192, 8192},
                              {1024, 8192, 8192}, {1024, 512, 8192}, {16384, 4096, 4096},
                              {33, 129, 77}};
  int planned = 0;
  for (Op op : ops)
    for (DType dtype : dtypes)
      for (Numerics num : numerics)
        for (MatmulPrecision precision : precisions)
          for (const Settings* s : settings)
            for (const DeviceFacts& device : devices)
              for (const auto& size : sizes)
                for (bool fusable : {false, true}) {
                  const Row row{"", op, dtype, num, precision, s, device, size[0], size[1],
                                size[2], true, fusable, none, none};
                  const plan::Plan p = plan::plan_gemm(request_of(row));
                  const Route r = p.route;
                  const bool half = dtype == f16 || dtype == bf16;
                  SCOPED_TRACE(std::string(op_name(op)) + " " + plan::dtype_name(dtype) +
                               " m=" + std::to_string(size[0]) + ": " + plan::route_name(r));
                  ++planned;
                  if (op == k18) {
                    EXPECT_TRUE(r == (half && num == eager ? Route::kAtenLinear
                                                           : Route::kFoldedMatvec));
                    continue;
                  }
                  if (dtype == f64) {
                    EXPECT_EQ(r, Route::kCublasDouble);
                  }
                  // Eager half precision takes the reference's own GEMM (model 98 has no GEMM
                  // output of the reference's to round: its epilogue rounds).
                  if (half && num == eager) {
                    if (op == k98) {
                      EXPECT_TRUE(r == Route::kCublasHalf || r == Route::kSkinnyHalf);
                    } else {
                      EXPECT_EQ(r, Route::kAtenLinear);
                    }
                  }
                  // Half-precision models never run a float32 engine, and vice versa.
                  if (half) {
                    EXPECT_TRUE(r == Route::kCublasHalf || r == Route::kSm90HalfFused ||
                                r == Route::kAtenLinear || r == Route::kSkinnyHalf ||
                                r == Route::kSkinnyHalfFused);
                  }
                  // A row reduction (98's) takes the kernels' K-slice partials: more rows.
                  const int64_t fused_rows =
                      op == k98 ? plan::kMaxSkinnyPartialRows : plan::kMaxSkinnyHalfRows;
                  if (r == Route::kSkinnyHalf || r == Route::kSkinnyHalfFused) {
                    EXPECT_TRUE(half && device.major >= 8 && s != &kCublas &&
                                size[0] <= (r == Route::kSkinnyHalf ? plan::kMaxSkinnyHalfNarrowRows
                                                                    : fused_rows));
                  }
                  const bool pairs = r == Route::kSkinny3xFp16 || r == Route::kSkinny3xFp16Fused;
                  if (pairs) {
                    EXPECT_TRUE(dtype == f32 &&
                                size[0] <= (op == k98 ? plan::kMaxSkinnyPartialRows
                                                      : plan::kMaxSkinnyPairRows) &&
                                device.major >= 8 && s->fp32_gemm == plan::Fp32GemmSetting::kAuto &&
                                precision != bf16x);
                    EXPECT_EQ(p.fallback, size[0] <= plan::kMaxSkinnyRows ? Route::kSkinny
                                          : precision == tf32 && op != k98 ? Route::kTf32
                                                                            : Route::kSgemm);
                  }
                  if (r == Route::kSkinny3xFp16Fused) {
                    EXPECT_TRUE(fusable);
                  }
                  if (r == Route::kSkinnyHalfFused) {
                    EXPECT_TRUE(fusable && num == acc);
                  }
                  // Below the crossover every half-precision GEMM of ours streams W.
                  if (half && num == acc && s == &kAuto && size[0] <= plan::kMaxSkinnyHalfRows &&
                      op != k18) {
                    EXPECT_EQ(r, fusable ? Route::kSkinnyHalfFused : Route::kSkinnyHalf);
                  }
                  if (r == Route::kSm90HalfFused) {  // (model 39's: in training, table rows)
                    EXPECT_TRUE(op == k62 && fusable && num == acc && device.major == 9 &&
                                device.sm90_kernels);
                  }
                  // The exact-float32 contract: TF32 or bf16 products only when torch allows.
                  if (dtype == f32 && precision == ieee) {
                    EXPECT_NE(r, Route::kTf32);
                    EXPECT_NE(r, Route::kBf16x);
                  }
                  const auto products = plan::fp16_products(r);
                  const bool engine = products.has_value();
                  if (dtype == f32 && precision == tf32) {
                    // Model 98 never runs TF32's rounding on its pooled weight (planner.cpp):
                    // two products, or float32-exact.
                    if (op == k98) {
                      EXPECT_TRUE(r != Route::kTf32 && products != cuda::gemm::Products::kOne);
                    } else {
                      EXPECT_TRUE(r == Route::kTf32 || r == Route::kSkinny || pairs ||
                                  products == cuda::gemm::Products::kOne);
                    }
                  }
                  if (engine && products != cuda::gemm::Products::kThree) {
                    EXPECT_EQ(precision, tf32);
                    EXPECT_EQ(products == cuda::gemm::Products::kTwo, op == k98);
                  }
                  // A split route is named where the engine's own heuristic splits K, and only
                  // there; a fused route hosts the operator's epilogue.
                  if (engine && !plan::fused_route(r)) {
                    const bool split = r == Route::kFp16x3SplitK || r == Route::kFp16x1SplitK;
                    EXPECT_EQ(split, cuda::gemm::fp16_engine_slices(size[0], size[1], size[2],
                                                                    *products, false,
                                                                    device.sm_count).split());
                  }
                  if (plan::fused_route(r)) {
                    EXPECT_TRUE(plan::hosts(r, request_of(row).epilogue) &&
                                request_of(row).epilogue_fits);
                  }
                  if (engine) {
                    EXPECT_TRUE(device.major == 9 && device.sm90_kernels && size[1] % 4 == 0);
                    EXPECT_EQ(p.fallback,
                              precision == tf32 && op != k98 ? Route::kTf32 : Route::kSgemm);
                  } else if (!pairs) {
                    EXPECT_EQ(p.fallback, none);
                  }
                  if (r == Route::kSkinny) {
                    EXPECT_LE(size[0], plan::kMaxSkinnyRows);
                  }
                  if (s == &kIeee && dtype == f32 && precision == ieee) {
                    EXPECT_TRUE(r == Route::kSgemm || r == Route::kSkinny);
                  }
                }
  EXPECT_EQ(planned, 4 * 4 * 2 * 3 * 4 * 3 * 7 * 2);
}

}  // namespace
}  // namespace fusedops::testing
