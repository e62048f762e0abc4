// `fusedops_app check REPO_OR_MODEL`: each model on its sample input against the reference
// model's saved output, one line per model.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "app_error.h"
#include "commands.h"
#include "model_repository.h"
#include "printable.h"

namespace fusedops_app {

CLI::App* add_check_command(CLI::App& app, CheckOptions& options) {
  CLI::App* command = app.add_subcommand(
      "check", "Run each model of a repository on its sample input and compare with the "
               "reference output (exit status 1 on any mismatch, else 2 if a model could not "
               "be checked)");
  command->add_option("target", options.target,
                      "model repository from scripted/export.py (every model.pt and "
                      "model.pt2 in it), one model folder, or one model file")
      ->required();
  command->add_option("--atol", options.atol,
                      "absolute tolerance (default by dtype: float32 1e-4, float16 1e-2, "
                      "bfloat16 5e-2)")
      ->check(CLI::Range(0.0, 1e30));
  command->add_option("--rtol", options.rtol,
                      "relative tolerance (default by dtype, the same values as --atol)")
      ->check(CLI::Range(0.0, 1e30));
  command->add_flag("--allow-external-symlinks", options.allow_external_symlinks,
                    "follow symbolic links that lead out of the repository");
  return command;
}

int run_check_command(const CheckOptions& options, const c10::Device& device,
                      const FileOptions& files) {
  const std::vector<RepositoryModel> models = find_repository_models(options.target);
  const ToleranceOverride tolerance{options.atol, options.rtol};
  const RepositoryReadOptions read_options{files.load, files.max_tensor_file_bytes,
                                           options.allow_external_symlinks};

  int passed = 0;
  int failed = 0;
  int errors = 0;
  for (const RepositoryModel& model : models) {
    // Names come from folder names: escaped, so that no name can print a line of its own.
    const std::string name = printable(model.name);
    // One model's failure is that model's line; the others still run.
    try {
      const ReferenceCheck check =
          check_against_reference(model, device, tolerance, read_options);
      const bool ok = check.comparison.passed();
      (ok ? passed : failed) += 1;
      fmt::print("{} {} on {} ({}, {:.1f} ms): {}\n", ok ? "PASS" : "FAIL", name, device.str(),
                 check.input_description, check.forward_ms,
                 check.comparison.describe(check.tolerance));
    } catch (const UsageError& e) {
      ++errors;
      fmt::print("ERROR {}: {}\n", name, printable(e.what()));
    } catch (const std::exception& e) {
      ++failed;
      fmt::print("FAIL {}: forward failed: {}\n", name, printable(torch_error_message(e)));
    }
    std::fflush(stdout);
  }
  if (failed > 0) {
    spdlog::error("{} of {} models do not match their reference output{}", failed,
                  models.size(),
                  errors > 0 ? fmt::format(", {} could not be checked", errors) : "");
    return kExitModelFailed;
  }
  if (errors > 0) {
    spdlog::error("{} of {} models could not be checked (missing, damaged or unusable files)",
                  errors, models.size());
    return kExitUsage;
  }
  spdlog::info("all {} models match their reference output on {}", models.size(), device.str());
  return kExitOk;
}

}  // namespace fusedops_app
