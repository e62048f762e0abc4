// config.pbtxt: Triton's model configuration, parsed with protobuf's own text-format parser
// against Triton's schema (model_config.proto, taken from the tritonclient wheel at build
// time), and checked against the model it configures.
//
// This library links protobuf and not libtorch: libtorch's include folder carries protobuf
// headers of another version, which must not meet the system's.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fusedops_app {

// config.pbtxt is a page of text; anything near this is not one.
inline constexpr std::uintmax_t kMaxTritonConfigBytes = 1 << 20;

// The config parsed into Triton's ModelConfig message, as protobuf's JSON mapping of it (field
// names as in the .proto, enums by name, int64 as strings). Throws UsageError
// "<source>:<line>:<column>: <protobuf's message>" for text that Triton would not parse: a
// syntax error, a field or enum value its schema does not have, a wrong type.
nlohmann::json parse_triton_config(const std::string& text, const std::string& source);

struct TritonTensorExpectation {
  std::string name;               // "INPUT__0"
  std::string data_type;          // "TYPE_FP32"
  std::vector<int64_t> shape;     // with the batch dimension (fusedops.json's shape)
};

// What the config must say about the model next to it (from fusedops.json and the file).
struct TritonConfigExpectation {
  std::string model_name;   // the model folder's name
  std::string model_file;   // "model.pt" or "model.pt2"
  std::string platform;     // "pytorch_libtorch" or "torch_aoti"
  // The instance kind a .pt2 must pin ("KIND_CPU", "KIND_GPU": it holds code for one device
  // type); empty for a .pt, which runs wherever Triton places it.
  std::string pinned_kind;
  TritonTensorExpectation input;
  TritonTensorExpectation output;
  bool rows_independent = true;  // dynamic_batching allowed (for a .pt; never for a .pt2)
  bool updates_state = false;    // train mode: instances must not share weights
};

// Throws UsageError naming source, the field, what it must be and what it is, when config does
// not describe the model as scripted/export.py would: name, platform (and backend, default
// model filename), max_batch_size >= 1, one input and one output with their names, data types
// and dims (a batch-only tensor as dims [1] reshaped to []), instance_group kinds, no
// dynamic_batching for a model whose rows are not independent nor for a .pt2 (platform
// torch_aoti: the backend's batched .pt2 answers are wrong), and the PyTorch backend's
// boolean parameters set to "true" or "false" (no ENABLE_WEIGHT_SHARING for a model that
// updates its state).
void check_triton_config(const nlohmann::json& config, const TritonConfigExpectation& expected,
                         const std::string& source);

// Triton's data type name of a fusedops.json dtype ("float32" -> "TYPE_FP32"); empty if none.
std::string triton_data_type(const std::string& dtype_name);

}  // namespace fusedops_app
