// The GEMM behind every fused operator, planned and run: plan_linear asks the planner
// (plan/planner.h) which route a call takes, run_linear runs the unfused routes, y = x W^T
// (+ b for the eager route), written in the accumulation dtype (float32, or float64 for
// float64 inputs) so that the operator's epilogue sees unrounded values. The fused routes
// (the operator's epilogue inside the GEMM) are run by the operator itself.
#pragma once

#include <ATen/core/Tensor.h>

#include "common/numerics.h"
#include "plan/planner.h"

namespace fusedops::cuda {

// A planned call: the request as the planner saw it (for the explanation of a fallback) and
// its plan. x and weight: the tensors the GEMM will read (contiguous), on the current device.
struct PlannedLinear {
  plan::GemmRequest request;
  plan::Plan plan;
  int device_index = 0;
};
// What an operator tells the planner of itself (plan::GemmRequest's fields of the same names).
struct LinearNeeds {
  const char* op = "";
  plan::Epilogue epilogue = plan::Epilogue::kNone;
  bool epilogue_fits = true;
  int64_t one_pass_rows = 0;
  bool folded_weight = false;
  bool autocast_form = false;  // the operator was called in its autocast form (common/checks.h)
};
// cache_folds: the call's (W's folds outlive it).
PlannedLinear plan_linear(const LinearNeeds& needs, const at::Tensor& x, const at::Tensor& weight,
                          Numerics numerics, bool cache_folds);

// y of an unfused route; of a fused route, its fallback: the operator ran the fused route
// itself and gets here only where its engine refused the data (the 3xFP16 weight check).
// x contiguous, and weight contiguous or a transposed view (W^T of a contiguous W: gemm_nt's b,
// which the 3xFP16 routes read as it lies and the others copy), one dtype, on the current device;
// weight_key: the caller's weight tensor, which owns the engines' cached folds of it (weight
// may be its contiguous copy). bias is added only by the eager route (kAtenLinear: y exactly
// as the reference's nn.Linear writes it, bias included); `bias_added` says so.
struct LinearOutput {
  at::Tensor y;
  bool bias_added = false;
};
LinearOutput run_linear(const PlannedLinear& planned, const at::Tensor& x, const at::Tensor& weight,
                        const at::Tensor& bias, const at::Tensor& weight_key, bool cache_folds);

// y as an epilogue of output dtype `out_dtype` reads it: as it is (the accumulation dtype, or
// the eager route's model dtype), or, for the eager route in the autocast form (a half y and
// a float32 chain after it, as the reference's float32 ops widen it), widened.
at::Tensor y_for_epilogue(const LinearOutput& linear, at::ScalarType out_dtype);

// Runs `planned`'s fallback when its route's engine refused the data at run time, reporting
// `refused` as the reason.
LinearOutput run_fallback(const PlannedLinear& planned, const at::Tensor& x,
                          const at::Tensor& weight, const at::Tensor& bias,
                          const at::Tensor& weight_key, bool cache_folds, const char* refused);

// Why the 3xFP16 engine refuses a weight: its range check, once the verdict is on the host
// (gemm/gemm_3xfp16.h), or a first call inside a CUDA-graph capture (no fold is made there).
inline constexpr const char* kWeightRefused3xFp16 =
    "the 3xFP16 engine refused the weight (inf/nan, rows 2^26 below its largest, or a first "
    "call inside a CUDA-graph capture)";

}  // namespace fusedops::cuda
