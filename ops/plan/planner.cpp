#include "plan/planner.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <limits>
#include <optional>

#include "cuda/gemm/heuristics.h"

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
    case Route::kFp16x3SplitK: return "3xfp16-splitk";
    case Route::kFp16x3Fused: return "3xfp16-fused";
    case Route::kFp16x1: return "1xfp16";
    case Route::kFp16x1SplitK: return "1xfp16-splitk";
    case Route::kFp16x1Fused: return "1xfp16-fused";
    case Route::kFp16x2Fused: return "2xfp16-fused";
    case Route::kTf32x3: return "3xtf32";
    case Route::kSgemm: return "sgemm";
    case Route::kTf32: return "tf32";
    case Route::kBf16x: return "bf16x";
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

bool is_half(DType d) { return d == DType::kFloat16 || d == DType::kBFloat16; }

bool hopper(const DeviceFacts& d) { return d.sm90_kernels && d.major == 9 && d.minor == 0; }

// The 3xFP16 engine's own requirements: the sm_90a kernels on an sm_90 device, N a multiple of
// 4 (16-byte output rows for the TMA store), sizes inside CUTLASS's 32-bit dimensions (K padded
// to whole K steps, twice over for the cross GEMM).
const char* why_not_3xfp16(const GemmRequest& r) {
  if (!r.device.sm90_kernels) return "this build has no sm_90a kernels";
  if (!hopper(r.device)) return "the device is not sm_90";
  if (r.n % 4 != 0) return "N is not a multiple of 4";
  if (r.m > kInt32Max || r.n > kInt32Max || 2 * cuda::gemm::padded_k(r.k) > kInt32Max) {
    return "sizes exceed 32 bits";
  }
  return nullptr;
}

// The fused float16/bfloat16 GEMM's requirements beyond the epilogue's: TMA reads rows of
// 16-byte granules from 16-byte aligned addresses.
const char* why_not_sm90_half(const GemmRequest& r) {
  if (!r.device.sm90_kernels) return "this build has no sm_90a kernels";
  if (!hopper(r.device)) return "the device is not sm_90";
  if (!r.epilogue_fits) return "the operator's epilogue cannot take these sizes";
  if (r.k == 0 || r.k % 8 != 0 || !r.x_aligned || !r.w_aligned) {
    return "x and weight must be contiguous, 16-byte aligned, with in_features a positive "
           "multiple of 8";
  }
  if (r.m > kInt32Max || r.n > kInt32Max || r.k > kInt32Max) return "sizes must fit 32 bits";
  return nullptr;
}

// W is narrow where N gives fewer than 32 rows of W per SM (a pooled weight): the
// weight-streaming kernels' blocks then leave SMs idle and re-read x rarely. The skinny rules
// below split on it, float32 and half alike.
bool narrow_weight(const GemmRequest& r) {
  return r.n < 32 * static_cast<int64_t>(r.device.sm_count);
}

double gemm_flop(const GemmRequest& r) {
  return 2.0 * static_cast<double>(r.m) * static_cast<double>(r.n) * static_cast<double>(r.k);
}

// Whether the request's epilogue can run inside `route` at its sizes: the engine hosts it, and
// the epilogue's own conditions hold. Column moments pay only above the rows the operator's
// own pass takes with one read of y, need whole column pairs (N a multiple of 4), and a GEMM
// that is not split over K (a split GEMM's epilogue sees partial sums).
bool fuses(Route route, const GemmRequest& r) {
  if (!hosts(route, r.epilogue) || !r.epilogue_fits) return false;
  if (r.epilogue != Epilogue::kColumnMoments) return true;
  if (r.m <= r.one_pass_rows || r.n % 4 != 0) return false;
  return route != Route::kFp16x1Fused ||
         !cuda::gemm::fp16_engine_slices(r.m, r.n, r.k, cuda::gemm::Products::kOne,
                                         /*partials=*/false, r.device.sm_count).split();
}

