// The model repository scripted/export.py writes (Triton's layout plus a sample input and the
// reference model's output per model, and a manifest of digests), and the check of a model
// against that reference.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "exported_model.h"
#include "tensor_io.h"

namespace fusedops_app {

inline constexpr const char* kSampleInputName = "sample_input.pt";
inline constexpr const char* kReferenceOutputName = "reference_output.pt";
inline constexpr const char* kReferenceOutputFloat64Name = "reference_output_float64.pt";
inline constexpr const char* kTritonConfigName = "config.pbtxt";

struct RepositoryModel {
  std::string name;                       // the model's folder: fusedops_98_... (unescaped)
  std::filesystem::path folder;           // <repository>/<name>
  // <folder>/<version>/model.pt or model.pt2: each version Triton would load is an entry
  std::filesystem::path model_file;
  // The folder the model's files must stay inside (the repository, or the model folder when
  // one model was asked for), canonical.
  std::filesystem::path root;
  // Why this model cannot be checked, found while scanning (a symbolic link loop, a version
  // folder Triton would not accept, no model file); empty when it can.
  std::string problem;
};

// target is a repository (a folder of model folders), one model folder, or a model file (.pt or
// .pt2) inside one. Models come sorted by name; hidden folders (".tmp-*": an export in
// progress) are not models. A model folder that cannot be read or used is
// returned with its problem rather than thrown, so that the other models are still checked.
// Throws UsageError when target does not exist or holds no model folder at all.
std::vector<RepositoryModel> find_repository_models(const std::filesystem::path& target);

struct ReferenceCheck {
  Comparison comparison;
  Tolerance tolerance;
  std::string input_description;  // "[32, 256] float32"
  double forward_ms = 0.0;
};

// Replaces either part of the per-dtype tolerance (command-line --atol/--rtol).
struct ToleranceOverride {
  std::optional<double> atol;
  std::optional<double> rtol;
};

// How check reads a model folder's files (load.allow_external_symlinks: follow a symbolic link
// that leads out of the repository).
struct RepositoryReadOptions {
  LoadOptions load;
  std::uintmax_t max_tensor_file_bytes = kDefaultMaxTensorFileBytes;
};

// Verifies every file the check reads against the model folder's manifest, refuses a file
// reached through a link out of model.root, validates config.pbtxt against the model, runs the
// model on its sample input on device and compares with the reference output, under
// tolerance_for(the reference's dtype) with the overrides applied. Throws UsageError when a
// file cannot be used, and the model's own error when its forward fails.
ReferenceCheck check_against_reference(const RepositoryModel& model, const c10::Device& device,
                                       const ToleranceOverride& overrides = {},
                                       const RepositoryReadOptions& options = {});

// Checks config.pbtxt's text against the loaded model (check_triton_config). Throws UsageError.
void check_model_config(const std::string& config_text, const std::string& folder_name,
                        const ExportedModel& model, const std::string& source);

}  // namespace fusedops_app
