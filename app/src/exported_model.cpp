#include "exported_model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <regex>

#include "app_error.h"
#include "fusedops/fusedops.h"
#include "tensor_io.h"

namespace fusedops_app {

namespace {

TensorSpec parse_tensor_spec(const nlohmann::json& json) {
  return {json.at("shape").get<std::vector<int64_t>>(),
          parse_dtype_name(json.at("dtype").get<std::string>())};
}

// "expected [B, 256] float32 (any batch B)"
std::string expected_input_text(const TensorSpec& input) {
  std::vector<std::string> dims{"B"};
  for (size_t d = 1; d < input.shape.size(); ++d) {
    dims.push_back(std::to_string(input.shape[d]));
  }
  return fmt::format("[{}] {} (any batch B)", fmt::join(dims, ", "), dtype_name(input.dtype));
}

c10::DispatchKey dispatch_key_for(const c10::Device& device) {
  return device.is_cuda() ? c10::DispatchKey::CUDA : c10::DispatchKey::CPU;
}

// torch::jit::load's failures, said in terms of what the user can do about them.
// (c10::Error for a bad archive, torch::jit::ErrorReport for code that does not compile.)
[[noreturn]] void throw_load_error(const std::filesystem::path& path,
                                   const std::exception& error) {
  const std::string message = torch_error_message(error);
  static const std::regex unknown_op(R"(Unknown builtin op: ([A-Za-z0-9_:.]+))");
  std::smatch match;
  if (std::regex_search(message, match, unknown_op)) {
    std::string op = match[1].str();
    if (!op.empty() && op.back() == '.') {
      op.pop_back();
    }
    throw UsageError(fmt::format(
        "cannot load {}: it calls operator {}, which is not registered in this process. "
        "This app has fusedops {} with [{}]; was the model exported with another fusedops "
        "version, or does it need another operator library?",
        path.string(), op, fusedops::version(),
        fmt::join(registered_fusedops_operators(), ", ")));
  }
  throw UsageError(fmt::format("cannot load {} as a TorchScript model: {}", path.string(),
                               message));
}

}  // namespace

ModelMetadata ModelMetadata::parse(const std::string& json_text, const std::string& source) {
  ModelMetadata metadata;
  try {
    metadata.raw = nlohmann::json::parse(json_text);
    const auto& json = metadata.raw;
    metadata.format = json.at("format").get<int>();
    if (metadata.format > kMetadataFormat) {
      throw UsageError(fmt::format(
          "{}: {} has format {}, this app reads format {} or older; use a newer fusedops_app",
          source, kMetadataFileName, metadata.format, kMetadataFormat));
    }
    metadata.model_name = json.at("model_name").get<std::string>();
    metadata.problem = json.at("problem").get<std::string>();
    metadata.name = json.at("name").get<std::string>();
    metadata.op = json.at("op").get<std::string>();
    metadata.mode = json.at("mode").get<std::string>();
    metadata.input = parse_tensor_spec(json.at("input"));
    metadata.output = parse_tensor_spec(json.at("output"));
    metadata.device = json.at("device").get<std::string>();
    metadata.seed = json.at("seed").get<int64_t>();
    metadata.fusedops_version = json.at("fusedops_version").get<std::string>();
    metadata.torch_version = json.at("torch_version").get<std::string>();
    metadata.init_args = json.at("init_args");
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{}: {} is not what scripted/export.py writes: {}", source,
                                 kMetadataFileName, e.what()));
  }
  if (metadata.input.shape.empty()) {
    throw UsageError(fmt::format("{}: {} gives an input without a batch dimension", source,
                                 kMetadataFileName));
  }
  return metadata;
}

