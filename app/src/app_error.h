// How fusedops_app fails: every problem becomes one message and an exit status, never a crash
// or a libtorch stack trace.
#pragma once

#include <stdexcept>
#include <string>

namespace fusedops_app {

// Exit statuses, documented in app/README.md ("Exit status").
enum ExitStatus : int {
  kExitOk = 0,
  // A model was loaded and run but failed while running or did not match its reference.
  kExitModelFailed = 1,
  // What the user gave cannot be used: bad arguments, a missing or corrupt file, an input
  // of the wrong shape or dtype, an operator or a device that is not there.
  kExitUsage = 2,
};

// A problem with the user's files, arguments or machine: reported as is, exit status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The first non-blank line of a message. c10::Error::what() appends the C++ stack trace, and
// TorchScript's ErrorReport starts with a newline and ends with the offending source lines.
std::string first_line(const std::string& message);

// What a libtorch error says, in one line: for an error raised inside a TorchScript forward,
// the interpreter prints a TorchScript traceback first, and the operator's own message
// ("fusedops::...: x must be ...") is its last "RuntimeError:" line.
std::string torch_error_message(const std::exception& error);

}  // namespace fusedops_app
