#include "model_repository.h"

#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <system_error>
#include <tuple>

#include "app_error.h"
#include "device.h"
#include "exported_model.h"

namespace fusedops_app {

namespace fs = std::filesystem;

namespace {

// Triton's default file names: platform pytorch_libtorch loads model.pt, torch_aoti model.pt2.
constexpr const char* kModelFileNames[] = {"model.pt", "model.pt2"};
constexpr const char* kSampleInputName = "sample_input.pt";
constexpr const char* kReferenceOutputName = "reference_output.pt";
constexpr const char* kReferenceOutputFloat64Name = "reference_output_float64.pt";

bool is_version_folder(const fs::path& path) {
  const std::string name = path.filename().string();
  return fs::is_directory(path) && !name.empty() &&
         std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isdigit(c); });
}

std::vector<fs::path> model_files_in(const fs::path& version_folder) {
  std::vector<fs::path> files;
  for (const char* name : kModelFileNames) {
    if (fs::is_regular_file(version_folder / name)) {
      files.push_back(version_folder / name);
    }
  }
  return files;
}

// Triton serves the highest numeric version folder by default; so do we. Every model file in
// it counts (Triton's config picks one, but a folder holding both gets both checked).
std::vector<fs::path> latest_model_files(const fs::path& model_folder) {
  std::vector<fs::path> best;
  long best_version = -1;
  for (const auto& entry : fs::directory_iterator(model_folder)) {
    if (!is_version_folder(entry.path())) {
      continue;
    }
    std::vector<fs::path> files = model_files_in(entry.path());
    const long version = std::stol(entry.path().filename().string());
    if (!files.empty() && version > best_version) {
      best_version = version;
      best = std::move(files);
    }
  }
  return best;
}

RepositoryModel repository_model(const fs::path& model_folder, const fs::path& model_file) {
  return {model_folder.filename().string(), model_file, model_folder / kSampleInputName,
          model_folder / kReferenceOutputName, model_folder / kReferenceOutputFloat64Name};
}

}  // namespace

std::vector<RepositoryModel> find_repository_models(const fs::path& target) {
  std::error_code error;
  if (!fs::exists(target, error)) {
    throw UsageError(fmt::format("not found: {} (expected a model repository, a model folder "
                                 "or a model.pt / model.pt2)",
                                 target.string()));
  }
  const fs::path absolute = fs::absolute(target).lexically_normal();
  if (fs::is_regular_file(absolute)) {
    // <repo>/<model>/<version>/model.pt: the samples live two levels up.
    const fs::path model_folder = absolute.parent_path().parent_path();
    return {repository_model(model_folder, absolute)};
  }
  std::vector<RepositoryModel> models;
  for (const fs::path& model_file : latest_model_files(absolute)) {
    models.push_back(repository_model(absolute, model_file));
  }
  if (!models.empty()) {
    return models;
  }
  for (const auto& entry : fs::directory_iterator(absolute)) {
    if (!entry.is_directory()) {
      continue;
    }
    for (const fs::path& model_file : latest_model_files(entry.path())) {
      models.push_back(repository_model(entry.path(), model_file));
    }
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

ReferenceCheck check_against_reference(const RepositoryModel& model, const c10::Device& device,
                                       const ToleranceOverride& overrides) {
  for (const fs::path& sample : {model.sample_input, model.reference_output}) {
    if (!fs::is_regular_file(sample)) {
      throw UsageError(fmt::format("{}: {} is missing; re-export the repository with "
                                   "scripted/export.py",
                                   model.name, sample.string()));
    }
  }
  ExportedModel exported = ExportedModel::load(model.model_file, device);
  const at::Tensor input = load_tensor_file(model.sample_input);
  const at::Tensor reference = load_tensor_file(model.reference_output);

  ReferenceCheck check;
  const Tolerance by_dtype = tolerance_for(reference.scalar_type());
  check.tolerance = {overrides.atol.value_or(by_dtype.atol),
                     overrides.rtol.value_or(by_dtype.rtol)};
  check.input_description =
      fmt::format("{} {}", shape_text(input.sizes()), dtype_name(input.scalar_type()));
  spdlog::debug("{}: running {} on {}", model.name, check.input_description, device.str());

  const auto start = std::chrono::steady_clock::now();
  const at::Tensor output = exported.forward(input);
  synchronize(device);
  check.forward_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::optional<at::Tensor> reference_float64;
  if (fs::is_regular_file(model.reference_output_float64)) {
    reference_float64 = load_tensor_file(model.reference_output_float64);
  }
  check.comparison = compare_to_reference(output, reference, check.tolerance, reference_float64);
  return check;
}

}  // namespace fusedops_app
