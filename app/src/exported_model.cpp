#include "exported_model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>

#include <algorithm>
#include <chrono>
#include <regex>

#include "aoti_package.h"
#include "app_error.h"
#include "bounded_read_adapter.h"
#include "cpu_isa.h"
#include "file_access.h"
#include "fusedops/fusedops.h"
#include "manifest.h"
#include "printable.h"
#include "repository_layout.h"
#include "tensor_io.h"
#include "zip_reader.h"

namespace fusedops_app {

namespace {

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

std::string find_or(const std::unordered_map<std::string, std::string>& map,
                    const std::string& key, const std::string& fallback) {
  const auto found = map.find(key);
  return found == map.end() || found->second.empty() ? fallback : found->second;
}

// Fail at load, with a message, rather than deep in the dispatcher on the first forward.
void check_operator_available(const ModelMetadata& metadata, const c10::Device& device,
                              const std::filesystem::path& path) {
  const auto op = c10::Dispatcher::singleton().findOp({metadata.op, ""});
  if (!op) {
    throw UsageError(fmt::format("{} was exported for operator {}, which this process does "
                                 "not have; registered: [{}]",
                                 path.string(), metadata.op,
                                 fmt::join(registered_fusedops_operators(), ", ")));
  }
  if (!op->hasComputedKernelForDispatchKey(dispatch_key_for(device))) {
    throw UsageError(fmt::format(
        "{} has no {} kernel in this libfusedops ({}){}; use another --device", metadata.op,
        c10::DeviceTypeName(device.type()), fusedops::version(),
        device.is_cuda() ? ", which was built without CUDA (FUSEDOPS_WITH_CUDA=OFF)" : ""));
  }
}

void warn_no_metadata(const std::filesystem::path& path) {
  spdlog::warn("{} has no {}: not exported by scripted/export.py, so its input cannot be "
               "checked before running",
               path.string(), kMetadataFileName);
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

ModelFormat model_format_of(const std::filesystem::path& path) {
  return path.extension() == ".pt2" ? ModelFormat::kAotiPackage : ModelFormat::kTorchScript;
}

ExportedModel::ExportedModel(std::filesystem::path path, c10::Device device, ModelFormat format,
                             std::optional<ModelMetadata> metadata)
    : path_(std::move(path)), device_(device), format_(format), metadata_(std::move(metadata)) {}

ExportedModel::ExportedModel(ExportedModel&&) noexcept = default;
ExportedModel& ExportedModel::operator=(ExportedModel&&) noexcept = default;
ExportedModel::~ExportedModel() = default;

std::vector<char> read_model_file(const std::filesystem::path& path,
                                  const LoadOptions& options) {
  const ReadLimit limit{kMaxModelFileBytes, "model file", ""};
  const std::filesystem::path absolute = std::filesystem::absolute(path).lexically_normal();
  const std::filesystem::path model_folder = absolute.parent_path().parent_path();
  // The files `check` would refuse to follow out of the folder are refused here too.
  const std::filesystem::path root =
      options.root.empty() ? std::filesystem::weakly_canonical(model_folder) : options.root;
  for (const std::filesystem::path& file : {absolute, model_folder / kManifestFileName}) {
    check_inside(file, root, options.allow_external_symlinks);
  }
  const std::optional<Manifest> manifest = Manifest::load(model_folder);
  if (manifest) {
    const std::string relative =
        (absolute.parent_path().filename() / absolute.filename()).generic_string();
    return manifest->read_verified(relative, limit);
  }
  if (!options.allow_unverified) {
    throw UsageError(fmt::format(
        "{}: its model folder {} has no {}, so the file cannot be checked against what "
        "scripted/export.py wrote; re-export it, or pass --allow-unverified to load it anyway "
        "(a damaged file may then crash the app or compute wrong numbers)",
        path.string(), model_folder.string(), kManifestFileName));
  }
  spdlog::warn("{}: no {} in {}; loading it unverified (--allow-unverified)", path.string(),
               kManifestFileName, model_folder.string());
  return read_file_bounded(path, limit);
}

void check_model_folder(const std::filesystem::path& path, const ModelMetadata& metadata) {
  const std::filesystem::path absolute = std::filesystem::absolute(path).lexically_normal();
  if (!parse_version_folder_name(absolute.parent_path().filename().string())) {
    return;  // not <folder>/<version>/<file>: no model folder to belong to
  }
  const std::string folder = absolute.parent_path().parent_path().filename().string();
  if (folder == metadata.model_name) {
    return;
  }
  throw UsageError(fmt::format(
      "{} holds model {} (operator {}), but its model folder is {}, whose config.pbtxt, sample "
      "input and reference output describe another model: a model file of another export was "
      "put in this folder; re-export the folder with scripted/export.py",
      path.string(), printable(metadata.model_name), printable(metadata.op), printable(folder)));
}

ExportedModel ExportedModel::load(const std::filesystem::path& path, const c10::Device& device,
                                  const LoadOptions& options) {
  if (!std::filesystem::exists(path)) {
    throw UsageError(fmt::format("model file not found: {}", path.string()));
  }
  if (!std::filesystem::is_regular_file(path)) {
    throw UsageError(fmt::format("{} is not a file; expected a TorchScript model.pt or an "
                                 "AOTInductor model.pt2",
                                 path.string()));
  }
  spdlog::debug("loading {} onto {}", path.string(), device.str());
  const auto start = std::chrono::steady_clock::now();
  // The model file and its folder's manifest (and what the load reads beside them), from one
  // export of the model folder, <folder>/<version>/model.pt.
  ExportedModel model = read_consistently(path.parent_path().parent_path(), [&] {
    const std::vector<char> bytes = read_model_file(path, options);
    return model_format_of(path) == ModelFormat::kAotiPackage
               ? load_aoti_package(path, bytes, device)
               : load_torchscript(path, bytes, device);
  });
  spdlog::debug("loaded {} in {:.1f} ms", path.filename().string(),
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count());
  return model;
}

ExportedModel ExportedModel::load_torchscript(const std::filesystem::path& path,
                                              const std::vector<char>& bytes,
                                              const c10::Device& device) {
  // libtorch's reader allocates each record's stated size before reading it: a damaged size
  // field in a model loaded --allow-unverified had taken 2.5 GB, and the model then ran.
  // Opening the archive with ZipReader refuses such a field first (zip_reader.h).
  (void)ZipReader(bytes, fmt::format("cannot load {} as a TorchScript model", path.string()));
  torch::jit::ExtraFilesMap extra_files{{kMetadataFileName, ""}};
  torch::jit::Module module;
  try {
    module = torch::jit::load(std::make_shared<BoundedReadAdapter>(bytes), device, extra_files);
  } catch (const std::exception& e) {
    throw_load_error(path, e);
  }

  std::optional<ModelMetadata> metadata;
  const std::string& json_text = extra_files[kMetadataFileName];
  if (json_text.empty()) {
    warn_no_metadata(path);
  } else {
    metadata = ModelMetadata::parse(json_text, path.string());
    check_model_folder(path, *metadata);
    check_operator_available(*metadata, device, path);
  }
  ExportedModel model(path, device, ModelFormat::kTorchScript, std::move(metadata));
  model.torchscript_ = std::move(module);
  return model;
}

ExportedModel ExportedModel::load_aoti_package(const std::filesystem::path& path,
                                               const std::vector<char>& bytes,
                                               const c10::Device& device) {
  // The archive's entries and the metadata first: they say which device and CPU the package
  // was compiled for, and reading them writes nothing and loads no code.
  const AotiPackageContents contents = inspect_aoti_package(bytes, path.string());
  const std::unordered_map<std::string, std::string>& aoti_metadata = contents.metadata;

  // A package holds machine code for one device type: it cannot be moved like a TorchScript
  // model's weights.
  const std::string compiled_for = find_or(aoti_metadata, kAotiDeviceKey, "");
  if (compiled_for.empty()) {
    throw UsageError(fmt::format("cannot load {} as an AOTInductor package (.pt2): its "
                                 "metadata has no {}",
                                 path.string(), kAotiDeviceKey));
  }
  const std::string requested = c10::DeviceTypeName(device.type(), /*lower_case=*/true);
  if (compiled_for != requested) {
    throw UsageError(fmt::format(
        "{} was compiled by AOTInductor for {} and runs only there, not on --device {}; use "
        "--device {}, or export a .pt2 for {} (scripted/export.py --device {})",
        path.string(), printable(compiled_for), device.str(), printable(compiled_for),
        requested, requested));
  }

  std::optional<ModelMetadata> metadata;
  const std::string json_text = find_or(aoti_metadata, kMetadataFileName, "");
  if (json_text.empty()) {
    warn_no_metadata(path);
  } else {
    metadata = ModelMetadata::parse(json_text, path.string());
    check_model_folder(path, *metadata);
    check_operator_available(*metadata, device, path);
  }
  if (device.is_cpu()) {
    check_cpu_can_run(find_or(aoti_metadata, kAotiCpuIsaKey, ""),
                      find_or(aoti_metadata, kAotiMachineKey, ""),
                      metadata ? metadata->cpu_features : std::vector<std::string>{},
                      HostCpu::detect(), path.string());
  }

  ExportedModel model(path, device, ModelFormat::kAotiPackage, std::move(metadata));
  model.aoti_metadata_ = aoti_metadata;
  // Its calls to fusedops operators go through the dispatcher, which this process's
  // libfusedops has filled.
  model.aoti_package_ = AotiPackage::load(bytes, contents, device, path.string());
  return model;
}

std::string ExportedModel::display_name() const {
  return printable(metadata_ ? metadata_->model_name : path_.filename().string());
}

std::string ExportedModel::artifact_description() const {
  if (format_ == ModelFormat::kTorchScript) {
    return "TorchScript (torch.jit.script)";
  }
  const std::string compiled_for = find_or(aoti_metadata_, kAotiDeviceKey, "an unknown device");
  std::string target = find_or(aoti_metadata_, kAotiCpuIsaKey, "");
  if (compiled_for == "cuda") {
    target = "compute capability " + find_or(aoti_metadata_, kAotiComputeCapabilityKey, "?");
  }
  return fmt::format("AOTInductor package (torch.export), compiled for {}{}", compiled_for,
                     target.empty() ? "" : " (" + target + ")");
}

std::vector<TensorGroup> ExportedModel::tensor_groups() const {
  auto by_name = [](const NamedTensor& a, const NamedTensor& b) { return a.name < b.name; };
  if (format_ == ModelFormat::kAotiPackage) {
    std::vector<NamedTensor> constants;
    // Keyed by the names the tensors had in the exported module ("bn.running_mean").
    for (const auto& [name, tensor] :
         aoti_package_->runner().extract_constants_map(/*use_inactive=*/false)) {
      constants.push_back({name, tensor});
    }
    std::sort(constants.begin(), constants.end(), by_name);
    return {{"constants", std::move(constants)}};
  }
  std::vector<NamedTensor> parameters;
  std::vector<NamedTensor> buffers;
  for (const auto& parameter : torchscript_->named_parameters()) {
    parameters.push_back({parameter.name, parameter.value});
  }
  for (const auto& buffer : torchscript_->named_buffers()) {
    buffers.push_back({buffer.name, buffer.value});
  }
  return {{"parameters", std::move(parameters)}, {"buffers", std::move(buffers)}};
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

void ExportedModel::check_output(const at::Tensor& x, const at::Tensor& output) const {
  if (!metadata_) {
    return;
  }
  std::vector<int64_t> expected = metadata_->output.shape;
  expected[0] = x.size(0);
  if (output.sizes().vec() != expected || output.scalar_type() != metadata_->output.dtype) {
    throw std::runtime_error(fmt::format(
        "{} returned {} {} for an input of batch {}; its {} says {} {}", display_name(),
        shape_text(output.sizes()), dtype_name(output.scalar_type()), x.size(0),
        kMetadataFileName, shape_text(expected), dtype_name(metadata_->output.dtype)));
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
  int64_t bytes = static_cast<int64_t>(sizeof(float));
  for (const int64_t dim : shape) {
    if (__builtin_mul_overflow(bytes, dim, &bytes)) {
      throw UsageError(fmt::format("a batch of {} rows of {} does not fit in int64 bytes",
                                   batch_size, display_name()));
    }
  }
  // Drawn on the CPU so that a seed gives the same input on every device.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::rand(shape, generator, at::TensorOptions().dtype(at::kFloat))
      .to(device_, metadata_->input.dtype);
}

void ExportedModel::disable_fold_cache() {
  if (format_ == ModelFormat::kAotiPackage) {
    throw UsageError(fmt::format("{}: a .pt2 fixes cache_folds when it is exported; export a "
                                 "model with cache_folds = False, or use the .pt",
                                 path_.string()));
  }
  if (!torchscript_->hasattr("cache_folds")) {
    throw UsageError(fmt::format("{} has no cache_folds attribute (exported by fusedops older "
                                 "than this option)",
                                 path_.string()));
  }
  torchscript_->setattr("cache_folds", false);
}

at::Tensor ExportedModel::forward(const at::Tensor& x) {
  at::Tensor output = run_forward(x);
  check_output(x, output);
  return output;
}

at::Tensor ExportedModel::run_forward(const at::Tensor& x) {
  check_input(x);
  c10::InferenceMode no_autograd;
  if (format_ == ModelFormat::kAotiPackage) {
    // The compiled code assumes the layout torch.export traced with: dense and row-major.
    const std::vector<at::Tensor> outputs =
        aoti_package_->run({x.to(device_).contiguous()});
    if (outputs.size() != 1) {
      throw std::runtime_error(fmt::format("{} returned {} tensors, expected one",
                                           display_name(), outputs.size()));
    }
    // torch 2.11's AOTInductor does not check the status of an operator it calls through the
    // dispatcher (fixed upstream by pytorch/pytorch#180884): when a fusedops operator raises,
    // the package logs the message and returns no output instead of throwing.
    if (!outputs.front().defined()) {
      throw std::runtime_error(fmt::format(
          "{}: an operator failed inside the AOTInductor package, which returned no output; "
          "the operator's message is in libtorch's 'Exception in aoti_torch' log line above",
          display_name()));
    }
    return outputs.front();
  }
  const c10::IValue output = torchscript_->forward({x.to(device_)});
  if (!output.isTensor()) {
    throw std::runtime_error(fmt::format("{} returned a {}, expected a tensor", display_name(),
                                         output.tagKind()));
  }
  return output.toTensor();
}

}  // namespace fusedops_app