// A row reduction on the weight-streaming kernels: they split K over blocks and chunk the
// rows, leaving K-slice partials that the reduction sums as it reads them (the 3xFP16 engine's
// way), so they take more rows than a fused tile holds: up to kMaxSkinnyPartialRows (on an
// H200 level with cuBLAS plus the pass at 96-128 rows of half precision, ahead below and in
// float32: docs/PERFORMANCE.md, "Session of 2026-11-29 (fifth)").
bool skinny_reduces_rows(const GemmRequest& r) {
  return r.epilogue == Epilogue::kRowReduction && hosts(Route::kSkinnyHalfFused, r.epilogue) &&
         r.epilogue_fits;
}

// The 3xFP16 engine pays two passes over x, reads W's fp16 pair 1.5 times and launches five
// kernels: it measured faster than SGEMM and 3xTF32 at large batches (docs/PERFORMANCE.md).
// Few rows make the GEMM a read of W, which SGEMM does once: below 128 rows or 2^30 FLOP the
// others run.
bool large_for_fp16_engine(const GemmRequest& r) {
  return r.m >= kMin3xFp16Rows && gemm_flop(r) >= kMin3xFp16Flop;
}

// float32-exact from 65 rows, where W's fold outlives the call: from 65 rows cuBLAS's SGEMM
// changes tiles and this engine measured faster (docs/PERFORMANCE.md, issue 25), at 33-64 rows
// the same (both behind the skinny kernel's chunks there). Where the fold is made per call
// (passes over W), 128 rows.
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
    case MatmulPrecision::kTf32: {
      // TF32 allowed: on Hopper, where the 3xFP16 engine runs, its main term alone rounds each
      // operand as TF32 does (11 significant bits, per-row scales keeping fp16's range) at
      // twice TF32's rate; its guard and weight check send what fp16 cannot carry to exact
      // paths, a refused weight to TF32 (tests/python/test_tf32.py: its error against float64
      // is no larger than PyTorch's TF32's). Elsewhere, or small: the very GEMM PyTorch's own
      // matmul runs (cuBLASLt with its heuristics). A folded weight (GemmRequest::folded_weight)
      // rounded as TF32 rounds it is less accurate than PyTorch's TF32: the fused route adds
      // x_hi W_lo (two products), which keeps the fold exact; elsewhere it stays float32-exact,
      // and a weight the engine refuses runs SGEMM.
      const bool engine = large_for_fp16_engine(r) && why_not_3xfp16(r) == nullptr;
      if (engine && !r.folded_weight) {
        p = {Route::kFp16x1, Route::kTf32,
             "TF32 allowed (\"high\"): one fp16 product on Hopper, TF32's rounding"};
      } else if (engine && fuses(Route::kFp16x2Fused, r)) {
        return {Route::kFp16x2Fused, Route::kSgemm,
                "TF32 allowed (\"high\"), a folded weight: x rounded as TF32 rounds it, the "
                "fold exact (two fp16 products on Hopper)"};
      } else if (r.folded_weight) {
        p = plan_fp32_exact(r, s);
        p.why = "TF32 allowed, but TF32 on a folded weight is less accurate than PyTorch's "
                "TF32: float32-exact";
      } else {
        p = {Route::kTf32, Route::kNone, "TF32 allowed (float32 matmul precision \"high\")"};
      }
      break;
    }
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
  // Small-batch serving: 3 to 64 rows, the skinny-half kernel on W's and x's fp16 pairs as the
  // 3xFP16 engine splits them (W's pair is that engine's fold, W's bytes: one read of W), three
  // products at that engine's accuracy, the epilogue inside. At 1-2 rows the skinny kernel's
  // one launch beats this route's three (the guard's reset, x's split, the kernel), and at 3-4
  // rows too where W is narrow (the skinny kernel splits K between warps, and launches count
  // more than bytes). Above 16 rows its blocks hold 64 rows of W: N must give half the SMs one;
  // above 32, chunks of 32 rows of x read each block's rows of W together (heuristics.h).
  // Where the user named the float32 GEMM (FUSEDOPS_FP32_GEMM), that GEMM runs; where W's fold
  // is made per call (training), SGEMM. (Measurements: docs/PERFORMANCE.md, issue 25.)
  // A row reduction takes the kernel's K-slice partials (skinny_reduces_rows).
  // With TF32 allowed, TF32's own GEMM (one read of W, at tensor-core rates) is ahead of the
  // three products from 9 rows (on an H200, 39 and 62 at 8192 x 8192: 9-64 rows 0.082-0.097
  // ms a call against 0.102-0.179; at 3-8 rows 0.089-0.095 against 0.083-0.085:
  // docs/PERFORMANCE.md, "Session of 2026-12-01 (third)").
  const bool wide = !narrow_weight(r);
  const int64_t pair_rows = skinny_reduces_rows(r)        ? kMaxSkinnyPartialRows
                            : !wide                       ? kMaxSkinnyHalfRows
                            : p.route == Route::kTf32     ? kMaxSkinnyPairTf32Rows
                                                          : kMaxSkinnyPairRows;
  const bool skinny_first =
      few == Route::kSkinny && r.m <= (wide ? kSkinnyBeforePairRows : kMaxSkinnyRows);
  if (s.fp32_gemm == Fp32GemmSetting::kAuto && !skinny_first && r.folds_cached &&
      r.m <= pair_rows && r.device.major >= 8 && r.n <= kInt32Max && r.k > 0 &&
      r.k <= kInt32Max / 4) {
    if (fuses(Route::kSkinny3xFp16Fused, r)) {
      return {Route::kSkinny3xFp16Fused, few,
              r.epilogue == Epilogue::kRowReduction
                  ? "few rows: one read of W's fp16 pair split over K, three products, the row "
                    "reduction summing the slices (weight-streaming tensor-core kernel)"
                  : "few rows: one read of W's fp16 pair, three products, the epilogue in the "
                    "same kernel (weight-streaming tensor-core kernel)"};
    }
    return {Route::kSkinny3xFp16, few,
            "few rows: one read of W's fp16 pair, three products (weight-streaming tensor-core "
            "kernel)"};
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
  // The fused routes keep y in float32 registers: "accurate" numerics only.
  const bool accurate = r.numerics == Numerics::kAccurate;
  const bool sm90_fusable = accurate && fuses(Route::kSm90HalfFused, r);
  const bool skinny_fusable = accurate && fuses(Route::kSkinnyHalfFused, r);
  const char* why_not = why_not_sm90_half(r);
  // Forced: an epilogue the Hopper GEMM hosts runs there, or the call is an error (one that
  // cannot take the sizes included); other epilogues keep their routes.
  const bool forced = accurate && s.half_gemm == HalfGemmSetting::kFused &&
                      hosts(Route::kSm90HalfFused, r.epilogue) &&
                      (sm90_fusable || !r.epilogue_fits);
  if (forced) {
    TORCH_CHECK(why_not == nullptr, "fusedops ", r.op,
                ": FUSEDOPS_HALF_GEMM=fused cannot run here: ", why_not, " (got m=", r.m,
                ", n=", r.n, ", k=", r.k, ")");
    return {Route::kSm90HalfFused, Route::kNone, "FUSEDOPS_HALF_GEMM=fused"};
  }
  // Small-batch serving: few rows make the GEMM a read of W. Up to 16 rows the skinny-half
  // kernel matches cuBLAS's kernel time, from 24 rows it loses (its re-reads of x through L2
  // grow with the rows); one launch of our own with the epilogue inside costs the host less
  // than cuBLAS's (no handle, math mode or workspace) plus an epilogue pass. Where W is narrow
  // and nothing is fused, up to 32 rows: x's re-reads stay few (N / 16 blocks).
  // (Measurements: bench/gemv_floor.cu and docs/PERFORMANCE.md, issue 25.)
  // A row reduction: its K-slice partials (skinny_reduces_rows).
  const bool reduces = skinny_fusable && skinny_reduces_rows(r);
  const int64_t half_rows = reduces ? kMaxSkinnyPartialRows
                            : narrow_weight(r) && !skinny_fusable ? kMaxSkinnyHalfNarrowRows
                                                                  : kMaxSkinnyHalfRows;
  if (r.m <= half_rows && skinny_half_fits(r)) {
    if (reduces) {
      return {Route::kSkinnyHalfFused, Route::kNone,
              "few rows: a read of W split over K, the row reduction summing the slices "
              "(weight-streaming tensor-core kernel)"};
    }
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
  // Fewer output tiles than SMs would leave SMs idle, where cuBLAS splits K.
  const bool moments = r.epilogue == Epilogue::kColumnMoments;
  const int64_t tile_n = moments ? cuda::gemm::kMomentsTileN : cuda::gemm::kHalfTileN;
  if (cuda::gemm::tiles_of(r.m, cuda::gemm::kHalfTileM) * cuda::gemm::tiles_of(r.n, tile_n) <
      r.device.sm_count) {
    return {Route::kCublasHalf, Route::kNone, "too few output tiles to fill the GPU fused"};
  }
  return {Route::kSm90HalfFused, Route::kNone,
          moments ? "training: the column moments in the Hopper half GEMM's epilogue"
                  : "epilogue fused into the Hopper half GEMM"};
}

// The 3xFP16 engine's routes as the call's sizes and epilogue make them: fused where the
// epilogue runs inside, split over K where the output tiles are too few to fill the GPU.
void name_fp16_engine_route(const GemmRequest& r, Plan& p) {
  const bool one = p.route == Route::kFp16x1;
  if (!one && p.route != Route::kFp16x3) return;
  const Route fused = one ? Route::kFp16x1Fused : Route::kFp16x3Fused;
  if (r.k > 0 && fuses(fused, r)) {
    p.route = fused;
    if (r.epilogue == Epilogue::kColumnMoments) {
      p.why = "TF32 allowed (\"high\"): one fp16 product on Hopper, the column moments in its "
              "epilogue";
    }
    return;
  }
  if (cuda::gemm::fp16_engine_slices(r.m, r.n, r.k, *fp16_products(p.route), /*partials=*/false,
                                     r.device.sm_count).split()) {
    p.route = one ? Route::kFp16x1SplitK : Route::kFp16x3SplitK;
  }
}

}  // namespace