std::vector<std::string> registered_fusedops_operators() {
  std::vector<std::string> names;
  for (const auto& op : c10::Dispatcher::singleton().getAllOpNames()) {
    if (op.name.rfind("fusedops::", 0) == 0) {
      names.push_back(op.name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

ExportedModel::ExportedModel(std::filesystem::path path, c10::Device device,
                             torch::jit::Module module, std::optional<ModelMetadata> metadata)
    : path_(std::move(path)),
      device_(device),
      module_(std::move(module)),
      metadata_(std::move(metadata)) {}

ExportedModel ExportedModel::load(const std::filesystem::path& path, const c10::Device& device) {
  if (!std::filesystem::exists(path)) {
    throw UsageError(fmt::format("model file not found: {}", path.string()));
  }
  if (!std::filesystem::is_regular_file(path)) {
    throw UsageError(fmt::format("{} is not a file; expected a TorchScript model.pt",
                                 path.string()));
  }
  spdlog::debug("loading {} onto {}", path.string(), device.str());
  torch::jit::ExtraFilesMap extra_files{{kMetadataFileName, ""}};
  torch::jit::Module module;
  try {
    module = torch::jit::load(path.string(), device, extra_files);
  } catch (const std::exception& e) {
    throw_load_error(path, e);
  }

  std::optional<ModelMetadata> metadata;
  const std::string& json_text = extra_files[kMetadataFileName];
  if (json_text.empty()) {
    spdlog::warn("{} has no {} extra file: not exported by scripted/export.py, so its input "
                 "cannot be checked before running",
                 path.string(), kMetadataFileName);
  } else {
    metadata = ModelMetadata::parse(json_text, path.string());
    // Fail here, with a message, rather than deep in the dispatcher on the first forward.
    const auto op = c10::Dispatcher::singleton().findOp({metadata->op, ""});
    if (!op) {
      throw UsageError(fmt::format("{} was exported for operator {}, which this process does "
                                   "not have; registered: [{}]",
                                   path.string(), metadata->op,
                                   fmt::join(registered_fusedops_operators(), ", ")));
    }
    if (!op->hasComputedKernelForDispatchKey(dispatch_key_for(device))) {
      throw UsageError(fmt::format(
          "{} has no {} kernel in this libfusedops ({}){}; use another --device",
          metadata->op, c10::DeviceTypeName(device.type()), fusedops::version(),
          device.is_cuda() ? ", which was built without CUDA (FUSEDOPS_WITH_CUDA=OFF)" : ""));
    }
  }
  return ExportedModel(path, device, std::move(module), std::move(metadata));
}

std::string ExportedModel::display_name() const {
  return metadata_ ? metadata_->model_name : path_.filename().string();
}

void ExportedModel::check_input(const at::Tensor& x) const {
  if (!metadata_) {
    return;
  }
  const TensorSpec& expected = metadata_->input;
  bool fits = x.dim() == static_cast<int64_t>(expected.shape.size()) && x.size(0) >= 1 &&
              x.scalar_type() == expected.dtype;
  for (int64_t d = 1; fits && d < x.dim(); ++d) {
    fits = x.size(d) == expected.shape[static_cast<size_t>(d)];
  }
  if (!fits) {
    throw UsageError(fmt::format("input does not fit {}: expected {}, got {} {}",
                                 display_name(), expected_input_text(expected),
                                 shape_text(x.sizes()), dtype_name(x.scalar_type())));
  }
}

at::Tensor ExportedModel::random_input(int64_t batch_size, uint64_t seed) const {
  if (!metadata_) {
    throw UsageError(fmt::format("{} has no {}, so its input shape is unknown; pass --input",
                                 path_.string(), kMetadataFileName));
  }
  if (batch_size < 1) {
    throw UsageError(fmt::format("batch size must be >= 1, got {}", batch_size));
  }
  std::vector<int64_t> shape = metadata_->input.shape;
  shape[0] = batch_size;
  // Drawn on the CPU so that a seed gives the same input on every device.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::rand(shape, generator, at::TensorOptions().dtype(at::kFloat))
      .to(device_, metadata_->input.dtype);
}

at::Tensor ExportedModel::forward(const at::Tensor& x) {
  check_input(x);
  c10::InferenceMode no_autograd;
  const c10::IValue output = module_.forward({x.to(device_)});
  if (!output.isTensor()) {
    throw std::runtime_error(fmt::format("{} returned a {}, expected a tensor", display_name(),
                                         output.tagKind()));
  }
  return output.toTensor();
}

}  // namespace fusedops_app
