// inspect_aoti_package: a model.pt2's zip directory, entry names and metadata, read before
// anything is unpacked. Every entry it would unpack must have a safe relative name.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "aoti_package.h"
#include "app_error.h"
#include "repository_layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<char> bytes(data, data + size);
  try {
    const auto contents = fusedops_app::inspect_aoti_package(bytes, "fuzz.pt2");
    for (const auto& [entry, unpacked_as] : contents.files) {
      if (!fusedops_app::is_safe_relative_name(unpacked_as)) {
        std::abort();
      }
    }
  } catch (const fusedops_app::UsageError&) {
  }
  return 0;
}
