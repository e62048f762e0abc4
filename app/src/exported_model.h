// A model written by scripted/export.py, in either format: a TorchScript model.pt or an
// AOTInductor package model.pt2. What its fusedops.json says about it, and the checks that turn
// misuse into messages before anything runs.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/script.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model_metadata.h"

namespace fusedops_app {

class AotiPackage;

// How far the app trusts the files it is given (global options).
struct LoadOptions {
  // Load a model file whose model folder has no fusedops_manifest.json (a hand-made .pt, an
  // older export), with a warning. A file that a manifest lists is always verified.
  // (--allow-unverified)
  bool allow_unverified = false;
  // Follow a symbolic link that leads out of `root` (--allow-external-symlinks).
  bool allow_external_symlinks = false;
  // The folder the model file and its manifest must resolve inside, canonical: `check` of a
  // repository gives the repository; empty means the model's own folder.
  std::filesystem::path root;
};

// A model file is read whole into memory (once: the bytes checked are the bytes loaded).
inline constexpr std::uintmax_t kMaxModelFileBytes = std::uintmax_t{64} << 30;

// The two artifacts scripted/export.py writes, told apart by the file's extension.
enum class ModelFormat {
  kTorchScript,   // model.pt: torch.jit.script, runs on any device libtorch has
  kAotiPackage,   // model.pt2: torch.export + AOTInductor, compiled for one device
};

// .pt2 is an AOTInductor package; anything else is tried as TorchScript.
ModelFormat model_format_of(const std::filesystem::path& path);

// The bytes of a model file, checked against the manifest of its model folder
// (<model folder>/<version>/<file>), after checking that the file and the manifest resolve
// inside options.root (default: the model folder). Without a manifest: refused, or with
// options.allow_unverified read as they are after a warning. Throws UsageError.
std::vector<char> read_model_file(const std::filesystem::path& path, const LoadOptions& options);

struct NamedTensor {
  std::string name;
  at::Tensor tensor;
};

// A titled list of the tensors a model holds ("parameters", "buffers", ...).
using TensorGroup = std::pair<std::string, std::vector<NamedTensor>>;

class ExportedModel {
 public:
  // Loads path onto device, after checking its bytes against the fusedops_manifest.json of
  // its model folder (read_model_file). Throws UsageError for a missing, unreadable, unlisted,
  // damaged or corrupt file, a model folder without a manifest (unless
  // options.allow_unverified), a model that calls an operator this process does not have, an
  // operator with no kernel for the device (libfusedops built without CUDA, say), a .pt2
  // compiled for another device or for instructions this CPU lacks, and a model file that
  // another model's export wrote (check_model_folder).
  static ExportedModel load(const std::filesystem::path& path, const c10::Device& device,
                            const LoadOptions& options = {});

  ExportedModel(ExportedModel&&) noexcept;
  ExportedModel& operator=(ExportedModel&&) noexcept;
  ~ExportedModel();

  const std::filesystem::path& path() const { return path_; }
  const c10::Device& device() const { return device_; }
  ModelFormat format() const { return format_; }
  // Empty for a file that was not written by scripted/export.py.
  const std::optional<ModelMetadata>& metadata() const { return metadata_; }
  // The package's own metadata (AOTI_DEVICE_KEY, AOTI_CPU_ISA, ...); empty for TorchScript.
  const std::unordered_map<std::string, std::string>& aoti_metadata() const {
    return aoti_metadata_;
  }
  // The metadata's model name, or the file name.
  std::string display_name() const;
  // "TorchScript (torch.jit.script)", "AOTInductor package compiled for cpu (AVX2)", ...
  std::string artifact_description() const;

  // The weights the model holds: a TorchScript module's parameters and buffers; an AOTInductor
  // package's constants (parameters and buffers alike, by their names in the original module).
  std::vector<TensorGroup> tensor_groups() const;

  // Throws UsageError ("expected [B, 256] float32 (any batch B), got ...") unless x has the
  // exported input's rank, non-batch dimensions and dtype. Without metadata there is nothing
  // to check against.
  void check_input(const at::Tensor& x) const;

  // A torch.rand input of the exported shape with the given batch, on the model's device.
  // Throws UsageError without metadata, or when the input would not fit in int64 bytes.
  at::Tensor random_input(int64_t batch_size, uint64_t seed) const;

  // Sets the model's cache_folds to false (every call folds its weights afresh): for hosts
  // that write weights behind the version counter (ops/common/fold_cache.h). Throws
  // UsageError for a .pt2, where export fixed it, or a model without the attribute.
  void disable_fold_cache();

  // check_input, then forward on the model's device (x is moved there) with autograd off,
  // then check_output. Throws std::runtime_error (a model failing, exit status 1) for an
  // output that is not what fusedops.json says the model returns.
  at::Tensor forward(const at::Tensor& x);

  // Throws std::runtime_error unless output has fusedops.json's output shape with x's batch,
  // and its dtype. Without metadata there is nothing to check against.
  void check_output(const at::Tensor& x, const at::Tensor& output) const;

 private:
  ExportedModel(std::filesystem::path path, c10::Device device, ModelFormat format,
                std::optional<ModelMetadata> metadata);
  static ExportedModel load_torchscript(const std::filesystem::path& path,
                                        const std::vector<char>& bytes,
                                        const c10::Device& device);
  static ExportedModel load_aoti_package(const std::filesystem::path& path,
                                         const std::vector<char>& bytes,
                                         const c10::Device& device);
  // forward without check_output.
  at::Tensor run_forward(const at::Tensor& x);

  std::filesystem::path path_;
  c10::Device device_;
  ModelFormat format_;
  std::optional<ModelMetadata> metadata_;
  // Exactly one of the two holds the model, by format_.
  std::optional<torch::jit::Module> torchscript_;
  std::unique_ptr<AotiPackage> aoti_package_;
  std::unordered_map<std::string, std::string> aoti_metadata_;
};

// A model file in a model folder (<folder>/<version digits>/<file>) must be the model that
// folder is named after: the folder's name is the model's name (Triton serves it under that
// name, and config.pbtxt must say it), and export writes that name into fusedops.json. Throws
// UsageError for another model's file put there ("... holds model fusedops_62_..., operator
// fusedops::matmul_groupnorm_leakyrelu_sum, but its folder is fusedops_39_..."). A file that is
// not in a version folder has no folder to belong to.
void check_model_folder(const std::filesystem::path& path, const ModelMetadata& metadata);

// The fusedops:: operators registered in this process, sorted ("fusedops::version", ...).
std::vector<std::string> registered_fusedops_operators();

}  // namespace fusedops_app
