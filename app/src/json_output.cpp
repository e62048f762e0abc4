#include "json_output.h"

#include <cstdio>
#include <string>

namespace fusedops_app {

void print_json(const JsonDocument& document) {
  const std::string text =
      document.dump(2, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

}  // namespace fusedops_app
