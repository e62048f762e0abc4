#include "model_repository.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <system_error>
#include <tuple>

#include "aoti_package.h"
#include "app_error.h"
#include "device.h"
#include "file_access.h"
#include "manifest.h"
#include "printable.h"
#include "repository_layout.h"
#include "triton_config.h"

namespace fusedops_app {

namespace fs = std::filesystem;

namespace {

// Triton's default file names: platform pytorch_libtorch loads model.pt, torch_aoti model.pt2.
constexpr const char* kModelFileNames[] = {"model.pt", "model.pt2"};

std::string describe(const std::error_code& error) { return error.message(); }

// A folder that may hold a model: a real folder, or a link to one. Errors (a link loop, no
// permission) are the model's problem, not the scan's.
bool is_folder(const fs::path& path, std::error_code& error) {
  error.clear();
  const fs::file_status status = fs::status(path, error);
  return !error && status.type() == fs::file_type::directory;
}

// A hidden entry (".tmp-..."): Triton's model names are the visible folders.
bool is_hidden(const fs::path& path) {
  const std::string name = path.filename().string();
  return !name.empty() && name.front() == '.';
}

// A model folder is recognised by what export writes into it (config.pbtxt, the manifest) or
// by a version folder holding a model file.
bool looks_like_model_folder(const fs::path& folder) {
  std::error_code error;
  if (fs::exists(folder / kTritonConfigName, error) ||
      fs::exists(folder / kManifestFileName, error)) {
    return true;
  }
  fs::directory_iterator entries(folder, error);
  for (; !error && entries != fs::directory_iterator(); entries.increment(error)) {
    const std::string name = entries->path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(),
                                     [](unsigned char c) { return std::isdigit(c); })) {
      continue;
    }
    for (const char* file_name : kModelFileNames) {
      std::error_code file_error;
      if (fs::exists(entries->path() / file_name, file_error)) {
        return true;
      }
    }
  }
  return false;
}

// Folders Triton's model lifecycle never takes for versions (r26.05, VersionsToLoad).
constexpr const char* kTritonSpecialFolders[] = {"warmup", "initial_state", "configs"};

// The versions Triton loads of those present, under config.pbtxt's version_policy (protobuf's
// JSON mapping of it; absent: the latest one): "latest" the num_versions highest, "all" every
// one, "specific" those listed that are present (a listed version without a folder is put in
// `missing`: Triton logs an error for it and loads the others).
struct VersionChoice {
  std::vector<int64_t> load;
  std::vector<int64_t> missing;
};
VersionChoice versions_to_load(const std::map<int64_t, fs::path>& present,
                               const nlohmann::json& config) {
  VersionChoice choice;
  const nlohmann::json* policy = config.contains("version_policy") ? &config["version_policy"]
                                                                     : nullptr;
  // int64 fields are strings in protobuf's JSON mapping, uint32 numbers.
  const auto as_int64 = [](const nlohmann::json& v) {
    return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>();
  };
  if (policy != nullptr && policy->contains("specific")) {
    for (const nlohmann::json& v : policy->at("specific").value("versions", nlohmann::json::array())) {
      const int64_t version = as_int64(v);
      (present.count(version) ? choice.load : choice.missing).push_back(version);
    }
  } else if (policy != nullptr && policy->contains("all")) {
    for (const auto& entry : present) choice.load.push_back(entry.first);
  } else {
    int64_t latest = 1;
    if (policy != nullptr && policy->contains("latest")) {
      latest = policy->at("latest").value("num_versions", int64_t{0});
    }
    for (auto it = present.rbegin(); it != present.rend() && latest-- > 0; ++it) {
      choice.load.push_back(it->first);
    }
  }
  std::sort(choice.load.begin(), choice.load.end());
  choice.load.erase(std::unique(choice.load.begin(), choice.load.end()), choice.load.end());
  return choice;
}

