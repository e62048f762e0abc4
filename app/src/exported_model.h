// A model.pt written by scripted/export.py: the TorchScript module, what its fusedops.json
// extra file says about it, and the checks that turn misuse into messages before anything runs.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/script.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fusedops_app {

// The extra file's name inside model.pt (scripted/export.py's EXTRA_FILE_NAME).
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

class ExportedModel {
 public:
  // Loads path onto device. Throws UsageError for a missing, unreadable or corrupt file, a
  // model that calls an operator this process does not have, or an operator with no kernel
  // for the device (libfusedops built without CUDA, say).
  static ExportedModel load(const std::filesystem::path& path, const c10::Device& device);

  const std::filesystem::path& path() const { return path_; }
  const c10::Device& device() const { return device_; }
  // Empty for a TorchScript file that was not written by scripted/export.py.
  const std::optional<ModelMetadata>& metadata() const { return metadata_; }
  torch::jit::Module& module() { return module_; }
  const torch::jit::Module& module() const { return module_; }
  // The metadata's model name, or the file name.
  std::string display_name() const;

  // Throws UsageError ("expected [B, 256] float32 (any batch B), got ...") unless x has the
  // exported input's rank, non-batch dimensions and dtype. Without metadata there is nothing
  // to check against.
  void check_input(const at::Tensor& x) const;

  // A torch.rand input of the exported shape with the given batch, on the model's device.
  // Throws UsageError without metadata.
  at::Tensor random_input(int64_t batch_size, uint64_t seed) const;

  // check_input, then forward on the model's device (x is moved there) with autograd off.
  at::Tensor forward(const at::Tensor& x);

 private:
  ExportedModel(std::filesystem::path path, c10::Device device, torch::jit::Module module,
                std::optional<ModelMetadata> metadata);

  std::filesystem::path path_;
  c10::Device device_;
  torch::jit::Module module_;
  std::optional<ModelMetadata> metadata_;
};

// The fusedops:: operators registered in this process, sorted ("fusedops::version", ...).
std::vector<std::string> registered_fusedops_operators();

}  // namespace fusedops_app
