// `fusedops_app run MODEL.pt [--input FILE] [--output FILE]`: one forward, summarized.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <system_error>

#include "app_error.h"
#include "commands.h"
#include "device.h"
#include "exported_model.h"
#include "file_access.h"
#include "tensor_io.h"

namespace fusedops_app {

namespace {

namespace fs = std::filesystem;

ExistingFile existing_output(const RunOptions& options) {
  return options.force ? ExistingFile::kReplace : ExistingFile::kKeep;
}

// Refuses an --output that would destroy something: the model or the input this run read
// (compared by file system identity, so another name or a hard link is caught too), even with
// --force; anything but a regular file, even with --force (file_access.h's rule: never a
// device, FIFO, socket, folder or symbolic link); any other existing file without --force.
void check_output_target(const fs::path& output, const RunOptions& options) {
  if (!what_is_at(output)) {
    return;
  }
  std::error_code error;
  for (const auto& [what, path] : {std::pair<const char*, const std::string&>{"the model", options.model},
                                   {"the input", options.input}}) {
    if (!path.empty() && fs::equivalent(output, path, error)) {
      throw UsageError(fmt::format("--output {} is {} this run reads ({}); refusing to "
                                   "overwrite it, even with --force",
                                   output.string(), what, path));
    }
  }
  check_writable(output, existing_output(options), "--output");
}

}  // namespace

CLI::App* add_run_command(CLI::App& app, RunOptions& options) {
  CLI::App* command =
      app.add_subcommand("run", "Run a model once on a given or random input and summarize "
                                "the output");
  command->add_option("model", options.model,
                      "model.pt or model.pt2 written by scripted/export.py")
      ->required();
  command->add_option("-i,--input", options.input,
                      "input tensor file: sample_input.pt from the repository, or torch.save "
                      "of a tensor (default: torch.rand of the exported shape)");
  command->add_option("-o,--output", options.output,
                      "write the output here with torch::pickle_save (Python: torch.load); "
                      "never the model or the input file, an existing file only with --force");
  command->add_flag("-f,--force", options.force,
                    "replace an existing --output regular file (never a device, FIFO, socket, "
                    "folder or symbolic link)");
  command->add_option("-b,--batch", options.batch_size,
                      "batch of the random input (default: the exported batch)")
      ->check(CLI::Range(int64_t{1}, kMaxBatchSize))
      ->excludes("--input");
  command->add_option("--seed", options.seed, "seed of the random input")
      ->check(CLI::Range(uint64_t{0}, kMaxSeed))
      ->capture_default_str();
  command->add_option("--values", options.first_values, "how many output values to print")
      ->check(CLI::Range(int64_t{0}, kMaxBatchSize))
      ->capture_default_str();
  return command;
}

int run_run_command(const RunOptions& options, const c10::Device& device,
                    const FileOptions& files) {
  // Before anything runs: a refused --output should not cost a model load.
  if (!options.output.empty()) {
    check_output_target(options.output, options);
  }
  ExportedModel model = ExportedModel::load(options.model, device, files.load);
  at::Tensor input;
  if (!options.input.empty()) {
    input = load_tensor_file(options.input, files.max_tensor_file_bytes);
    // Before moving it anywhere: the message should be about the user's tensor.
    model.check_input(input);
  } else {
    const int64_t batch = options.batch_size > 0 ? options.batch_size
                          : model.metadata()     ? model.metadata()->input.shape[0]
                                                 : 0;
    input = model.random_input(batch, options.seed);
    spdlog::info("random input {} {} (torch.rand, seed {})", shape_text(input.sizes()),
                 dtype_name(input.scalar_type()), options.seed);
  }

  const auto start = std::chrono::steady_clock::now();
  const at::Tensor output = model.forward(input);
  synchronize(device);
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  fmt::print("model  {}\n", model.display_name());
  fmt::print("input  {} {} on {}\n", shape_text(input.sizes()), dtype_name(input.scalar_type()),
             device.str());
  fmt::print("output {}\n", summarize_tensor(output, options.first_values));
  fmt::print("time   {:.3f} ms (first call, includes the warm-up)\n", elapsed_ms);
  if (!options.output.empty()) {
    check_output_target(options.output, options);  // again: it may have appeared meanwhile
    save_tensor_file(output, options.output, existing_output(options), "--output");
    spdlog::info("wrote the output to {}", options.output);
  }
  return kExitOk;
}

}  // namespace fusedops_app
