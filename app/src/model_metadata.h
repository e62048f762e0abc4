// fusedops.json: what scripted/export.py says about a model it wrote (inside model.pt as an
// extra file, inside model.pt2 as a metadata entry), parsed and checked before it is used.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fusedops_app {

// The fusedops.json's name (scripted/export.py's EXTRA_FILE_NAME).
inline constexpr const char* kMetadataFileName = "fusedops.json";
// The newest metadata format this app reads (scripted/export.py's METADATA_FORMAT). Format 2
// added rows_independent and, for a CPU .pt2, cpu_features.
inline constexpr int kMetadataFormat = 2;

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
  // The exported ModelNew's numerics, "accurate" or "eager" (models/fusedops/model_new.py).
  // Files written before the key existed computed "accurate", the only numerics then.
  std::string numerics = "accurate";
  TensorSpec input;
  TensorSpec output;
  std::string device;       // the device it was exported on
  int64_t seed = 0;
  std::string fusedops_version;
  std::string torch_version;
  // Whether each output row depends on its input row alone, so that a server may batch
  // requests together (false for model 39 in train mode: BatchNorm's batch statistics).
  // Format 1 did not say: true unless mode is "train".
  bool rows_independent = true;
  // A CPU .pt2: the instruction set extensions of the CPU it was compiled on (AOTInductor
  // compiles with -march=native, so its code may use any of them). Empty otherwise.
  std::vector<std::string> cpu_features;
  nlohmann::json init_args;
  nlohmann::json raw;       // the whole file, for `info`

  // Throws UsageError naming source and the key when the JSON is not what export.py writes:
  // a missing, mistyped or repeated key, a dtype export never writes (only float32, float16, bfloat16),
  // a shape with a dimension below 1 or more values than an int64 holds.
  static ModelMetadata parse(const std::string& json_text, const std::string& source);
};

// The names scripted/export.py writes into fusedops.json ("float32", "bfloat16", ...).
at::ScalarType parse_dtype_name(const std::string& name);
std::string dtype_name(at::ScalarType dtype);

}  // namespace fusedops_app
