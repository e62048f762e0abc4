#include "common/numerics.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <string>

namespace fusedops {

Numerics parse_numerics(const char* op, c10::string_view numerics) {
  if (numerics == "accurate") return Numerics::kAccurate;
  if (numerics == "eager") return Numerics::kEager;
  TORCH_CHECK_VALUE(false, op, ": numerics must be \"accurate\" or \"eager\", got \"",
                    std::string(numerics.data(), numerics.size()), "\"");
}

at::Tensor linear_as_the_reference_writes_it(const at::Tensor& x, const at::Tensor& weight,
                                             const at::Tensor& bias) {
  // In the autocast form (common/checks.h) autocast had cast the bias to x's dtype too.
  return at::linear(x, weight, bias.to(x.scalar_type())).contiguous();
}

}  // namespace fusedops
