// ModelMetadata::parse: fusedops.json, inside a model.pt or a model.pt2.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "app_error.h"
#include "model_metadata.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const fusedops_app::ModelMetadata metadata = fusedops_app::ModelMetadata::parse(text, "fuzz");
    // What the app relies on after a successful parse.
    if (metadata.input.shape.empty() || metadata.output.shape.empty()) {
      std::abort();
    }
    for (const int64_t dim : metadata.input.shape) {
      if (dim < 1) {
        std::abort();
      }
    }
  } catch (const fusedops_app::UsageError&) {
  }
  return 0;
}
