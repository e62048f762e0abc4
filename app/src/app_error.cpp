#include "app_error.h"

#include <c10/util/Exception.h>

#include <sstream>

namespace fusedops_app {

std::string first_line(const std::string& message) {
  std::istringstream lines(message);
  for (std::string line; std::getline(lines, line);) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) {
      return line;
    }
  }
  return message;
}

std::string torch_error_message(const std::exception& error) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&error);
  const std::string text = torch_error ? torch_error->what_without_backtrace() : error.what();

  constexpr std::string_view kRaisedPrefix = "RuntimeError: ";
  std::string raised;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find(kRaisedPrefix);
    if (at != std::string::npos) {
      raised = line.substr(at + kRaisedPrefix.size());
    }
  }
  return raised.empty() ? first_line(text) : raised;
}

}  // namespace fusedops_app
