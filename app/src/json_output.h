// The --json documents of info, check and bench: one JSON document on stdout per run.
#pragma once

#include <nlohmann/json.hpp>

namespace fusedops_app {

// Keys in the order they are set, so that a document reads top to bottom like the text output.
using JsonDocument = nlohmann::ordered_json;

// Prints document (indented, one trailing newline) on stdout and flushes it. Bytes that are not
// UTF-8 (folder names are whatever the file system holds) become U+FFFD instead of an exception;
// NaN and infinities are written as null, as JSON has no such numbers.
void print_json(const JsonDocument& document);

}  // namespace fusedops_app
