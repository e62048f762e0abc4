// The operators' own weight folds (the GEMM engines define theirs next to their code), shared
// by the CPU and CUDA kernels of each operator.
#pragma once

#include "common/fold_cache.h"

namespace fusedops {

// Model 98: k-row means of W and b (param: k), the pooled Linear.
inline constexpr FoldKind kAvgPoolLinearFold{"avgpool-linear"};
// Model 18: column sums of W and the sum of b.
inline constexpr FoldKind kSumLinearFold{"sum-linear"};

}  // namespace fusedops