// The models of one folder: each model file in every version folder Triton would load
// (config.pbtxt's version_policy, default the highest; version folders named as Triton reads
// them: digits without a leading zero, so "02" is not version 2), or one entry with the
// problem that stops it from being checked.
std::vector<RepositoryModel> models_in_folder(const fs::path& folder, const fs::path& root) {
  RepositoryModel model{folder.filename().string(), folder, {}, root, {}};
  nlohmann::json config = nlohmann::json::object();
  std::error_code error;
  if (fs::exists(folder / kTritonConfigName, error)) {
    try {
      const std::vector<char> text = read_file_bounded(
          folder / kTritonConfigName, {kMaxTritonConfigBytes, "Triton config", ""});
      config = parse_triton_config(std::string(text.begin(), text.end()),
                                   (folder / kTritonConfigName).string());
    } catch (const UsageError& e) {
      model.problem = e.what();
      return {model};
    }
  }
  fs::directory_iterator entries(folder, error);
  if (error) {
    model.problem = fmt::format("cannot read {}: {}", folder.string(), describe(error));
    return {model};
  }
  std::map<int64_t, fs::path> present;
  for (; entries != fs::directory_iterator(); entries.increment(error)) {
    if (error) {
      model.problem = fmt::format("cannot read {}: {}", folder.string(), describe(error));
      return {model};
    }
    const fs::path version_folder = entries->path();
    const std::string name = version_folder.filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(),
                                     [](unsigned char c) { return std::isdigit(c); }) ||
        std::find(std::begin(kTritonSpecialFolders), std::end(kTritonSpecialFolders), name) !=
            std::end(kTritonSpecialFolders)) {
      continue;  // not a version folder; Triton ignores it too
    }
    if (!is_folder(version_folder, error)) {
      if (error) {
        model.problem = fmt::format("cannot read {}: {}", version_folder.string(),
                                    describe(error));
        return {model};
      }
      continue;
    }
    if (name.size() > 1 && name.front() == '0') {
      spdlog::warn("{}: Triton ignores version folder '{}' (a leading zero); not checked",
                   printable(folder.string()), printable(name));
      continue;
    }
    const std::optional<int64_t> version = parse_version_folder_name(name);
    if (!version) {
      model.problem = fmt::format("version folder {} is above {}, the largest version Triton "
                                  "accepts (int64)",
                                  version_folder.string(), std::numeric_limits<int64_t>::max());
      return {model};
    }
    present.emplace(*version, version_folder);
  }
  VersionChoice choice;
  try {
    choice = versions_to_load(present, config);
  } catch (const std::exception& e) {  // a version number protobuf accepted and stoll did not
    model.problem = fmt::format("{}: version_policy: {}", (folder / kTritonConfigName).string(),
                                e.what());
    return {model};
  }
  if (!choice.missing.empty()) {
    model.problem = fmt::format("{}: version_policy lists version {}, which has no folder in {} "
                                "(Triton logs an error and serves the others)",
                                (folder / kTritonConfigName).string(), choice.missing.front(),
                                folder.string());
    return {model};
  }
  if (choice.load.empty()) {
    model.problem = fmt::format("no version folder of {} that Triton would load (folders named "
                                "1, 2, ..., holding model.pt or model.pt2); re-export it with "
                                "scripted/export.py",
                                folder.string());
    return {model};
  }
  std::vector<RepositoryModel> models;
  for (const int64_t version : choice.load) {
    const fs::path& version_folder = present.at(version);
    std::vector<fs::path> files;
    for (const char* file_name : kModelFileNames) {
      const fs::path file = version_folder / file_name;
      const fs::file_status status = fs::status(file, error);
      if (error && error != std::errc::no_such_file_or_directory) {
        model.problem = fmt::format("cannot read {}: {}", file.string(), describe(error));
        return {model};
      }
      if (status.type() == fs::file_type::regular) {
        files.push_back(file);
      }
    }
    if (files.empty()) {
      model.problem = fmt::format("no model.pt or model.pt2 in {}, a version Triton would load; "
                                  "re-export it with scripted/export.py",
                                  version_folder.string());
      return {model};
    }
    for (fs::path& file : files) {
      RepositoryModel found = model;
      found.model_file = std::move(file);
      models.push_back(std::move(found));
    }
  }
  return models;
}

