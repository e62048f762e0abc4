// Reading files the app does not trust, with a bound on how much it reads, and writing files
// without ever destroying one: a temporary file in the target's folder, renamed over it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace fusedops_app {

// What a bounded read is about, for its messages: "tensor file", "model file", ...
struct ReadLimit {
  std::uintmax_t max_bytes;
  std::string what;
  // The option that raises the limit ("--max-tensor-file-mib"); empty when there is none.
  std::string option;
};

// The whole file, read from one open descriptor (the size checked is the size read). Throws
// UsageError for a missing or unreadable file, a folder, or a file larger than the limit
// ("<path> is 3221225472 bytes, more than the 1073741824-byte limit for a tensor file (raise it
// with --max-tensor-file-mib)").
std::vector<char> read_file_bounded(const std::filesystem::path& path, const ReadLimit& limit);

// Writes bytes to a new temporary file in path's folder, flushes it to disk and renames it to
// path, so that a reader sees the old file or the new one, never a part; a failure leaves the
// old file as it was and no temporary file behind. Throws UsageError naming path and the cause.
void write_file_atomically(const std::filesystem::path& path, const std::vector<char>& bytes);

}  // namespace fusedops_app
