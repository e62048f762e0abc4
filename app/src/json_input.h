// JSON the app reads from files (fusedops_manifest.json, fusedops.json), parsed by nlohmann's
// parser with the one check it lacks.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace fusedops_app {

// nlohmann::json::parse(text), refusing an object that holds one key twice: nlohmann keeps the
// last value silently, so a file with {"bytes": 1, "bytes": 2} would say one thing to this app
// and possibly another to the next reader. Throws UsageError naming source and the key, and
// nlohmann::json::exception for text that is not JSON.
nlohmann::json parse_json_without_duplicate_keys(const std::string& text,
                                                 const std::string& source);

}  // namespace fusedops_app
