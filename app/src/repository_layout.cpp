#include "repository_layout.h"

namespace fusedops_app {

std::optional<int64_t> parse_version_folder_name(std::string_view name) {
  if (name.empty()) {
    return std::nullopt;
  }
  int64_t value = 0;
  for (const char c : name) {
    if (c < '0' || c > '9' || __builtin_mul_overflow(value, int64_t{10}, &value) ||
        __builtin_add_overflow(value, int64_t{c - '0'}, &value)) {
      return std::nullopt;
    }
  }
  return value;
}

bool is_safe_relative_name(std::string_view name) {
  if (name.empty()) {
    return false;
  }
  for (const char c : name) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f || c == '\\') {
      return false;
    }
  }
  size_t start = 0;
  for (;;) {
    const size_t end = name.find('/', start);
    const std::string_view part = name.substr(start, end == std::string_view::npos
                                                         ? std::string_view::npos
                                                         : end - start);
    if (part.empty() || part == "." || part == "..") {
      return false;
    }
    if (end == std::string_view::npos) {
      return true;
    }
    start = end + 1;
  }
}

}  // namespace fusedops_app
