// The scanner's handling of names from the file system: version folders (Triton's int64),
// relative names (manifest entries, archive entries) and the escaping of names in output.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "printable.h"
#include "repository_layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view name(reinterpret_cast<const char*>(data), size);
  if (const auto version = fusedops_app::parse_version_folder_name(name)) {
    // Accepted only as Triton would: digits whose value survives the round trip.
    const std::string digits = std::to_string(*version);
    if (*version < 0 || name.find_first_not_of("0123456789") != std::string_view::npos ||
        name.substr(name.find_first_not_of('0') == std::string_view::npos
                        ? name.size() - 1
                        : name.find_first_not_of('0')) != digits) {
      std::abort();
    }
  }
  if (fusedops_app::is_safe_relative_name(name)) {
    const std::string wrapped = "/" + std::string(name) + "/";
    if (name.front() == '/' || wrapped.find("/../") != std::string::npos ||
        wrapped.find("/./") != std::string::npos || name.find('\0') != std::string_view::npos) {
      std::abort();
    }
  }
  for (const char c : fusedops_app::printable(name)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      std::abort();  // a control character reached the output
    }
  }
  return 0;
}
