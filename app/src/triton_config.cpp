#include "triton_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <map>
#include <memory>

#include "app_error.h"
#include "printable.h"

namespace fusedops_app {

// Generated at build time (app/cmake/triton_model_config_descriptor.py).
extern const unsigned char kTritonModelConfigDescriptor[];
extern const std::size_t kTritonModelConfigDescriptorSize;

namespace {

namespace pb = google::protobuf;

constexpr const char* kModelConfigMessage = "inference.ModelConfig";

// Triton's schema, built once: a pool holding model_config.proto and a factory of its messages.
struct TritonSchema {
  pb::DescriptorPool pool;
  pb::DynamicMessageFactory factory{&pool};
  const pb::Message* model_config = nullptr;  // the ModelConfig prototype

  TritonSchema() {
    // Parse errors are reported through FirstError; protobuf's own log lines (on stderr) would
    // only repeat them, or warn about the UTF-8 check above.
    pb::SetLogHandler(nullptr);
    pb::FileDescriptorProto file;
    if (!file.ParseFromArray(kTritonModelConfigDescriptor,
                             static_cast<int>(kTritonModelConfigDescriptorSize)) ||
        pool.BuildFile(file) == nullptr) {
      throw std::runtime_error("Triton's model_config.proto descriptor built into this app "
                               "does not load into protobuf " +
                               pb::internal::VersionString(GOOGLE_PROTOBUF_VERSION));
    }
    model_config = factory.GetPrototype(pool.FindMessageTypeByName(kModelConfigMessage));
  }
};

const TritonSchema& triton_schema() {
  static const TritonSchema schema;
  return schema;
}

// Keeps the first error protobuf's text parser reports, with its position.
class FirstError : public pb::io::ErrorCollector {
 public:
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (message_.empty()) {
      message_ = fmt::format("{}:{}: {}", line + 1, column + 1, message);
    }
  }
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// The PyTorch backend's parameters that take "true" or "false" (pytorch_backend's
// src/pt/model_state.cc and src/pt2/model_state.cc, ParseParameters).
const char* const kBooleanParameters[] = {
    "INFERENCE_MODE",       "DISABLE_OPTIMIZED_EXECUTION", "ENABLE_WEIGHT_SHARING",
    "ENABLE_CACHE_CLEANING", "CACHE_CLEANING_ENABLED",     "DISABLE_CUDNN",
    "ENABLE_JIT_EXECUTOR",  "ENABLE_JIT_PROFILING",        "ENABLE_TENSOR_FUSER",
};

// int64 fields come as JSON strings in protobuf's JSON mapping.
int64_t as_int64(const nlohmann::json& value) {
  return value.is_string() ? std::stoll(value.get<std::string>()) : value.get<int64_t>();
}

std::vector<int64_t> int64_list(const nlohmann::json& object, const char* key) {
  std::vector<int64_t> values;
  if (object.contains(key)) {
    for (const auto& value : object.at(key)) {
      values.push_back(as_int64(value));
    }
  }
  return values;
}

std::string string_field(const nlohmann::json& object, const char* key) {
  return object.contains(key) ? object.at(key).get<std::string>() : std::string();
}

class ConfigChecker {
 public:
  ConfigChecker(const nlohmann::json& config, const std::string& source)
      : config_(config), source_(source) {}

  [[noreturn]] void fail(const std::string& field, const std::string& expected,
                         const std::string& actual) const {
    throw UsageError(fmt::format("{}: {} must be {}, got {}", source_, field, expected,
                                 printable(actual)));
  }

  void check_tensor(const char* list, const TritonTensorExpectation& expected) const {
    const nlohmann::json tensors = config_.value(list, nlohmann::json::array());
    if (tensors.size() != 1) {
      fail(list, "one tensor (" + expected.name + ")", std::to_string(tensors.size()));
    }
    const nlohmann::json& tensor = tensors.front();
    const std::string field = std::string(list) + "[0]";
    const std::string name = string_field(tensor, "name");
    if (name != expected.name) {
      fail(field + ".name", "\"" + expected.name + "\"", "\"" + name + "\"");
    }
    const std::string data_type = string_field(tensor, "data_type");
    if (data_type != expected.data_type) {
      fail(field + ".data_type", expected.data_type, data_type.empty() ? "none" : data_type);
    }
    const std::vector<int64_t> non_batch(expected.shape.begin() + 1, expected.shape.end());
    const std::vector<int64_t> dims = int64_list(tensor, "dims");
    const bool has_reshape = tensor.contains("reshape");
    const std::vector<int64_t> reshape =
        has_reshape ? int64_list(tensor.at("reshape"), "shape") : std::vector<int64_t>{};
    if (non_batch.empty()) {
      // Triton has no dims [] for a batched tensor: dims [1] reshaped to [] (export.py).
      if (dims != std::vector<int64_t>{1} || !has_reshape || !reshape.empty()) {
        fail(field + ".dims", "[ 1 ] with reshape { shape: [ ] } (the model's tensor is [B])",
             fmt::format("[{}]{}", fmt::join(dims, ", "),
                         has_reshape ? fmt::format(" reshape [{}]", fmt::join(reshape, ", "))
                                     : ""));
      }
      return;
    }
    if (dims != non_batch || (has_reshape && reshape != non_batch)) {
      fail(field + ".dims", fmt::format("[{}] (fusedops.json's shape without the batch)",
                                        fmt::join(non_batch, ", ")),
           fmt::format("[{}]", fmt::join(dims, ", ")));
    }
  }

