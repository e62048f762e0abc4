#include "common/numerics.h"

#include <c10/util/Exception.h>

#include <string>

namespace fusedops {

Numerics parse_numerics(const char* op, c10::string_view numerics) {
  if (numerics == "accurate") return Numerics::kAccurate;
  if (numerics == "eager") return Numerics::kEager;
  TORCH_CHECK_VALUE(false, op, ": numerics must be \"accurate\" or \"eager\", got \"",
                    std::string(numerics.data(), numerics.size()), "\"");
}

const char* to_string(Numerics numerics) {
  return numerics == Numerics::kEager ? "eager" : "accurate";
}

}  // namespace fusedops
