// fusedops_manifest.json: the SHA-256 and size of every file scripted/export.py writes into a
// model folder, so that a damaged or altered file is refused before anything reads it.
//
// What it protects against: a file damaged or changed after export (a bad copy, a truncated
// download, bit rot, a hand edit). What it does not: a manifest is not signed, so whoever can
// rewrite the files can rewrite it too; it says the folder is what export wrote, not who
// exported it. Trust a model repository as much as its source (a model.pt2 holds machine code).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "file_access.h"

namespace fusedops_app {

inline constexpr const char* kManifestFileName = "fusedops_manifest.json";
// The newest manifest format this app reads (scripted/export.py's MANIFEST_FORMAT).
inline constexpr int kManifestFormat = 1;
// A manifest lists a handful of files; anything near this is not one.
inline constexpr std::uintmax_t kMaxManifestBytes = 1 << 20;

struct ManifestEntry {
  std::string sha256;  // 64 lowercase hex digits
  std::uintmax_t bytes = 0;
};

class Manifest {
 public:
  // Throws UsageError naming source when the text is not a manifest export.py writes: not
  // JSON, a key twice in one object, another format, or an entry whose name leaves the folder ("..", an absolute path),
  // holds a control character, or whose digest is not 64 hex digits.
  static Manifest parse(const std::string& json_text, const std::string& source);

  // The manifest of model_folder, or nullopt when it has none. Throws UsageError for one that
  // cannot be read or parsed.
  static std::optional<Manifest> load(const std::filesystem::path& model_folder);

  const std::filesystem::path& folder() const { return folder_; }
  const std::map<std::string, ManifestEntry>& files() const { return files_; }

  // The file's bytes, read once, after checking them against the entry for relative_name
  // ("1/model.pt", "sample_input.pt"): its size before reading it, its SHA-256 after. Throws
  // UsageError when the manifest does not list the file, it is not a regular file, or its
  // size or SHA-256 differ.
  std::vector<char> read_verified(const std::string& relative_name, const ReadLimit& limit) const;

 private:
  std::filesystem::path folder_;
  std::string source_;
  std::map<std::string, ManifestEntry> files_;
};

// Lowercase hex SHA-256 of the bytes (OpenSSL's EVP interface).
std::string sha256_hex(const void* data, size_t size);

}  // namespace fusedops_app