 private:
  const nlohmann::json& config_;
  const std::string& source_;
};

}  // namespace

std::string triton_data_type(const std::string& dtype_name) {
  static const std::map<std::string, std::string> types = {
      {"float32", "TYPE_FP32"}, {"float16", "TYPE_FP16"}, {"bfloat16", "TYPE_BF16"}};
  const auto found = types.find(dtype_name);
  return found == types.end() ? std::string() : found->second;
}

nlohmann::json parse_triton_config(const std::string& text, const std::string& source) {
  const TritonSchema& schema = triton_schema();
  std::unique_ptr<pb::Message> config(schema.model_config->New());
  FirstError error;
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&error);
  if (!parser.ParseFromString(text, config.get())) {
    throw UsageError(fmt::format("{}:{} (Triton's model_config.proto text format)", source,
                                 printable(error.message().empty() ? "cannot be parsed"
                                                                   : error.message())));
  }
  std::string json;
  pb::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  const auto status = pb::util::MessageToJsonString(*config, &json, options);
  if (!status.ok()) {
    throw UsageError(fmt::format("{}: {}", source, printable(status.ToString())));
  }
  try {
    return nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception&) {
    // protobuf's text parser takes bytes that are not UTF-8 into a string field, and its JSON
    // printer passes them on (the fuzzer's finding); Triton's schema is proto3, where strings
    // are UTF-8.
    throw UsageError(fmt::format("{}: a string field is not valid UTF-8", source));
  }
}

void check_triton_config(const nlohmann::json& config, const TritonConfigExpectation& expected,
                         const std::string& source) {
  const ConfigChecker check(config, source);
  try {
    const std::string name = string_field(config, "name");
    if (name != expected.model_name) {
      check.fail("name", "\"" + expected.model_name + "\" (the model folder's name)",
                 "\"" + name + "\"");
    }
    const std::string platform = string_field(config, "platform");
    if (platform != expected.platform) {
      check.fail("platform", "\"" + expected.platform + "\" for a " + expected.model_file,
                 "\"" + platform + "\"");
    }
    const std::string backend = string_field(config, "backend");
    if (!backend.empty() && backend != "pytorch") {
      check.fail("backend", "\"pytorch\" or absent", "\"" + backend + "\"");
    }
    const std::string default_file = string_field(config, "default_model_filename");
    if (!default_file.empty() && default_file != expected.model_file) {
      check.fail("default_model_filename", "\"" + expected.model_file + "\" or absent",
                 "\"" + default_file + "\"");
    }
    const int64_t max_batch = config.value("max_batch_size", 0);
    if (max_batch < 1) {
      check.fail("max_batch_size", ">= 1 (the model's dimension 0 is its batch)",
                 std::to_string(max_batch));
    }
    check.check_tensor("input", expected.input);
    check.check_tensor("output", expected.output);

    const nlohmann::json groups = config.value("instance_group", nlohmann::json::array());
    for (size_t i = 0; i < groups.size(); ++i) {
      const std::string field = fmt::format("instance_group[{}]", i);
      if (groups[i].value("count", 1) < 0) {
        check.fail(field + ".count", ">= 1", std::to_string(groups[i].value("count", 1)));
      }
      const std::string kind = groups[i].value("kind", std::string("KIND_AUTO"));
      if (!expected.pinned_kind.empty() && kind != expected.pinned_kind) {
        check.fail(field + ".kind",
                   expected.pinned_kind + " (a .pt2 holds code compiled for one device type)",
                   kind);
      }
    }
    if (config.contains("dynamic_batching") && !expected.rows_independent) {
      check.fail("dynamic_batching",
                 "absent: this model's rows are not independent (train mode: BatchNorm "
                 "normalizes with the statistics of the whole batch, so an output would depend "
                 "on which requests Triton batches together)",
                 "present");
    }
    if (config.contains("dynamic_batching") && expected.platform == "torch_aoti") {
      check.fail("dynamic_batching",
                 "absent for a .pt2: Triton's PyTorch backend (r26.03 through main, 2026-11) "
                 "answers each request of a batched .pt2 run with the whole batch "
                 "(docs/TRITON_PT2_BATCHING.md)",
                 "present");
    }
    const nlohmann::json parameters = config.value("parameters", nlohmann::json::object());
    for (const char* key : kBooleanParameters) {
      if (!parameters.contains(key)) {
        continue;
      }
      const std::string value = string_field(parameters.at(key), "string_value");
      if (value != "true" && value != "false") {
        check.fail(std::string("parameters[") + key + "]", "\"true\" or \"false\"",
                   "\"" + value + "\"");
      }
      if (std::string(key) == "ENABLE_WEIGHT_SHARING" && value == "true" &&
          expected.updates_state) {
        check.fail("parameters[ENABLE_WEIGHT_SHARING]",
                   "absent or \"false\": the model updates its running statistics on each call",
                   "\"true\"");
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{}: unexpected field type: {}", source, e.what()));
  } catch (const std::logic_error& e) {  // std::stoll: not a number, or out of range
    throw UsageError(fmt::format("{}: a number that does not fit: {}", source, e.what()));
  }
}

}  // namespace fusedops_app
