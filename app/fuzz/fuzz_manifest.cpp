// Manifest::parse: fusedops_manifest.json. Any accepted entry name must be a safe relative path.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "app_error.h"
#include "manifest.h"
#include "repository_layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const fusedops_app::Manifest manifest = fusedops_app::Manifest::parse(text, "fuzz");
    for (const auto& [name, entry] : manifest.files()) {
      if (!fusedops_app::is_safe_relative_name(name) || entry.sha256.size() != 64) {
        std::abort();
      }
    }
  } catch (const fusedops_app::UsageError&) {
  }
  return 0;
}
