#include "plan/planner.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <limits>

#include "cuda/gemm/tile_shapes.h"

namespace fusedops::plan {

const char* route_name(Route route) {
  switch (route) {
    case Route::kNone: return "none";
    case Route::kFoldedMatvec: return "folded-matvec";
    case Route::kAtenLinear: return "aten-linear";
    case Route::kCublasDouble: return "cublas-f64";
    case Route::kCublasHalf: return "cublas-half";
    case Route::kSm90HalfFused: return "sm90-half-fused";
    case Route::kSkinny: return "skinny";
    case Route::kSkinnyHalf: return "skinny-half";
    case Route::kSkinnyHalfFused: return "skinny-half-fused";
    case Route::kSkinny3xFp16: return "skinny-3xfp16";
    case Route::kSkinny3xFp16Fused: return "skinny-3xfp16-fused";
    case Route::kFp16x3: return "3xfp16";
    case Route::kFp16x3Fused: return "3xfp16-fused";
    case Route::kFp16x1: return "1xfp16";
    case Route::kFp16x1Fused: return "1xfp16-fused";
    case Route::kTf32x3: return "3xtf32";
    case Route::kSgemm: return "sgemm";
    case Route::kTf32: return "tf32";
    case Route::kBf16x: return "bf16x";
  }
  return "?";
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kAvgPoolGeluScaleMax: return "matmul_avgpool_gelu_scale_max";
    case Op::kSumMaxAvgPoolLse: return "matmul_sum_max_avgpool_logsumexp_logsumexp";
    case Op::kScaleBatchNorm: return "gemm_scale_batchnorm";
    case Op::kGroupNormLeakyRelu: return "matmul_groupnorm_leakyrelu_sum";
  }
  return "?";
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
  }
  return "?";
}

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool is_half(DType d) { return d == DType::kFloat16 || d == DType::kBFloat16; }

bool hopper(const DeviceFacts& d) { return d.sm90_kernels && d.major == 9 && d.minor == 0; }

// The 3xFP16 engine's own requirements: the sm_90a kernels on an sm_90 device, N a multiple of
// 4 (16-byte output rows for the TMA store), sizes inside CUTLASS's 32-bit dimensions (K padded
// to whole K steps, twice over for the cross GEMM).
const char* why_not_3xfp16(const GemmRequest& r) {
  if (!r.device.sm90_kernels) return "this build has no sm_90a kernels";
  if (!hopper(r.device)) return "the device is not sm_90";
  if (r.n % 4 != 0) return "N is not a multiple of 4";
  const int64_t kp = ceil_div(r.k, cuda::gemm::kTileK) * cuda::gemm::kTileK;
  if (r.m > kInt32Max || r.n > kInt32Max || 2 * kp > kInt32Max) return "sizes exceed 32 bits";
  return nullptr;
}

// The fused float16/bfloat16 GEMM's requirements beyond the epilogue's: TMA reads rows of
// 16-byte granules from 16-byte aligned addresses.
const char* why_not_sm90_half(const GemmRequest& r) {
  if (!r.device.sm90_kernels) return "this build has no sm_90a kernels";
  if (!hopper(r.device)) return "the device is not sm_90";
  if (!r.epilogue_fusable) return "the operator's epilogue cannot take these sizes";
  if (r.k == 0 || r.k % 8 != 0 || !r.x_aligned || !r.w_aligned) {
    return "x and weight must be contiguous, 16-byte aligned, with in_features a positive "
           "multiple of 8";
  }
  if (r.m > kInt32Max || r.n > kInt32Max || r.k > kInt32Max) return "sizes must fit 32 bits";
  return nullptr;
}

// W is narrow where N gives fewer than 32 rows of W per SM (model 98's pooled weight, 512 rows):
// the weight-streaming kernels' blocks then leave SMs idle and re-read x rarely. The skinny
// rules below split on it, float32 and half alike.
bool narrow_weight(const GemmRequest& r) {
  return r.n < 32 * static_cast<int64_t>(r.device.sm_count);
}

double gemm_flop(const GemmRequest& r) {
  return 2.0 * static_cast<double>(r.m) * static_cast<double>(r.n) * static_cast<double>(r.k);
}

