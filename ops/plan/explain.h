// What ran, and why, for users: each planned GEMM is reported here.
//   FUSEDOPS_LOG=routes  prints each distinct choice (operator, dtype, numerics, sizes, route,
//                        reason) once, to stderr, when it is first made.
//   explain              records this thread's choices while a region runs (Python:
//                        fusedops.explain(fn, *args); C++: fusedops::explain(fn); the app's
//                        `info` runs a model's sample input under it).
// Costs nothing on a call unless one of the two is on.
#pragma once

#include <string>
#include <vector>

#include "plan/planner.h"

namespace fusedops::plan {

// The line both print, e.g. "matmul_groupnorm_leakyrelu_sum float16 accurate m=1024 n=8192
// k=8192 cuda:0: sm90-half-fused (epilogue fused into the Hopper half GEMM)".
std::string describe(const GemmRequest& request, const Plan& plan, int device_index);

// Reports a plan as chosen (route) or, when an engine refused its data at run time, as the
// fallback that ran instead (`refused` says why).
void note_plan(const GemmRequest& request, const Plan& plan, int device_index);
void note_fallback(const GemmRequest& request, const Plan& plan, int device_index,
                   const char* refused);

// This thread's recording: on starts an empty record, off stops; take returns the record.
void record_routes(bool on);
std::vector<std::string> take_routes();

}  // namespace fusedops::plan
