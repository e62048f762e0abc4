// tensor_from_bytes: a sample input, a reference output or a `run --input` file. Any bytes
// must end in a tensor that fits its storage or a UsageError; anything else escapes and is a
// finding (an uncaught exception aborts, as a crash does).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "app_error.h"
#include "tensor_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<char> bytes(data, data + size);
  try {
    const at::Tensor tensor = fusedops_app::tensor_from_bytes(bytes, "fuzz.pt", 1 << 24);
    // Every element is read: an extent past the storage would show here under ASan.
    (void)tensor.sum().item<double>();
  } catch (const fusedops_app::UsageError&) {
  }
  return 0;
}