// The 3xFP16 engine pays two passes over x, reads W's fp16 pair 1.5 times and launches five
// kernels: it measured faster than SGEMM and 3xTF32 at batch 1024 for all three models
// (model 98's N = 512 included, split over K; docs/PERFORMANCE.md). Few rows make the GEMM a
// read of W, which SGEMM does once: below 128 rows or 2^30 FLOP the others run.
bool large_for_fp16_engine(const GemmRequest& r) {
  return r.m >= kMin3xFp16Rows && gemm_flop(r) >= kMin3xFp16Flop;
}

// float32-exact from 65 rows, where W's fold outlives the call: one Python call of models 39
// and 62 at n = k = 8192 (H100, L2 emptied by a read; docs/PERFORMANCE.md, issue 25) took
// 0.239-0.259 ms on this engine at 96 rows against SGEMM's 0.386-0.419 (cuBLAS changes tiles
// between 64 and 96 rows), and the same as SGEMM at 33-64 rows (0.231-0.290 against
// 0.238-0.305). Where the fold is made per call (a pass over W and a host sync), 128 rows.
bool large_for_fp16_engine_exact(const GemmRequest& r) {
  return r.m >= (r.folds_cached ? kMin3xFp16CachedRows : kMin3xFp16Rows) &&
         gemm_flop(r) >= kMin3xFp16Flop;
}

// float32 at full precision (the exact-float32 contract).
Plan plan_fp32_exact(const GemmRequest& r, const Settings& s) {
  const char* no_3xfp16 = why_not_3xfp16(r);
  switch (s.fp32_gemm) {
    case Fp32GemmSetting::kIeee:
      return {Route::kSgemm, Route::kNone, "FUSEDOPS_FP32_GEMM=ieee"};
    case Fp32GemmSetting::k3xTf32:
      return {Route::kTf32x3, Route::kNone, "FUSEDOPS_FP32_GEMM=3xtf32"};
    case Fp32GemmSetting::k3xFp16:
      TORCH_CHECK(no_3xfp16 == nullptr,
                  "fusedops: FUSEDOPS_FP32_GEMM=3xfp16 needs an sm_90 GPU, a build with the sm_90a "
                  "kernels and N a multiple of 4, got m=", r.m, ", n=", r.n, ", k=", r.k, " (",
                  no_3xfp16, ")");
      return {Route::kFp16x3, Route::kSgemm, "FUSEDOPS_FP32_GEMM=3xfp16"};
    case Fp32GemmSetting::kAuto:
      break;
  }
  if (large_for_fp16_engine_exact(r) && no_3xfp16 == nullptr) {
    return {Route::kFp16x3, Route::kSgemm, "float32-accurate on Hopper, large enough for 3xFP16"};
  }
  // 3xTF32 reads W twice and needs enough output tiles to fill the GPU: below these sizes
  // SGEMM measured faster and more accurate (docs/PERFORMANCE.md).
  if (r.m >= kMin3xTf32Rows && r.n >= kMin3xTf32Cols && r.k >= s.tf32x3_chunk) {
    return {Route::kTf32x3, Route::kNone,
            no_3xfp16 != nullptr ? "float32-accurate tensor cores (no 3xFP16: see the device)"
                                 : "float32-accurate tensor cores (too small for 3xFP16)"};
  }
  return {Route::kSgemm, Route::kNone, "float32, too small for the tensor-core splits"};
}

