// `fusedops_app check REPO_OR_MODEL`: each model on its sample input against the reference
// model's saved output, one line per model.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "app_error.h"
#include "commands.h"
#include "model_repository.h"

namespace fusedops_app {

CLI::App* add_check_command(CLI::App& app, CheckOptions& options) {
  CLI::App* command = app.add_subcommand(
      "check", "Run each model of a repository on its sample input and compare with the "
               "reference output (exit status 1 on any mismatch)");
  command->add_option("target", options.target,
                      "model repository from scripted/export.py (every model.pt and "
                      "model.pt2 in it), one model folder, or one model file")
      ->required();
  command->add_option("--atol", options.atol,
                      "absolute tolerance (default by dtype: float32 1e-4, float16 1e-2, "
                      "bfloat16 5e-2)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--rtol", options.rtol,
                      "relative tolerance (default by dtype, the same values as --atol)")
      ->check(CLI::NonNegativeNumber);
  return command;
}

int run_check_command(const CheckOptions& options, const c10::Device& device) {
  const std::vector<RepositoryModel> models = find_repository_models(options.target);
  const ToleranceOverride tolerance{options.atol, options.rtol};

  int passed = 0;
  for (const RepositoryModel& model : models) {
    // One model's failure is that model's line; the others still run.
    try {
      const ReferenceCheck check = check_against_reference(model, device, tolerance);
      const bool ok = check.comparison.passed();
      passed += ok ? 1 : 0;
      fmt::print("{} {} on {} ({}, {:.1f} ms): {}\n", ok ? "PASS" : "FAIL", model.name,
                 device.str(), check.input_description, check.forward_ms,
                 check.comparison.describe(check.tolerance));
    } catch (const UsageError& e) {
      fmt::print("ERROR {}: {}\n", model.name, e.what());
    } catch (const std::exception& e) {
      fmt::print("ERROR {}: forward failed: {}\n", model.name, torch_error_message(e));
    }
  }
  std::fflush(stdout);
  const int failed = static_cast<int>(models.size()) - passed;
  if (failed > 0) {
    spdlog::error("{} of {} models do not match their reference output", failed, models.size());
    return kExitModelFailed;
  }
  spdlog::info("all {} models match their reference output on {}", models.size(), device.str());
  return kExitOk;
}

}  // namespace fusedops_app
