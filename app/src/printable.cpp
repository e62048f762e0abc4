#include "printable.h"

#include <fmt/format.h>

namespace fusedops_app {

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (byte < 0x20 || byte == 0x7f) {
          out += fmt::format("\\x{:02x}", byte);
        } else {
          out += c;
        }
    }
  }
  return out;
}

}  // namespace fusedops_app