Plan plan_float32(const GemmRequest& r, const Settings& s) {
  Plan p;
  switch (r.precision) {
    case MatmulPrecision::kTf32:
      // TF32 allowed: on Hopper, where the 3xFP16 engine runs, its main term alone rounds each
      // operand as TF32 does (11 significant bits, per-row scales keeping fp16's range) at
      // twice TF32's rate; its guard and weight check send what fp16 cannot carry to exact
      // paths, a refused weight to TF32 (tests/python/test_tf32.py: its error against float64
      // is no larger than PyTorch's TF32's). Elsewhere, or small: the very GEMM PyTorch's own
      // matmul runs (cuBLASLt with its heuristics), which measured a few percent faster than
      // cublasGemmEx's choice.
      // Model 98 multiplies by its pooled weight, whose rows are means of the pool's rows:
      // TF32's rounding of a pooled row is not averaged over the pool, as the reference's
      // rounding of W's rows is, and measured up to 1.11x PyTorch's TF32 error against float64
      // (257 x 1001 -> 4096 / 8, randn; tests/python/test_tf32.py). Its GEMM is the pool's size
      // smaller, so where the one-product route does not run it stays float32-exact, and a
      // weight that route refuses runs SGEMM.
      if (large_for_fp16_engine(r) && why_not_3xfp16(r) == nullptr) {
        p = {Route::kFp16x1, r.op == Op::kAvgPoolGeluScaleMax ? Route::kSgemm : Route::kTf32,
             "TF32 allowed (\"high\"): one fp16 product on Hopper, TF32's rounding"};
      } else if (r.op == Op::kAvgPoolGeluScaleMax) {
        p = plan_fp32_exact(r, s);
        p.why = "TF32 allowed, but TF32 on model 98's pooled weight is less accurate than "
                "PyTorch's TF32: float32-exact";
      } else {
        p = {Route::kTf32, Route::kNone, "TF32 allowed (float32 matmul precision \"high\")"};
      }
      break;
    case MatmulPrecision::kBf16:
      return {Route::kBf16x, Route::kNone,
              "bfloat16 products allowed (float32 matmul precision \"medium\")"};
    case MatmulPrecision::kIeee:
      p = plan_fp32_exact(r, s);
      break;
  }
  if (p.route != Route::kSgemm && p.route != Route::kTf32) return p;
  // Batch-1 serving: at most 4 rows make y = x W^T a read of W, which the skinny kernel streams
  // faster than cuBLAS (linear.cu). It needs 16-byte rows; it serves the SGEMM and TF32 plans
  // alike (it is exact float32).
  const Route few = r.m <= kMaxSkinnyRows && r.k % 4 == 0 && r.x_aligned && r.w_aligned
                        ? Route::kSkinny
                        : p.route;
  // Small-batch serving: 3 to 32 rows, the skinny-half kernel on W's and x's fp16 pairs as the
  // 3xFP16 engine splits them (W's pair is that engine's fold, W's bytes: one read of W), three
  // products at that engine's accuracy, the operator's epilogue inside. Kernel time at
  // n = k = 8192 (H100, L2 emptied by a write; bench/gemv_floor.cu pair) 0.110-0.126 ms at
  // 1-32 rows against 0.0998 for a plain read of those bytes. Per call (bench/
  // serving_latency.py, models 39 and 62, L2 emptied by a read) 0.125-0.159 ms at 4-32 rows
  // against SGEMM's 0.146-0.288; at 1-2 rows the skinny kernel's one launch measured 7-10%
  // faster than this route's three (the guard's reset, x's split, the kernel), and at 3-4 rows
  // too where N is under 32 x SMs (W narrow: the skinny kernel splits K between warps, and
  // launches count more than bytes): model 98's pooled weight (512 x 8192, warm L2) took
  // 0.028 ms a call on the skinny kernel against 0.039 on this route. Above 16 rows its blocks
  // hold 64 rows of W: N must give half the SMs one. Where the user named the float32 GEMM
  // (FUSEDOPS_FP32_GEMM), that GEMM runs; where W's fold is made per call (training), SGEMM.
  const bool wide = !narrow_weight(r);
  const int64_t pair_rows = wide ? kMaxSkinnyPairRows : kMaxSkinnyHalfRows;
  const bool skinny_first =
      few == Route::kSkinny && r.m <= (wide ? kSkinnyBeforePairRows : kMaxSkinnyRows);
  if (s.fp32_gemm == Fp32GemmSetting::kAuto && !skinny_first && r.folds_cached &&
      r.m <= pair_rows && r.device.major >= 8 && r.n <= kInt32Max && r.k > 0 &&
      r.k <= kInt32Max / 4) {
    const bool fusable = r.epilogue_fusable && (r.op == Op::kGroupNormLeakyRelu ||
                                                (r.op == Op::kScaleBatchNorm && !r.training));
    return {fusable ? Route::kSkinny3xFp16Fused : Route::kSkinny3xFp16, few,
            fusable ? "few rows: one read of W's fp16 pair, three products, the epilogue in the "
                      "same kernel (weight-streaming tensor-core kernel)"
                    : "few rows: one read of W's fp16 pair, three products (weight-streaming "
                      "tensor-core kernel)"};
  }
  if (few == Route::kSkinny) {
    return {Route::kSkinny, Route::kNone, "at most 4 rows: a read of W (weight-streaming kernel)"};
  }
  return p;
}

