#include "manifest.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <system_error>

#include "app_error.h"
#include "json_input.h"
#include "printable.h"
#include "repository_layout.h"

namespace fusedops_app {

namespace fs = std::filesystem;

namespace {

bool is_sha256_hex(const std::string& text) {
  return text.size() == 64 && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

std::string sha256_hex(const void* data, size_t size) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_size = 0;
  if (EVP_Digest(data, size, digest, &digest_size, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL could not compute a SHA-256");
  }
  std::string hex;
  hex.reserve(2 * digest_size);
  for (unsigned int i = 0; i < digest_size; ++i) {
    hex += fmt::format("{:02x}", digest[i]);
  }
  return hex;
}

Manifest Manifest::parse(const std::string& json_text, const std::string& source) {
  Manifest manifest;
  manifest.source_ = source;
  try {
    const nlohmann::json json = parse_json_without_duplicate_keys(json_text, source);
    const int format = json.at("format").get<int>();
    if (format < 1 || format > kManifestFormat) {
      throw UsageError(fmt::format("{} has format {}; this app reads format {}", source, format,
                                   kManifestFormat));
    }
    const std::string algorithm = json.at("algorithm").get<std::string>();
    if (algorithm != "sha256") {
      throw UsageError(fmt::format("{} uses digest '{}'; expected sha256", source, algorithm));
    }
    const nlohmann::json& files = json.at("files");
    if (!files.is_object() || files.empty()) {
      throw UsageError(fmt::format("{} lists no files", source));
    }
    for (const auto& [name, entry] : files.items()) {
      if (!is_safe_relative_name(name)) {
        throw UsageError(fmt::format("{} lists '{}', which is not a relative path inside the "
                                     "model folder",
                                     source, printable(name)));
      }
      ManifestEntry parsed{entry.at("sha256").get<std::string>(),
                           entry.at("bytes").get<std::uintmax_t>()};
      if (!is_sha256_hex(parsed.sha256)) {
        throw UsageError(fmt::format("{}: the sha256 of {} is '{}'; expected 64 lowercase hex "
                                     "digits",
                                     source, name, printable(parsed.sha256)));
      }
      manifest.files_.emplace(name, std::move(parsed));
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{} is not a manifest scripted/export.py writes: {}", source,
                                 e.what()));
  }
  return manifest;
}

std::optional<Manifest> Manifest::load(const fs::path& model_folder) {
  const fs::path path = model_folder / kManifestFileName;
  std::error_code error;
  const fs::file_status status = fs::symlink_status(path, error);
  if (status.type() == fs::file_type::not_found) {
    return std::nullopt;
  }
  const std::vector<char> bytes =
      read_file_bounded(path, {kMaxManifestBytes, "manifest", ""});
  Manifest manifest = parse(std::string(bytes.begin(), bytes.end()), path.string());
  manifest.folder_ = model_folder;
  return manifest;
}

std::vector<char> Manifest::read_verified(const std::string& relative_name,
                                          const ReadLimit& limit) const {
  const fs::path path = folder_ / relative_name;
  const auto entry = files_.find(relative_name);
  if (entry == files_.end()) {
    throw UsageError(fmt::format("{} is not listed in {}, so it cannot be verified; re-export "
                                 "the model folder with scripted/export.py",
                                 path.string(), source_));
  }
  // The size first, from the open file: a file of the wrong size is refused before a byte
  // of it is read (a sparse 4 GiB model.pt costs nothing).
  RegularFile file = RegularFile::open(path, limit.what);
  if (file.size() != entry->second.bytes) {
    throw UsageError(fmt::format("{} is {} bytes, {} says {}: the file is damaged or was changed "
                                 "after export; re-export it",
                                 path.string(), file.size(), kManifestFileName,
                                 entry->second.bytes));
  }
  const std::vector<char> bytes = file.read_all(limit);
  const std::string digest = sha256_hex(bytes.data(), bytes.size());
  if (digest != entry->second.sha256) {
    throw UsageError(fmt::format("{} has SHA-256 {}, {} says {}: the file is damaged or was "
                                 "changed after export; re-export it",
                                 path.string(), digest, kManifestFileName,
                                 entry->second.sha256));
  }
  return bytes;
}

}  // namespace fusedops_app