// A file of the model folder: verified against the manifest when there is one.
std::vector<char> read_folder_file(const std::optional<Manifest>& manifest,
                                   const RepositoryModel& model, const std::string& name,
                                   const ReadLimit& limit) {
  if (manifest) {
    return manifest->read_verified(name, limit);
  }
  return read_file_bounded(model.folder / name, limit);
}

}  // namespace

std::vector<RepositoryModel> find_repository_models(const fs::path& target) {
  std::error_code error;
  const fs::file_status status = fs::status(target, error);
  if (status.type() == fs::file_type::not_found) {
    throw UsageError(fmt::format("not found: {} (expected a model repository, a model folder "
                                 "or a model.pt / model.pt2)",
                                 target.string()));
  }
  if (error) {
    throw UsageError(fmt::format("cannot read {}: {}", target.string(), describe(error)));
  }
  const fs::path absolute = fs::absolute(target).lexically_normal();
  if (status.type() == fs::file_type::regular) {
    // <repo>/<model>/<version>/model.pt: the samples live two levels up.
    const fs::path model_folder = absolute.parent_path().parent_path();
    return {{model_folder.filename().string(), model_folder, absolute,
             fs::weakly_canonical(model_folder), {}}};
  }
  const fs::path root = fs::canonical(absolute, error);
  if (error) {
    throw UsageError(fmt::format("cannot read {}: {}", target.string(), describe(error)));
  }
  if (looks_like_model_folder(absolute)) {
    return models_in_folder(absolute, root);
  }
  std::vector<RepositoryModel> models;
  fs::directory_iterator entries(absolute, error);
  for (; !error && entries != fs::directory_iterator(); entries.increment(error)) {
    const fs::path folder = entries->path();
    if (is_hidden(folder)) {
      continue;  // not a model: scripted/export.py builds a folder in .tmp-* before renaming it
    }
    std::error_code folder_error;
    if (!is_folder(folder, folder_error)) {
      if (folder_error) {  // a link loop, a dangling link: that entry's problem
        models.push_back({folder.filename().string(), folder, {}, root,
                          fmt::format("cannot read {}: {}", folder.string(),
                                      describe(folder_error))});
      }
      continue;
    }
    if (!looks_like_model_folder(folder)) {
      continue;
    }
    for (RepositoryModel& model : models_in_folder(folder, root)) {
      models.push_back(std::move(model));
    }
  }
  if (error) {
    throw UsageError(fmt::format("cannot read {}: {}", target.string(), describe(error)));
  }
  if (models.empty()) {
    throw UsageError(fmt::format("no model in {}: expected <model>/<version>/model.pt or "
                                 "model.pt2 folders, as scripted/export.py writes",
                                 target.string()));
  }
  std::sort(models.begin(), models.end(), [](const RepositoryModel& a, const RepositoryModel& b) {
    return std::tie(a.name, a.model_file) < std::tie(b.name, b.model_file);
  });
  return models;
}

void check_model_config(const std::string& config_text, const std::string& folder_name,
                        const ExportedModel& model, const std::string& source) {
  if (!model.metadata()) {
    throw UsageError(fmt::format("{}: the model has no {}, so its config cannot be checked",
                                 source, kMetadataFileName));
  }
  const ModelMetadata& metadata = *model.metadata();
  const bool is_package = model.format() == ModelFormat::kAotiPackage;
  TritonConfigExpectation expected;
  expected.model_name = folder_name;
  expected.model_file = model.path().filename().string();
  expected.platform = is_package ? "torch_aoti" : "pytorch_libtorch";
  if (is_package) {
    const auto key = model.aoti_metadata().find(kAotiDeviceKey);
    expected.pinned_kind =
        key != model.aoti_metadata().end() && key->second == "cuda" ? "KIND_GPU" : "KIND_CPU";
  }
  expected.input = {"INPUT__0", triton_data_type(dtype_name(metadata.input.dtype)),
                    metadata.input.shape};
  expected.output = {"OUTPUT__0", triton_data_type(dtype_name(metadata.output.dtype)),
                     metadata.output.shape};
  expected.rows_independent = metadata.rows_independent;
  expected.updates_state = metadata.mode == "train";
  check_triton_config(parse_triton_config(config_text, source), expected, source);
}

