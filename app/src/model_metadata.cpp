#include "model_metadata.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "app_error.h"
#include "json_input.h"
#include "printable.h"

namespace fusedops_app {

namespace {

const std::map<std::string, at::ScalarType>& dtype_names() {
  static const std::map<std::string, at::ScalarType> names = {
      {"float32", at::kFloat}, {"float16", at::kHalf},  {"bfloat16", at::kBFloat16},
      {"float64", at::kDouble}, {"int64", at::kLong},   {"int32", at::kInt},
  };
  return names;
}

bool is_model_dtype(at::ScalarType dtype) {
  // scripted/export.py's DTYPES: every fusedops model computes in one of these.
  return dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16;
}

TensorSpec parse_tensor_spec(const nlohmann::json& json, const std::string& key,
                             const std::string& source) {
  TensorSpec spec{json.at("shape").get<std::vector<int64_t>>(),
                  parse_dtype_name(json.at("dtype").get<std::string>())};
  if (!is_model_dtype(spec.dtype)) {
    throw UsageError(fmt::format("{}: {} gives {} dtype {}; scripted/export.py writes float32, "
                                 "float16 or bfloat16",
                                 source, kMetadataFileName, key, dtype_name(spec.dtype)));
  }
  if (spec.shape.empty()) {
    throw UsageError(fmt::format("{}: {} gives {} shape [] without a batch dimension", source,
                                 kMetadataFileName, key));
  }
  int64_t numel = 1;
  for (const int64_t dim : spec.shape) {
    if (dim < 1 || __builtin_mul_overflow(numel, dim, &numel)) {
      throw UsageError(fmt::format("{}: {} gives {} shape [{}]; expected dimensions >= 1 whose "
                                   "product fits in int64",
                                   source, kMetadataFileName, key, fmt::join(spec.shape, ", ")));
    }
  }
  return spec;
}

}  // namespace

at::ScalarType parse_dtype_name(const std::string& name) {
  const auto found = dtype_names().find(name);
  if (found == dtype_names().end()) {
    throw UsageError(fmt::format("unknown dtype '{}'", name));
  }
  return found->second;
}

std::string dtype_name(at::ScalarType dtype) {
  for (const auto& [name, type] : dtype_names()) {
    if (type == dtype) {
      return name;
    }
  }
  return c10::toString(dtype);
}

ModelMetadata ModelMetadata::parse(const std::string& json_text, const std::string& source) {
  ModelMetadata metadata;
  try {
    metadata.raw = parse_json_without_duplicate_keys(json_text, source);
    const auto& json = metadata.raw;
    metadata.format = json.at("format").get<int>();
    if (metadata.format > kMetadataFormat || metadata.format < 1) {
      throw UsageError(fmt::format(
          "{}: {} has format {}, this app reads formats 1 to {}; use a matching fusedops_app",
          source, kMetadataFileName, metadata.format, kMetadataFormat));
    }
    metadata.model_name = json.at("model_name").get<std::string>();
    metadata.problem = json.at("problem").get<std::string>();
    metadata.name = json.at("name").get<std::string>();
    metadata.op = json.at("op").get<std::string>();
    metadata.mode = json.at("mode").get<std::string>();
    metadata.input = parse_tensor_spec(json.at("input"), "input", source);
    metadata.output = parse_tensor_spec(json.at("output"), "output", source);
    metadata.device = json.at("device").get<std::string>();
    metadata.seed = json.at("seed").get<int64_t>();
    metadata.fusedops_version = json.at("fusedops_version").get<std::string>();
    metadata.torch_version = json.at("torch_version").get<std::string>();
    metadata.init_args = json.at("init_args");
    if (json.contains("numerics")) metadata.numerics = json.at("numerics").get<std::string>();
    metadata.rows_independent = metadata.mode != "train";
    if (metadata.format >= 2) {
      metadata.rows_independent = json.at("rows_independent").get<bool>();
      if (json.contains("cpu_features")) {
        metadata.cpu_features = json.at("cpu_features").get<std::vector<std::string>>();
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{}: {} is not what scripted/export.py writes: {}", source,
                                 kMetadataFileName, e.what()));
  }
  if (metadata.mode != "eval" && metadata.mode != "train") {
    throw UsageError(fmt::format("{}: {} gives mode '{}'; expected eval or train", source,
                                 kMetadataFileName, metadata.mode));
  }
  if (metadata.numerics != "accurate" && metadata.numerics != "eager") {
    throw UsageError(fmt::format("{}: {} gives numerics '{}'; expected accurate or eager", source,
                                 kMetadataFileName, printable(metadata.numerics)));
  }
  if (metadata.op.rfind("fusedops::", 0) != 0) {
    throw UsageError(fmt::format("{}: {} gives operator '{}'; expected a fusedops:: operator",
                                 source, kMetadataFileName, metadata.op));
  }
  return metadata;
}

}  // namespace fusedops_app
