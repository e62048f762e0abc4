// The model repository scripted/export.py writes (Triton's layout plus a sample input and the
// reference model's output per model), and the check of a model against that reference.
#pragma once

#include <c10/core/Device.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tensor_io.h"

namespace fusedops_app {

struct RepositoryModel {
  std::string name;                       // the model's folder: fusedops_98_...
  std::filesystem::path model_file;       // <folder>/<highest version>/model.pt or model.pt2
  std::filesystem::path sample_input;     // <folder>/sample_input.pt
  std::filesystem::path reference_output; // <folder>/reference_output.pt
  // <folder>/reference_output_float64.pt: the reference model run in float64 on the same
  // weights and input (optional; older repositories lack it).
  std::filesystem::path reference_output_float64;
};

// target is a repository (a folder of model folders), one model folder, or a model file (.pt or
// .pt2) inside one. Models come sorted by name. Throws UsageError when target holds no model.
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

// Runs the model on its sample input on device and compares with the reference output, under
// tolerance_for(the reference's dtype) with the overrides applied. Throws UsageError when a
// file cannot be used, and the model's own error when its forward fails.
ReferenceCheck check_against_reference(const RepositoryModel& model, const c10::Device& device,
                                       const ToleranceOverride& overrides = {});

}  // namespace fusedops_app
