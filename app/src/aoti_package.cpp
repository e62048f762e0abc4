#include "aoti_package.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "app_error.h"
#include "repository_layout.h"
#include "printable.h"
#include "temporary_directory.h"
#include "zip_reader.h"

namespace fusedops_app {

namespace fs = std::filesystem;

namespace {

// The model's metadata is a few hundred bytes of JSON.
constexpr zip_uint64_t kMaxMetadataBytes = 1 << 20;
constexpr const char* kMetadataSuffix = "wrapper_metadata.json";

std::string package_context(const std::string& source) {
  return fmt::format("cannot load {} as an AOTInductor package (.pt2)", source);
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::unordered_map<std::string, std::string> parse_package_metadata(const std::string& text,
                                                                     const ZipReader& zip) {
  std::unordered_map<std::string, std::string> metadata;
  try {
    const nlohmann::json json = nlohmann::json::parse(text);
    if (!json.is_object()) {
      zip.fail("its metadata is not a JSON object");
    }
    for (const auto& [key, value] : json.items()) {
      metadata[key] = value.get<std::string>();
    }
  } catch (const nlohmann::json::exception& e) {
    zip.fail(fmt::format("its metadata is not a JSON object of strings: {}", e.what()));
  }
  return metadata;
}

void write_new_file(const fs::path& path, const ZipReader& zip, zip_uint64_t index) {
  // O_EXCL | O_NOFOLLOW: never through a link, never over a file; the folder is ours (0700).
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    zip.fail(fmt::format("cannot unpack {}: {}", path.string(), std::strerror(errno)));
  }
  try {
    zip.read(index, [&](const char* data, size_t size) {
      while (size > 0) {
        const ssize_t wrote = ::write(fd, data, size);
        if (wrote < 0 && errno == EINTR) {
          continue;
        }
        if (wrote <= 0) {
          zip.fail(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
        }
        data += wrote;
        size -= static_cast<size_t>(wrote);
      }
    });
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) {
    zip.fail(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
  }
}

}  // namespace

AotiPackageContents inspect_aoti_package(const std::vector<char>& bytes,
                                         const std::string& source) {
  const ZipReader zip(bytes, package_context(source));
  const std::string prefix = zip.top_folder();
  const std::string model_folder = prefix + "data/aotinductor/" + kAotiPackageModelName + "/";
  const std::string constants_folder = prefix + "data/constants/";

  AotiPackageContents contents;
  std::set<std::string> unpacked_names;
  std::uintmax_t unpacked_bytes = 0;
  std::string metadata_text;
  bool has_metadata = false;
  int libraries = 0;
  for (zip_uint64_t index = 0; index < zip.size(); ++index) {
    std::string name = zip.name(index);
    const bool is_folder_entry = !name.empty() && name.back() == '/';
    const std::string path = is_folder_entry ? name.substr(0, name.size() - 1) : name;
    if (!is_safe_relative_name(path)) {
      zip.fail(fmt::format("entry '{}' is not a relative path inside the archive (absolute, "
                           "'..', '.', an empty part, a backslash or a control character); "
                           "nothing was unpacked",
                           printable(name)));
    }
    const mode_t type = zip.file_type(index);
    if (type == S_IFLNK) {
      zip.fail(fmt::format("entry '{}' is a symbolic link; nothing was unpacked",
                           printable(name)));
    }
    if (type != 0 && type != S_IFREG && type != S_IFDIR) {
      zip.fail(fmt::format("entry '{}' is not a regular file (mode {:o})", printable(name),
                           type));
    }
    const zip_uint64_t size = zip.unpacked_size(index);
    if (is_folder_entry) {
      continue;
    }
    std::string unpacked_as;
    if (name.rfind(model_folder, 0) == 0) {
      unpacked_as = name.substr(model_folder.size());
    } else if (name.rfind(constants_folder, 0) == 0) {
      // Weights sit next to the library, as AOTInductor's own loader puts them.
      unpacked_as = name.substr(name.find_last_of('/') + 1);
    } else {
      continue;  // the exported program, archive version, ...: not needed to run
    }
    if (!unpacked_names.insert(unpacked_as).second) {
      zip.fail(fmt::format("two entries unpack to '{}'", printable(unpacked_as)));
    }
    if (size > kMaxPackageUnpackedBytes - unpacked_bytes) {
      zip.fail(fmt::format("its model files unpack to more than {} bytes",
                           kMaxPackageUnpackedBytes));
    }
    unpacked_bytes += size;
    if (ends_with(unpacked_as, ".so")) {
      contents.library = unpacked_as;
      ++libraries;
    } else if (ends_with(unpacked_as, ".blob")) {
      contents.weights_blob = unpacked_as;
    } else if (ends_with(unpacked_as, kMetadataSuffix) && !has_metadata) {
      if (size > kMaxMetadataBytes) {
        zip.fail(fmt::format("its metadata {} is {} bytes", printable(name), size));
      }
      zip.read(index, [&](const char* data, size_t n) { metadata_text.append(data, n); });
      has_metadata = true;
    }
    contents.files.emplace_back(name, unpacked_as);
  }
  if (!has_metadata) {
    zip.fail(fmt::format("no model '{}' with a {} in it", kAotiPackageModelName,
                         kMetadataSuffix));
  }
  if (libraries != 1) {
    zip.fail(fmt::format(
        "it holds {} compiled libraries (.so) for model '{}', expected one; fusedops_app does "
        "not compile a package's C++ sources (that would run the compiler command the package "
        "gives)",
        libraries, kAotiPackageModelName));
  }
  contents.metadata = parse_package_metadata(metadata_text, zip);
  return contents;
}

AotiPackage::AotiPackage() = default;
AotiPackage::~AotiPackage() = default;

std::unique_ptr<AotiPackage> AotiPackage::load(const std::vector<char>& bytes,
                                               const AotiPackageContents& contents,
                                               const c10::Device& device,
                                               const std::string& source) {
  std::unique_ptr<AotiPackage> package(new AotiPackage());
  package->folder_ = std::make_unique<TemporaryDirectory>("pt2");
  const fs::path root = package->folder_->path();
  {
    const ZipReader zip(bytes, package_context(source));
    for (zip_uint64_t index = 0; index < zip.size(); ++index) {
      const std::string name = zip.name(index);
      for (const auto& [entry, unpacked_as] : contents.files) {
        if (entry != name) {
          continue;
        }
        const fs::path target = root / unpacked_as;
        std::error_code error;
        fs::create_directories(target.parent_path(), error);
        if (error) {
          zip.fail(fmt::format("cannot create {}: {}", target.parent_path().string(),
                               error.message()));
        }
        write_new_file(target, zip, index);
      }
    }
  }

  const std::string device_key = contents.metadata.at(kAotiDeviceKey);
  auto& runners = torch::inductor::getAOTIModelRunnerRegistry();
  const auto create = runners.find(device_key);
  if (create == runners.end()) {
    throw UsageError(fmt::format("cannot load {}: this libtorch has no AOTInductor runner for "
                                 "device '{}'",
                                 source, printable(device_key)));
  }
  try {
    package->runner_ = create->second((root / contents.library).string(), /*num_models=*/1,
                                      device.str(), root.string(),
                                      /*run_single_threaded=*/false);
    if (!contents.weights_blob.empty()) {
      package->runner_->update_constant_buffer_from_blob((root / contents.weights_blob).string());
    }
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("cannot load {} as an AOTInductor package (.pt2): {}", source,
                                 torch_error_message(e)));
  }
  if (device.is_cpu()) {
    // The library is mapped and the weights read: nothing reads the folder again, and a crash
    // later cannot leave it behind.
    package->folder_->remove();
  }
  return package;
}

std::vector<at::Tensor> AotiPackage::run(std::vector<at::Tensor> inputs) {
  if (!constants_folded_.load(std::memory_order_acquire)) {
    const std::lock_guard<std::mutex> alone(first_run_);
    if (!constants_folded_.load(std::memory_order_relaxed)) {
      std::vector<at::Tensor> outputs = runner_->run(inputs);
      constants_folded_.store(true, std::memory_order_release);
      return outputs;
    }
  }
  return runner_->run(inputs);
}

}  // namespace fusedops_app