// The skinny-half kernel's requirements: mma.sync with bfloat16 (sm_80 on), 16-byte loads
// of whole rows (K a positive multiple of 8, aligned bases), 32-bit sizes.
bool skinny_half_fits(const GemmRequest& r) {
  return r.device.major >= 8 && r.k > 0 && r.k % 8 == 0 && r.x_aligned && r.w_aligned &&
         r.n <= kInt32Max && r.k <= kInt32Max;
}

Plan plan_half(const GemmRequest& r, const Settings& s) {
  if (s.half_gemm == HalfGemmSetting::kCublas) {
    return {Route::kCublasHalf, Route::kNone, "FUSEDOPS_HALF_GEMM=cublas"};
  }
  const bool accurate = r.numerics == Numerics::kAccurate;
  // The Hopper half GEMM's epilogues, "accurate": model 62's whole chain on the float32
  // accumulators; model 39's column moments in training, where its batch is more than the
  // one-read BatchNorm kernel holds (the statistics would take a pass over y of their own: at
  // 16384 x 4096 a 256 MiB read), N a multiple of 4 (the moments epilogue's column pairs).
  const bool moments = r.op == Op::kScaleBatchNorm && r.training && r.epilogue_fusable &&
                       r.m > kMaxBatchNormResidentRows && r.n % 4 == 0;
  const bool sm90_fusable = accurate && (r.op == Op::kGroupNormLeakyRelu || moments);
  // The skinny-half kernel's epilogues: model 62's, and model 39's in eval mode (a per-column
  // affine map).
  const bool skinny_fusable =
      r.epilogue_fusable && accurate &&
      (r.op == Op::kGroupNormLeakyRelu || (r.op == Op::kScaleBatchNorm && !r.training));
  const char* why_not = why_not_sm90_half(r);
  if (sm90_fusable && s.half_gemm == HalfGemmSetting::kFused) {
    TORCH_CHECK(why_not == nullptr, "fusedops ", op_name(r.op),
                ": FUSEDOPS_HALF_GEMM=fused cannot run here: ", why_not, " (got m=", r.m,
                ", n=", r.n, ", k=", r.k, ")");
    return {Route::kSm90HalfFused, Route::kNone, "FUSEDOPS_HALF_GEMM=fused"};
  }
  // Small-batch serving: few rows make the GEMM a read of W. Up to 16 rows the skinny-half
  // kernel takes within 7% of cuBLAS's kernel time (faster with L2 full of dirty lines, slower
  // with clean ones), from 24 rows 3-38% more (bench/gemv_floor.cu, H100: docs/PERFORMANCE.md,
  // issue 25); one launch of our own with the operator's epilogue inside, its call costs the
  // host less than cuBLAS's (no handle, math mode or workspace) plus an epilogue pass: model
  // 39's and 62's half calls at 1-16 rows measured 0.067-0.080 ms against that route's
  // 0.077-0.085. Where W is narrow (N under 32 x SMs: model 98's pooled weight) and nothing is
  // fused, up to 32 rows: x's re-reads through L2 stay few (N / 16 blocks); model 98's half
  // calls at 17-32 rows measured 0.032-0.033 ms against cuBLAS's 0.039-0.045.
  const int64_t half_rows =
      narrow_weight(r) && !skinny_fusable ? kMaxSkinnyHalfNarrowRows : kMaxSkinnyHalfRows;
  if (r.m <= half_rows && skinny_half_fits(r)) {
    if (skinny_fusable) {
      return {Route::kSkinnyHalfFused, Route::kNone,
              "at most 16 rows: a read of W, the epilogue in the same kernel (weight-streaming "
              "tensor-core kernel)"};
    }
    return {Route::kSkinnyHalf, Route::kNone,
            r.m <= kMaxSkinnyHalfRows
                ? "at most 16 rows: a read of W (weight-streaming tensor-core kernel)"
                : "at most 32 rows of a narrow W: a read of W (weight-streaming tensor-core "
                  "kernel)"};
  }
  if (!sm90_fusable) {
    return {Route::kCublasHalf, Route::kNone, "float16/bfloat16 with float32 accumulation"};
  }
  if (why_not != nullptr) {
    return {Route::kCublasHalf, Route::kNone, "the fused half-precision GEMM cannot run here"};
  }
  // Fewer output tiles than SMs would leave SMs idle, where cuBLAS splits K. (Model 39's
  // moments run the 128 x 256 tile.)
  const int64_t tile_n = moments ? cuda::gemm::kCrossTileN : cuda::gemm::kHalfTileN;
  const int64_t tiles = ceil_div(r.m, cuda::gemm::kHalfTileM) * ceil_div(r.n, tile_n);
  if (tiles < r.device.sm_count) {
    return {Route::kCublasHalf, Route::kNone, "too few output tiles to fill the GPU fused"};
  }
  if (moments) {
    return {Route::kSm90HalfFused, Route::kNone,
            "training: the column moments in the Hopper half GEMM's epilogue"};
  }
  return {Route::kSm90HalfFused, Route::kNone, "epilogue fused into the Hopper half GEMM"};
}

}  // namespace

