// The GEMM planner: the one place that decides which GEMM runs for a fused operator, and why.
// A pure function of a request (what the operator's epilogue needs, the dtypes, numerics,
// torch's float32 matmul precision, the settings, the device, the sizes and alignment) to a
// route (route.h) with a one-line reason. It matches what the operator's epilogue needs with
// what each fused route's engine hosts (hosts() in planner.cpp) and never asks which operator
// calls. The rules in planner.cpp are the whole policy, the shapes inside each engine are
// cuda/gemm/heuristics.h's, and tests/cpp/test_planner.cpp walks the rules as a table on the CPU.
//
// How to add a route: a Route value and its name (route.h), its engine (ops/cuda/gemm/), one
// rule in plan_gemm (planner.cpp), a row in the table test; ops/cuda/linear.cu runs it when it
// is an unfused GEMM, the operator's file when it fuses its epilogue.
#pragma once

#include <cstdint>
#include <optional>

#include "common/numerics.h"
#include "cuda/gemm/heuristics.h"
#include "plan/route.h"
#include "plan/settings.h"

namespace fusedops::plan {

// What an operator's epilogue needs from the GEMM's output, as an engine can host it. An
// operator names its own (GemmRequest::epilogue), and whether it can take the call's sizes.
enum class Epilogue : uint8_t {
  kNone,             // a pass over y after the GEMM
  kRowSum,           // only y's row sums: y = x W^T folds to x . colsum(W), a matvec
  kRowReduction,     // each row of y reduced to one value: the engine's K-slice partials are
                     // summed inside the reduction, y never written
  kColumnAffine,     // a per-column affine map of each element of y
  kGroupStatistics,  // statistics of groups of adjacent columns (a group inside one tile row)
  kColumnMoments,    // statistics of each column over all rows: y and each row tile's moments
};

enum class DType : uint8_t { kFloat32, kFloat64, kFloat16, kBFloat16 };
const char* dtype_name(DType dtype);

// torch's float32 matmul precision on CUDA (torch.backends.cuda.matmul.fp32_precision,
// torch.set_float32_matmul_precision): "ieee" (highest), "tf32" (high), "bf16" (medium).
enum class MatmulPrecision : uint8_t { kIeee, kTf32, kBf16 };

// The facts of the device a call runs on (cuda/device_facts.h reads them once per device).
struct DeviceFacts {
  int major = 0, minor = 0;
  int sm_count = 0;
  bool sm90_kernels = false;  // this build holds the sm_90a kernels (CUTLASS, 90a in the arch list)
};

struct GemmRequest {
  const char* op = "";  // the operator's name: for messages and explain only
  DType dtype = DType::kFloat32;  // the model's dtype: x's and weight's
  Numerics numerics = Numerics::kAccurate;
  MatmulPrecision precision = MatmulPrecision::kIeee;
  // y (m, n) = x (m, k) W (n, k)^T, as the GEMM sees it.
  int64_t m = 0, n = 0, k = 0;
  // x and the weight as the GEMM reads them (contiguous) start on 16-byte boundaries.
  bool x_aligned = true, w_aligned = true;
  // What the operator's epilogue needs, and whether it can take these sizes inside a GEMM (a
  // group it can reduce, aligned parameters, ...).
  Epilogue epilogue = Epilogue::kNone;
  bool epilogue_fits = true;
  // The most rows the operator's own pass after an unfused GEMM takes with one read of y:
  // column moments from the GEMM's epilogue pay only above it.
  int64_t one_pass_rows = 0;
  // W is a fold of the reference's weight (its rows averaged over a pool), not the weight the
  // reference multiplies: no reference op writes y, so eager rounding happens in the epilogue;
  // and TF32's rounding of a folded row is not averaged over the pool as the reference's
  // rounding of its rows is (less accurate than PyTorch's TF32), so TF32 runs only where fp16's
  // per-row scales keep it as accurate.
  bool folded_weight = false;
  // W's folds outlive the call: cached, and the call does not train the weights (a training
  // step's optimizer writes them after it). Where they do not, a route whose fold of W is made
  // per call (W's fp16 pair: passes over W) costs more than the GEMM itself at
  // small batches, and training follows the reference's GEMM.
  bool folds_cached = true;
  // The operator's autocast form (common/checks.h): x and weight in dtype, everything after
  // the Linear float32; the routes are dtype's, the epilogue float32.
  bool autocast_form = false;
  DeviceFacts device;
  const Settings* settings = nullptr;  // null: the process's settings()
};

struct Plan {
  Route route = Route::kNone;
  // What runs when the route refuses the data at run time (the 3xFP16 engine's weight range
  // check, or its first call inside a CUDA-graph capture): kNone where nothing can refuse.
  Route fallback = Route::kNone;
  const char* why = "";  // one line, a literal: FUSEDOPS_LOG and explain print it
};

// Throws c10::Error for a bad setting (settings.h) or a forced route that cannot run here,
// naming the setting and why.
Plan plan_gemm(const GemmRequest& request);

// Whether a fused route's engine hosts an epilogue (the capability table), and whether a route
// is fused (the operator's file runs it; ops/cuda/linear.cu runs the others).
bool hosts(Route route, Epilogue epilogue);
bool fused_route(Route route);

// The products the 3xFP16 engine sums on one of its routes; none for another engine's route.
std::optional<cuda::gemm::Products> fp16_products(Route route);

// Thresholds of the rules, exposed for the table test. Why each value: planner.cpp.
inline constexpr int64_t kMaxSkinnyRows = 4;
inline constexpr int64_t kMaxSkinnyHalfRows = 16;
inline constexpr int64_t kMaxSkinnyHalfNarrowRows = 32;  // unfused, N < 32 SMs
inline constexpr int64_t kMaxSkinnyPairRows = 64;  // float32, where N >= 32 SMs (else 16)
inline constexpr int64_t kMaxSkinnyPairTf32Rows = 8;  // ... where TF32 is allowed
inline constexpr int64_t kSkinnyBeforePairRows = 2;  // float32, N >= 32 SMs: skinny first
inline constexpr int64_t kMaxSkinnyPartialRows = 128;  // a row reduction's K-slice partials
inline constexpr int64_t kMin3xFp16Rows = 128;
inline constexpr int64_t kMin3xFp16CachedRows = 65;  // float32-exact, W's fold cached
inline constexpr double kMin3xFp16Flop = 1073741824.0;  // 2^30
inline constexpr int64_t kMin3xTf32Rows = 128;
inline constexpr int64_t kMin3xTf32Cols = 2048;

}  // namespace fusedops::plan
