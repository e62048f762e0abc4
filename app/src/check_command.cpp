// `fusedops_app check REPO_OR_MODEL`: each model on its sample input against the reference
// model's saved output, one line per model as soon as it is checked.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>

#include <cstdio>

#include "app_error.h"
#include "commands.h"
#include "fusedops/fusedops.h"
#include "json_output.h"
#include "model_repository.h"
#include "printable.h"

namespace fusedops_app {

namespace {

JsonDocument comparison_json(const ReferenceCheck& check) {
  const Comparison& c = check.comparison;
  JsonDocument result = {{"input", check.input_description},
                         {"forward_ms", check.forward_ms},
                         {"atol", check.tolerance.atol},
                         {"rtol", check.tolerance.rtol},
                         {"output_shape", c.output_shape},
                         {"reference_shape", c.reference_shape},
                         {"output_dtype", dtype_name(c.output_dtype)},
                         {"reference_dtype", dtype_name(c.reference_dtype)},
                         {"elements", c.elements},
                         {"mismatches", c.mismatches},
                         {"within_float64_only", c.within_float64_only},
                         {"max_abs_error", c.max_abs_error},
                         {"max_rel_error", c.max_rel_error},
                         {"tolerance_used", c.tolerance_used}};
  if (c.mismatches > 0) {
    result["worst"] = {{"index", c.worst_index},
                       {"got", c.worst_value},
                       {"expected", c.worst_expected}};
  }
  return result;
}

}  // namespace

CLI::App* add_check_command(CLI::App& app, CheckOptions& options) {
  CLI::App* command = app.add_subcommand(
      "check", "Run each model of a repository on its sample input and compare with the "
               "reference output (exit status 1 on any mismatch, else 2 if a model could not "
               "be checked)");
  command->add_option("target", options.target,
                      "model repository from scripted/export.py (every model.pt and "
                      "model.pt2 in it), one model folder, or one model file")
      ->required();
  // CLI::Range alone lets NaN through (every comparison with it is false), and the first
  // comparison then failed as if the model had: a tolerance is a number from 0 to 1e30.
  const CLI::Validator tolerance(
      [](std::string& text) -> std::string {
        double value = 0.0;
        if (CLI::detail::lexical_cast(text, value) && value >= 0.0 && value <= 1e30) return {};
        return "expected a number from 0 to 1e30, got '" + text + "'";
      },
      "FLOAT in [0, 1e30]");
  command->add_option("--atol", options.atol,
                      "absolute tolerance (default by dtype, docs/MODELS.md: float32 1e-4, "
                      "float16 and bfloat16 1e-2)")
      ->check(tolerance);
  command->add_option("--rtol", options.rtol,
                      "relative tolerance (default by dtype, the same values as --atol)")
      ->check(tolerance);
  command->add_flag("--json", options.json,
                    "one JSON document on stdout at the end instead of the lines "
                    "(app/README.md); the lines go to stderr as each model is checked");
  return command;
}

int run_check_command(const CheckOptions& options, const c10::Device& device,
                      const FileOptions& files) {
  const std::vector<RepositoryModel> models = find_repository_models(options.target);
  const ToleranceOverride tolerance{options.atol, options.rtol};
  const RepositoryReadOptions read_options{files.load, files.max_tensor_file_bytes};
  // With --json, stdout carries the document alone and the lines go to stderr: either way a
  // line appears (flushed) as soon as its model is checked.
  std::FILE* lines = options.json ? stderr : stdout;

  int passed = 0;
  int failed = 0;
  int errors = 0;
  JsonDocument results = JsonDocument::array();
  for (const RepositoryModel& model : models) {
    // Names come from folder names: escaped, so that no name can print a line of its own.
    const std::string name = printable(model.name);
    JsonDocument result = {{"name", model.name}};
    // One model's failure is that model's line; the others still run.
    try {
      const ReferenceCheck check =
          check_against_reference(model, device, tolerance, read_options);
      const bool ok = check.comparison.passed();
      (ok ? passed : failed) += 1;
      const std::string description = check.comparison.describe(check.tolerance);
      fmt::print(lines, "{} {} on {} ({}, {:.1f} ms): {}\n", ok ? "PASS" : "FAIL", name,
                 device.str(), check.input_description, check.forward_ms, description);
      result["status"] = ok ? "pass" : "fail";
      result["message"] = description;
      result.update(comparison_json(check));
    } catch (const UsageError& e) {
      ++errors;
      fmt::print(lines, "ERROR {}: {}\n", name, printable(e.what()));
      result["status"] = "error";
      result["message"] = e.what();
    } catch (const std::exception& e) {
      ++failed;
      const std::string message = torch_error_message(e);
      fmt::print(lines, "FAIL {}: forward failed: {}\n", name, printable(message));
      result["status"] = "fail";
      result["message"] = "forward failed: " + message;
    }
    std::fflush(lines);
    results.push_back(std::move(result));
  }

  int status = kExitOk;
  if (failed > 0) {
    spdlog::error("{} of {} models do not match their reference output{}", failed,
                  models.size(),
                  errors > 0 ? fmt::format(", {} could not be checked", errors) : "");
    status = kExitModelFailed;
  } else if (errors > 0) {
    spdlog::error("{} of {} models could not be checked (missing, damaged or unusable files)",
                  errors, models.size());
    status = kExitUsage;
  } else {
    spdlog::info("all {} models match their reference output on {}", models.size(),
                 device.str());
  }
  if (options.json) {
    print_json({{"command", "check"},
                {"fusedops_version", fusedops::version()},
                {"libtorch_version", TORCH_VERSION},
                {"target", options.target},
                {"device", device.str()},
                {"models", results},
                {"passed", passed},
                {"failed", failed},
                {"errors", errors},
                {"exit_status", status}});
  }
  return status;
}

}  // namespace fusedops_app
