// The routes a fused operator's GEMM can take: each names one engine (ops/cuda/gemm/) and, for
// the fused routes, that the operator's epilogue runs inside it (which epilogues each hosts:
// hosts() in planner.h). The planner (planner.h) picks one per call; ops/cuda/linear.cu runs
// the unfused ones, the operator's file the fused ones.
#pragma once

#include <cstdint>

namespace fusedops::plan {

enum class Route : uint8_t {
  kNone,            // nothing to multiply (an empty output), or the fallback of a route that has none
  kFoldedMatvec,    // x . colsum(W) + sum(b): the GEMM folds away (a row-sum epilogue)
  kAtenLinear,      // "eager" float16/bfloat16: ATen's own GEMM in the model's dtype, bias included
  kCublasDouble,    // float64: cuBLAS DGEMM
  kCublasHalf,      // float16/bfloat16 operands, float32 accumulators and output: cuBLAS
  kSm90HalfFused,   // float16/bfloat16 on Hopper, the epilogue on the accumulators
  kSkinny,          // float32, at most 4 rows: the weight-streaming kernel (gemm/skinny.h)
  kSkinnyHalf,      // float16/bfloat16, at most kMaxSkinnyHalfNarrowRows rows: the
                    // weight-streaming tensor-core kernel, float32 output (gemm/skinny_half.h)
  kSkinnyHalfFused, // ... with the epilogue on its tile: the whole operator in one kernel; or,
                    // for a row reduction, split over K, the reduction summing the partials
  kSkinny3xFp16,    // float32, at most kMaxSkinnyPairRows rows: the same kernel on W's and x's
                    // fp16 pairs, three products (the 3xFP16 engine's split and accuracy)
  kSkinny3xFp16Fused,  // ... with the epilogue on its tile (a row reduction: as above)
  kFp16x3,          // float32-accurate on Hopper: the 3xFP16 engine (gemm/gemm_3xfp16.h)
  kFp16x3SplitK,    // ... with K split into slices (too few output tiles to fill the GPU),
                    // summed by a pass of its own
  kFp16x3Fused,     // ... its K-slice partials summed by a row-reduction epilogue
  kFp16x1,          // TF32 allowed, on Hopper: the 3xFP16 engine's main term alone (TF32's
                    // rounding of each operand, at the fp16 rate)
  kFp16x1SplitK,    // ... with K split into slices, as kFp16x3SplitK
  kFp16x1Fused,     // ... its K-slice partials summed by a row-reduction epilogue, or y with
                    // each row tile's column moments from the GEMM's epilogue
  kFp16x2Fused,     // TF32 allowed, a folded weight, on Hopper: the main term and x_hi W_lo (x
                    // rounded as TF32 rounds it, the fold exact), its K-slice partials summed
                    // by a row-reduction epilogue
  kTf32x3,          // float32-accurate: three TF32 products, cuBLAS (gemm/tf32x3.h)
  kSgemm,           // float32 on the CUDA cores: cuBLAS SGEMM, IEEE semantics
  kTf32,            // TF32 allowed by the user: ATen's own matmul
  kBf16x,           // bfloat16 products allowed by the user: cuBLAS's FAST_16BF
};

// A short stable name ("3xfp16", "sm90-half-fused", ...), as FUSEDOPS_LOG and explain print it.
const char* route_name(Route route);

}  // namespace fusedops::plan
