#include "model_repository.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <system_error>

#include "app_error.h"
#include "device.h"
#include "exported_model.h"

namespace fusedops_app {

namespace fs = std::filesystem;

namespace {

constexpr const char* kModelFileName = "model.pt";
constexpr const char* kSampleInputName = "sample_input.pt";
constexpr const char* kReferenceOutputName = "reference_output.pt";

bool is_version_folder(const fs::path& path) {
  const std::string name = path.filename().string();
  return fs::is_directory(path) && !name.empty() &&
         std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isdigit(c); });
}

// Triton serves the highest numeric version folder by default; so do we.
std::optional<fs::path> latest_model_file(const fs::path& model_folder) {
  std::optional<fs::path> best;
  long best_version = -1;
  for (const auto& entry : fs::directory_iterator(model_folder)) {
    if (!is_version_folder(entry.path()) || !fs::is_regular_file(entry.path() / kModelFileName)) {
      continue;
    }
    const long version = std::stol(entry.path().filename().string());
    if (version > best_version) {
      best_version = version;
      best = entry.path() / kModelFileName;
    }
  }
  return best;
}

RepositoryModel repository_model(const fs::path& model_folder, const fs::path& model_file) {
  return {model_folder.filename().string(), model_file, model_folder / kSampleInputName,
          model_folder / kReferenceOutputName};
}

}  // namespace

std::vector<RepositoryModel> find_repository_models(const fs::path& target) {
  std::error_code error;
  if (!fs::exists(target, error)) {
    throw UsageError(fmt::format("not found: {} (expected a model repository, a model folder "
                                 "or a model.pt)",
                                 target.string()));
  }
  const fs::path absolute = fs::absolute(target).lexically_normal();
  if (fs::is_regular_file(absolute)) {
    // <repo>/<model>/<version>/model.pt: the samples live two levels up.
    const fs::path model_folder = absolute.parent_path().parent_path();
    return {repository_model(model_folder, absolute)};
  }
  if (const auto model_file = latest_model_file(absolute)) {
    return {repository_model(absolute, *model_file)};
  }
  std::vector<RepositoryModel> models;
  for (const auto& entry : fs::directory_iterator(absolute)) {
    if (!entry.is_directory()) {
      continue;
    }
    if (const auto model_file = latest_model_file(entry.path())) {
      models.push_back(repository_model(entry.path(), *model_file));
    }
  }
  if (models.empty()) {
    throw UsageError(fmt::format("no model in {}: expected <model>/<version>/{} folders, as "
                                 "scripted/export.py writes",
                                 target.string(), kModelFileName));
  }
  std::sort(models.begin(), models.end(),
            [](const RepositoryModel& a, const RepositoryModel& b) { return a.name < b.name; });
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
  check.comparison = compare_to_reference(output, reference, check.tolerance);
  return check;
}

}  // namespace fusedops_app
