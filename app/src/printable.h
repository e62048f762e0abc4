// Text from files and folder names, made safe to print: one line, no terminal control.
#pragma once

#include <string>
#include <string_view>

namespace fusedops_app {

// text with every control character and the backslash written as an escape (\n, \t, \x1b,
// \\), so that a name read from a file or a folder cannot start a line of its own (a fake
// "PASS" line in check's output) or move the terminal's cursor.
std::string printable(std::string_view text);

}  // namespace fusedops_app