namespace {

ReferenceCheck check_once(const RepositoryModel& model, const c10::Device& device,
                          const ToleranceOverride& overrides,
                          const RepositoryReadOptions& options) {
  for (const fs::path& path :
       {model.folder, model.model_file, model.folder / kManifestFileName,
        model.folder / kTritonConfigName, model.folder / kSampleInputName,
        model.folder / kReferenceOutputName, model.folder / kReferenceOutputFloat64Name}) {
    check_inside(path, model.root, options.load.allow_external_symlinks);
  }
  const std::optional<Manifest> manifest = Manifest::load(model.folder);
  if (!manifest && !options.load.allow_unverified) {
    throw UsageError(fmt::format("{} has no {}, so its files cannot be checked against what "
                                 "scripted/export.py wrote; re-export it, or pass "
                                 "--allow-unverified",
                                 model.folder.string(), kManifestFileName));
  }
  for (const char* sample : {kSampleInputName, kReferenceOutputName}) {
    if (!fs::is_regular_file(model.folder / sample)) {
      throw UsageError(fmt::format("{} is missing; re-export the repository with "
                                   "scripted/export.py",
                                   (model.folder / sample).string()));
    }
  }
  const ReadLimit tensor_limit{options.max_tensor_file_bytes, "tensor file",
                               kMaxTensorFileOption};
  LoadOptions load = options.load;
  load.root = model.root;  // links between the repository's folders are followed, as above
  ExportedModel exported = ExportedModel::load(model.model_file, device, load);
  const std::vector<char> config =
      read_folder_file(manifest, model, kTritonConfigName,
                       {kMaxTritonConfigBytes, "Triton config", ""});
  check_model_config(std::string(config.begin(), config.end()), model.name, exported,
                     (model.folder / kTritonConfigName).string());
  const at::Tensor input =
      tensor_from_bytes(read_folder_file(manifest, model, kSampleInputName, tensor_limit),
                        (model.folder / kSampleInputName).string(), options.max_tensor_file_bytes);
  const at::Tensor reference =
      tensor_from_bytes(read_folder_file(manifest, model, kReferenceOutputName, tensor_limit),
                        (model.folder / kReferenceOutputName).string(),
                        options.max_tensor_file_bytes);
  std::optional<at::Tensor> reference_float64;
  const bool has_float64 = manifest ? manifest->files().count(kReferenceOutputFloat64Name) > 0
                                    : fs::is_regular_file(model.folder / kReferenceOutputFloat64Name);
  if (has_float64) {
    reference_float64 = tensor_from_bytes(
        read_folder_file(manifest, model, kReferenceOutputFloat64Name, tensor_limit),
        (model.folder / kReferenceOutputFloat64Name).string(), options.max_tensor_file_bytes);
  }
  if (reference.sizes().vec() != exported.metadata()->output.shape) {
    throw UsageError(fmt::format("{}: the reference output is {}, fusedops.json says {}",
                                 model.folder.string(), shape_text(reference.sizes()),
                                 shape_text(exported.metadata()->output.shape)));
  }

  ReferenceCheck check;
  const Tolerance by_dtype = tolerance_for(reference.scalar_type());
  check.tolerance = {overrides.atol.value_or(by_dtype.atol),
                     overrides.rtol.value_or(by_dtype.rtol)};
  check.input_description =
      fmt::format("{} {}", shape_text(input.sizes()), dtype_name(input.scalar_type()));
  spdlog::debug("{}: running {} on {}", printable(model.name), check.input_description,
                device.str());

  const auto start = std::chrono::steady_clock::now();
  const at::Tensor output = exported.forward(input);
  synchronize(device);
  check.forward_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  check.comparison = compare_to_reference(output, reference, check.tolerance, reference_float64);
  return check;
}

}  // namespace

ReferenceCheck check_against_reference(const RepositoryModel& model, const c10::Device& device,
                                       const ToleranceOverride& overrides,
                                       const RepositoryReadOptions& options) {
  if (!model.problem.empty()) {
    throw UsageError(model.problem);
  }
  // The manifest, the model, config.pbtxt and the samples, all from one export of the folder.
  return read_consistently(model.folder,
                           [&] { return check_once(model, device, overrides, options); });
}

}  // namespace fusedops_app
