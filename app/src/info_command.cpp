// `fusedops_app info MODEL.pt`: what the model is, what it holds and where.
#include <ATen/core/dispatch/Dispatcher.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <filesystem>
#include <set>
#include <spdlog/spdlog.h>
#include <system_error>

#include "app_error.h"
#include "commands.h"
#include "exported_model.h"
#include "fusedops/fusedops.h"
#include "json_output.h"
#include "model_repository.h"
#include "printable.h"
#include "tensor_io.h"

namespace fusedops_app {

namespace {

struct KernelAvailability {
  bool registered = false;
  bool cpu = false;
  bool cuda = false;
};

KernelAvailability kernel_availability(const std::string& op_name) {
  const auto op = c10::Dispatcher::singleton().findOp({op_name, ""});
  if (!op) {
    return {};
  }
  return {true, op->hasComputedKernelForDispatchKey(c10::DispatchKey::CPU),
          op->hasComputedKernelForDispatchKey(c10::DispatchKey::CUDA)};
}

std::string describe(const KernelAvailability& kernels) {
  if (!kernels.registered) {
    return "not registered";
  }
  return fmt::format("kernels: CPU {}, CUDA {}", kernels.cpu ? "yes" : "no",
                     kernels.cuda ? "yes" : "no");
}

std::set<std::string> devices_of(const std::vector<TensorGroup>& groups) {
  std::set<std::string> devices;
  for (const auto& [title, tensors] : groups) {
    for (const NamedTensor& named : tensors) {
      devices.insert(named.tensor.device().str());
    }
  }
  return devices;
}

// The --json document: the same facts as the text, fusedops.json as the file holds it.
JsonDocument info_json(const ExportedModel& model, const c10::Device& device) {
  JsonDocument document = {{"command", "info"},
                           {"fusedops_version", fusedops::version()},
                           {"libtorch_version", TORCH_VERSION},
                           {"file", model.path().string()},
                           {"format", model.artifact_description()}};
  if (const auto& metadata = model.metadata()) {
    const KernelAvailability kernels = kernel_availability(metadata->op);
    document["metadata"] = metadata->raw;
    // Also for files older than the key (they computed "accurate").
    document["numerics"] = metadata->numerics;
    document["operator"] = {{"name", metadata->op},
                            {"registered", kernels.registered},
                            {"cpu_kernel", kernels.cpu},
                            {"cuda_kernel", kernels.cuda}};
  } else {
    document["metadata"] = nullptr;
  }
  const std::vector<TensorGroup> groups = model.tensor_groups();
  JsonDocument tensor_groups = JsonDocument::array();
  for (const auto& [title, tensors] : groups) {
    JsonDocument entries = JsonDocument::array();
    for (const auto& [name, tensor] : tensors) {
      entries.push_back({{"name", name},
                         {"shape", tensor.sizes().vec()},
                         {"dtype", dtype_name(tensor.scalar_type())},
                         {"device", tensor.device().str()}});
    }
    tensor_groups.push_back({{"title", title}, {"tensors", entries}});
  }
  document["tensor_groups"] = tensor_groups;
  document["model_devices"] = devices_of(groups);
  document["device"] = device.str();
  document["cuda_device_count"] = torch::cuda::device_count();
  return document;
}

void print_tensor_table(const std::string& title, const std::vector<NamedTensor>& tensors) {
  int64_t values = 0;
  size_t name_width = 0;
  for (const auto& [name, tensor] : tensors) {
    values += tensor.numel();
    name_width = std::max(name_width, name.size());
  }
  fmt::print("{} ({}, {} values):\n", title, tensors.size(), values);
  for (const auto& [name, tensor] : tensors) {
    fmt::print("  {:<{}}  {:<14} {:<9} {}\n", printable(name), name_width, shape_text(tensor.sizes()),
               dtype_name(tensor.scalar_type()), tensor.device().str());
  }
}

}  // namespace

CLI::App* add_info_command(CLI::App& app, InfoOptions& options) {
  CLI::App* command = app.add_subcommand(
      "info", "What an exported model is: its format, fusedops.json, weights and devices");
  command->add_option("model", options.model,
                      "model.pt or model.pt2 written by scripted/export.py, or a model folder "
                      "or a repository (every model Triton would serve in it)")
      ->required();
  command->add_flag("--json", options.json,
                    "one JSON document on stdout instead of the text (app/README.md)");
  return command;
}

namespace {

// A shape with its batch dimension named B (the first of the input's and of the output's: a
// model's rows are its batch), e.g. "[B, 256]", "[B]".
std::string batch_free_shape(const std::vector<int64_t>& shape) {
  std::vector<std::string> dims{"B"};
  for (size_t d = 1; d < shape.size(); ++d) dims.push_back(std::to_string(shape[d]));
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

void print_info(const ExportedModel& model, const c10::Device& device) {
  fmt::print("file        {}\n", printable(model.path().string()));
  fmt::print("format      {}\n", model.artifact_description());
  if (const auto& metadata = model.metadata()) {
    // Strings from the file are escaped: they cannot start lines of their own.
    fmt::print("model       {} (problem {}, {})\n", printable(metadata->model_name),
               printable(metadata->problem), printable(metadata->name));
    fmt::print("operator    {} ({})\n", printable(metadata->op),
               describe(kernel_availability(metadata->op)));
    fmt::print("init args   {}\n", printable(metadata->init_args.dump()));
    fmt::print("mode        {}\n", metadata->mode);
    fmt::print("numerics    {}\n", metadata->numerics);
    fmt::print("input       {} {} (exported with B = {})\n",
               batch_free_shape(metadata->input.shape), dtype_name(metadata->input.dtype),
               metadata->input.shape[0]);
    fmt::print("output      {} {}\n", batch_free_shape(metadata->output.shape),
               dtype_name(metadata->output.dtype));
    fmt::print("exported    on {}, seed {}, fusedops {}, torch {}\n", printable(metadata->device),
               metadata->seed, printable(metadata->fusedops_version),
               printable(metadata->torch_version));
  } else {
    fmt::print("model       (no {}: not written by scripted/export.py)\n", kMetadataFileName);
  }
  fmt::print("this app    fusedops {}, libtorch {}\n", fusedops::version(), TORCH_VERSION);

  const std::vector<TensorGroup> groups = model.tensor_groups();
  for (const auto& [title, tensors] : groups) {
    print_tensor_table(title, tensors);
  }
  fmt::print("devices     model on [{}] (--device {}); this machine: cpu, {} CUDA GPU(s)\n",
             fmt::join(devices_of(groups), ", "), device.str(), torch::cuda::device_count());
}

}  // namespace

int run_info_command(const InfoOptions& options, const c10::Device& device,
                     const FileOptions& files) {
  std::error_code error;
  if (!std::filesystem::is_directory(options.model, error)) {
    ExportedModel model = ExportedModel::load(options.model, device, files.load);
    if (options.json) {
      print_json(info_json(model, device));
    } else {
      print_info(model, device);
    }
    return kExitOk;
  }
  // A repository or a model folder: every model file in it that Triton would serve (check's
  // choice), one after another; a model that cannot be read is an error line, the others go on.
  int errors = 0;
  JsonDocument models = JsonDocument::array();
  bool first = true;
  for (const RepositoryModel& found : find_repository_models(options.model)) {
    try {
      if (!found.problem.empty()) throw UsageError(found.problem);
      LoadOptions load = files.load;
      load.root = found.root;
      const ExportedModel model = ExportedModel::load(found.model_file, device, load);
      if (options.json) {
        models.push_back(info_json(model, device));
      } else {
        fmt::print("{}", first ? "" : "\n");
        print_info(model, device);
      }
    } catch (const std::exception& e) {
      ++errors;
      spdlog::error("{}: {}", printable(found.name), torch_error_message(e));
      if (options.json) {
        models.push_back({{"name", found.name}, {"error", torch_error_message(e)}});
      }
    }
    first = false;
  }
  if (options.json) {
    print_json({{"command", "info"}, {"target", options.model}, {"models", models}});
  }
  return errors > 0 ? kExitUsage : kExitOk;
}

}  // namespace fusedops_app
