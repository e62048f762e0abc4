// torch's float32 matmul precision, read for the planner (the one reader of it): the setting
// PyTorch's own matmul obeys, so that C++ and Python callers of the operators get what the
// same setting gives PyTorch.
#pragma once

#include "plan/planner.h"

namespace fusedops::plan {

// torch.backends.cuda.matmul.fp32_precision / torch.set_float32_matmul_precision, CUDA side.
MatmulPrecision cuda_matmul_precision();

}  // namespace fusedops::plan
