// Names in a model repository, checked before they are used as paths or numbers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fusedops_app {

// Triton's version of a folder name: all digits and at most int64's largest value; nullopt
// otherwise (a name of digits above 9223372036854775807 too).
std::optional<int64_t> parse_version_folder_name(std::string_view name);

// Whether name is a relative path inside a folder: non-empty '/'-separated parts, none of them
// "." or "..", no backslash and no control character.
bool is_safe_relative_name(std::string_view name);

}  // namespace fusedops_app