bool hosts(Route route, Epilogue e) {
  switch (route) {
    case Route::kFoldedMatvec: return e == Epilogue::kRowSum;
    case Route::kSm90HalfFused:
      return e == Epilogue::kGroupStatistics || e == Epilogue::kColumnMoments;
    case Route::kSkinnyHalfFused:
    case Route::kSkinny3xFp16Fused:
      return e == Epilogue::kGroupStatistics || e == Epilogue::kColumnAffine ||
             e == Epilogue::kRowReduction;
    case Route::kFp16x3Fused:
    case Route::kFp16x2Fused: return e == Epilogue::kRowReduction;
    case Route::kFp16x1Fused:
      return e == Epilogue::kRowReduction || e == Epilogue::kColumnMoments;
    default: return false;
  }
}

bool fused_route(Route route) {
  return route == Route::kFoldedMatvec || route == Route::kSm90HalfFused ||
         route == Route::kSkinnyHalfFused || route == Route::kSkinny3xFp16Fused ||
         route == Route::kFp16x3Fused || route == Route::kFp16x2Fused ||
         route == Route::kFp16x1Fused;
}

std::optional<cuda::gemm::Products> fp16_products(Route route) {
  switch (route) {
    case Route::kFp16x3:
    case Route::kFp16x3SplitK:
    case Route::kFp16x3Fused: return cuda::gemm::Products::kThree;
    case Route::kFp16x2Fused: return cuda::gemm::Products::kTwo;
    case Route::kFp16x1:
    case Route::kFp16x1SplitK:
    case Route::kFp16x1Fused: return cuda::gemm::Products::kOne;
    default: return std::nullopt;
  }
}

Plan plan_gemm(const GemmRequest& r) {
  const Settings& s = r.settings != nullptr ? *r.settings : settings();
  TORCH_CHECK(s.error.empty(), s.error);
  if (r.m == 0 || r.n == 0) return {Route::kNone, Route::kNone, "empty output"};
  // Eager half precision rounds y as the reference's GEMM writes it: ATen's GEMM. (A folded
  // weight's y is no reference tensor: its rounding happens in the epilogue, after any GEMM.)
  if (rounds_intermediates(r.numerics, is_half(r.dtype)) && !r.folded_weight) {
    return {Route::kAtenLinear, Route::kNone, "eager: y as the reference's GEMM rounds it"};
  }
  if (fuses(Route::kFoldedMatvec, r)) {
    return {Route::kFoldedMatvec, Route::kNone, "sum of a Linear = x . colsum(W)"};
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
  name_fp16_engine_route(r, p);
  return p;
}

}  // namespace fusedops::plan