Plan plan_gemm(const GemmRequest& r) {
  const Settings& s = r.settings != nullptr ? *r.settings : settings();
  TORCH_CHECK(s.error.empty(), s.error);
  if (r.m == 0 || r.n == 0) return {Route::kNone, Route::kNone, "empty output"};
  const bool rounds = rounds_intermediates(r.numerics, is_half(r.dtype));
  if (r.op == Op::kSumMaxAvgPoolLse) {
    // The fold never forms y[i, j]; eager needs each one rounded, so it runs the full GEMM.
    return rounds ? Plan{Route::kAtenLinear, Route::kNone, "eager: y as the reference rounds it"}
                  : Plan{Route::kFoldedMatvec, Route::kNone, "sum of a Linear = x . colsum(W)"};
  }
  // Model 98's GEMM runs on the pooled weight, whose rows no reference op writes: its eager
  // rounding happens in the epilogue, after any GEMM.
  if (rounds && r.op != Op::kAvgPoolGeluScaleMax) {
    return {Route::kAtenLinear, Route::kNone, "eager: y as the reference's GEMM rounds it"};
  }
  switch (r.dtype) {
    case DType::kFloat64:
      return {Route::kCublasDouble, Route::kNone, "float64"};
    case DType::kFloat16:
    case DType::kBFloat16:
      return plan_half(r, s);
    case DType::kFloat32:
      break;
  }
  Plan p = plan_float32(r, s);
  if (r.op == Op::kAvgPoolGeluScaleMax && r.epilogue_fusable && r.k > 0) {
    // Model 98's row epilogue sums the engine's K-slices itself: y is never written.
    if (p.route == Route::kFp16x3) p.route = Route::kFp16x3Fused;
    if (p.route == Route::kFp16x1) p.route = Route::kFp16x1Fused;
  }
  // Model 39 in training, more rows than its one-read BatchNorm kernel holds: the statistics
  // would take a pass over y of their own (256 MiB at 16384 x 4096); the one-product GEMM's
  // epilogue takes each tile's column moments instead, and y is read once, to normalize.
  if (r.op == Op::kScaleBatchNorm && r.epilogue_fusable && r.training &&
      r.m > kMaxBatchNormResidentRows && p.route == Route::kFp16x1) {
    p.route = Route::kFp16x1Fused;
    p.why = "TF32 allowed (\"high\"): one fp16 product on Hopper, the column moments in its "
            "epilogue";
  }
  return p;
}

}  // namespace fusedops::plan
