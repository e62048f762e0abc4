// The fusedops settings: the environment variables that steer which GEMM runs, read in this
// one place into one table. Nothing else in the library calls getenv.
//
//   FUSEDOPS_FP32_GEMM    auto | ieee | 3xtf32 | 3xfp16   the float32-accurate GEMM (auto: the
//                         planner's choice; a forced route that cannot run is an error, never
//                         a silent fallback)
//   FUSEDOPS_HALF_GEMM    auto | cublas | fused           float16/bfloat16 with a fused epilogue
//   FUSEDOPS_3XTF32_CHUNK a positive multiple of 32       the 3xTF32 promotion interval (tuning)
//   FUSEDOPS_LOG          routes                          print each new route choice to stderr
//   FUSEDOPS_CHECK_FOLDS  0 | 1                           1: every weight-fold cache hit is
//                         checked against a fresh fold (common/fold_cache.h, "Checking")
//
// The environment is read once, at the first call that needs it; reload_settings() (Python:
// fusedops.reload_settings()) reads it again after a change. A bad value is an error naming the
// variable, the allowed values and the value given: from reload_settings() at once (`import
// fusedops` and fusedops_app call it when they start), and from every operator call, CPU or
// CUDA, while it stays. A setting that forces a CUDA GEMM
// (FUSEDOPS_FP32_GEMM=3xtf32|3xfp16, FUSEDOPS_HALF_GEMM=cublas|fused) is an error at a CPU call
// it would apply to (check_cpu_call). Nothing throws while the library loads: a C++ host that
// loads it (Triton's LD_PRELOAD) gets the error at its first call, not a crash.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace fusedops::plan {

enum class Fp32GemmSetting : uint8_t { kAuto, kIeee, k3xTf32, k3xFp16 };
enum class HalfGemmSetting : uint8_t { kAuto, kCublas, kFused };

struct Settings {
  Fp32GemmSetting fp32_gemm = Fp32GemmSetting::kAuto;
  HalfGemmSetting half_gemm = HalfGemmSetting::kAuto;
  // K-chunk between float32 promotions of 3xTF32's main term: 1024 keeps its error under
  // SGEMM's at the default sizes (docs/PERFORMANCE.md).
  int64_t tf32x3_chunk = 1024;
  bool log_routes = false;
  bool check_folds = false;
  // The first bad value, as the message the planner throws; empty when all are good.
  std::string error;
};

// Parses a table from `lookup` (getenv, or a test's map): pure, no global state.
using EnvLookup = const char* (*)(const char* name, void* context);
Settings parse_settings(EnvLookup lookup, void* context);

// The process's table, parsed from the environment on first use; safe from any thread.
const Settings& settings();
// Reads the environment again; calls already running keep the table they started with.
// Throws c10::Error for a bad value (the new table is in force all the same: calls fail too).
void reload_settings();
// Before a CPU kernel runs an operator of this dtype: throws c10::Error for a bad value in the
// table in force, or a setting that forces a CUDA GEMM on it (the CPU kernels compute exactly).
void check_cpu_call(const char* op, c10::ScalarType dtype);

}  // namespace fusedops::plan
