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
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace torch::inductor {
class AOTIModelPackageLoader;
}

namespace fusedops_app {

// The fusedops.json's name: an extra file inside model.pt, a metadata entry inside model.pt2
// (scripted/export.py's EXTRA_FILE_NAME).
inline constexpr const char* kMetadataFileName = "fusedops.json";
// The newest metadata format this app reads (scripted/export.py's METADATA_FORMAT).
inline constexpr int kMetadataFormat = 1;

struct TensorSpec {
  std::vector<int64_t> shape;  // dimension 0 is the batch, free at run time
  at::ScalarType dtype = at::kFloat;
};

struct ModelMetadata {
  int format = 0;
  std::string model_name;   // fusedops_98_matmul_avgpool_gelu_scale_max
  std::string problem;      // "98"
  std::string name;         // Matmul_AvgPool_GELU_Scale_Max
  std::string op;           // fusedops::matmul_avgpool_gelu_scale_max
  std::string mode;         // "eval" or "train"
  TensorSpec input;
  TensorSpec output;
  std::string device;       // the device it was exported on
  int64_t seed = 0;
  std::string fusedops_version;
  std::string torch_version;
  nlohmann::json init_args;
  nlohmann::json raw;       // the whole file, for `info`

  // Throws UsageError naming the file and the key when the JSON is not what export.py writes.
  static ModelMetadata parse(const std::string& json_text, const std::string& source);
};

// The two artifacts scripted/export.py writes, told apart by the file's extension.
enum class ModelFormat {
  kTorchScript,   // model.pt: torch.jit.script, runs on any device libtorch has
  kAotiPackage,   // model.pt2: torch.export + AOTInductor, compiled for one device
};

// .pt2 is an AOTInductor package; anything else is tried as TorchScript.
ModelFormat model_format_of(const std::filesystem::path& path);

struct NamedTensor {
  std::string name;
  at::Tensor tensor;
};

// A titled list of the tensors a model holds ("parameters", "buffers", ...).
using TensorGroup = std::pair<std::string, std::vector<NamedTensor>>;

class ExportedModel {
 public:
  // Loads path onto device. Throws UsageError for a missing, unreadable or corrupt file, a
  // model that calls an operator this process does not have, an operator with no kernel for
  // the device (libfusedops built without CUDA, say), or a .pt2 compiled for another device.
  static ExportedModel load(const std::filesystem::path& path, const c10::Device& device);

  ExportedModel(ExportedModel&&) noexcept;
  ExportedModel& operator=(ExportedModel&&) noexcept;
  ~ExportedModel();

  const std::filesystem::path& path() const { return path_; }
  const c10::Device& device() const { return device_; }
  ModelFormat format() const { return format_; }
  // Empty for a file that was not written by scripted/export.py.
  const std::optional<ModelMetadata>& metadata() const { return metadata_; }
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
  // Throws UsageError without metadata.
  at::Tensor random_input(int64_t batch_size, uint64_t seed) const;

  // Sets the model's cache_folds to false (every call folds its weights afresh): for hosts
  // that write weights behind the version counter (ops/common/fold_cache.h). Throws
  // UsageError for a .pt2, where export fixed it, or a model without the attribute.
  void disable_fold_cache();

  // check_input, then forward on the model's device (x is moved there) with autograd off.
  at::Tensor forward(const at::Tensor& x);

 private:
  ExportedModel(std::filesystem::path path, c10::Device device, ModelFormat format,
                std::optional<ModelMetadata> metadata);
  static ExportedModel load_torchscript(const std::filesystem::path& path,
                                        const c10::Device& device);
  static ExportedModel load_aoti_package(const std::filesystem::path& path,
                                         const c10::Device& device);

  std::filesystem::path path_;
  c10::Device device_;
  ModelFormat format_;
  std::optional<ModelMetadata> metadata_;
  // Exactly one of the two holds the model, by format_.
  std::optional<torch::jit::Module> torchscript_;
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> aoti_package_;
  // The package's own metadata (AOTI_DEVICE_KEY, AOTI_CPU_ISA, ...), for artifact_description.
  std::unordered_map<std::string, std::string> aoti_metadata_;
};

// The fusedops:: operators registered in this process, sorted ("fusedops::version", ...).
std::vector<std::string> registered_fusedops_operators();

}  // namespace fusedops_app
