#include "plan/precision.h"

#include <ATen/Context.h>

namespace fusedops::plan {

MatmulPrecision cuda_matmul_precision() {
  switch (at::globalContext().float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL)) {
    case at::Float32Precision::TF32: return MatmulPrecision::kTf32;
    case at::Float32Precision::BF16: return MatmulPrecision::kBf16;
    default: return MatmulPrecision::kIeee;
  }
}

}  // namespace fusedops::plan
