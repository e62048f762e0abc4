#include "tensor_io.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/script.h>
#include <torch/serialize.h>

#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>

#include "app_error.h"

namespace fusedops_app {

namespace {

// The buffer scripted/export.py's TensorContainer stores its tensor under.
constexpr const char* kContainerBufferName = "tensor";

std::vector<char> read_file_bytes(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw UsageError(fmt::format("cannot open tensor file {}", path.string()));
  }
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// A TorchScript container: the buffer named "tensor", or the module's only buffer.
at::Tensor tensor_from_module(const torch::jit::Module& module,
                              const std::filesystem::path& path) {
  if (module.hasattr(kContainerBufferName) && module.attr(kContainerBufferName).isTensor()) {
    return module.attr(kContainerBufferName).toTensor();
  }
  std::vector<std::string> names;
  at::Tensor only;
  for (const auto& buffer : module.named_buffers(/*recurse=*/false)) {
    names.push_back(buffer.name);
    only = buffer.value;
  }
  if (names.size() != 1) {
    throw UsageError(fmt::format(
        "{} is a TorchScript module with buffers [{}]; expected one buffer (named '{}') "
        "holding the tensor, as scripted/export.py writes",
        path.string(), fmt::join(names, ", "), kContainerBufferName));
  }
  return only;
}

}  // namespace

at::Tensor load_tensor_file(const std::filesystem::path& path) {
  if (!std::filesystem::is_regular_file(path)) {
    throw UsageError(fmt::format("tensor file not found: {}", path.string()));
  }
  std::string as_module_error;
  std::optional<torch::jit::Module> module;
  try {
    module = torch::jit::load(path.string(), c10::Device(c10::kCPU));
  } catch (const std::exception& e) {
    as_module_error = torch_error_message(e);
  }
  if (module) {
    return tensor_from_module(*module, path);
  }
  // Not a TorchScript archive: maybe torch.save(tensor).
  c10::IValue value;
  try {
    value = torch::pickle_load(read_file_bytes(path));
  } catch (const std::exception& e) {
    const std::string as_pickle_error = torch_error_message(e);
    if (as_pickle_error == as_module_error) {  // not even a zip archive
      throw UsageError(fmt::format("cannot read a tensor from {}: {}", path.string(),
                                   as_pickle_error));
    }
    throw UsageError(fmt::format(
        "cannot read a tensor from {}: it is neither a TorchScript module ({}) nor a "
        "torch.save'd tensor ({})",
        path.string(), as_module_error, as_pickle_error));
  }
  if (!value.isTensor()) {
    throw UsageError(fmt::format("{} holds a {}, not a tensor", path.string(), value.tagKind()));
  }
  return value.toTensor();
}

void save_tensor_file(const at::Tensor& tensor, const std::filesystem::path& path) {
  const std::vector<char> bytes = torch::pickle_save(tensor.detach().cpu());
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!file) {
    throw UsageError(fmt::format("cannot write {}", path.string()));
  }
}

namespace {
const std::map<std::string, at::ScalarType>& dtype_names() {
  static const std::map<std::string, at::ScalarType> names = {
      {"float32", at::kFloat}, {"float16", at::kHalf},  {"bfloat16", at::kBFloat16},
      {"float64", at::kDouble}, {"int64", at::kLong},   {"int32", at::kInt},
  };
  return names;
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

std::string shape_text(c10::IntArrayRef shape) {
  return fmt::format("[{}]", fmt::join(shape.begin(), shape.end(), ", "));
}

std::string summarize_tensor(const at::Tensor& tensor, int64_t first_values) {
  const at::Tensor values = tensor.detach().to(at::kCPU, at::kDouble).flatten();
  std::string text = fmt::format("shape {}, dtype {}, device {}\n", shape_text(tensor.sizes()),
                                 dtype_name(tensor.scalar_type()), tensor.device().str());
  const at::Tensor finite = values.masked_select(values.isfinite());
  if (finite.numel() > 0) {
    text += fmt::format("min {:.6g}, max {:.6g}, mean {:.6g}", finite.min().item<double>(),
                        finite.max().item<double>(), finite.mean().item<double>());
  } else {
    text += "no finite values";
  }
  if (finite.numel() != values.numel()) {
    text += fmt::format(" ({} of {} values are inf or NaN)", values.numel() - finite.numel(),
                        values.numel());
  }
  const int64_t shown = std::min(first_values, values.numel());
  const at::Tensor head = values.slice(0, 0, shown).contiguous();
  const double* data = head.data_ptr<double>();
  text += fmt::format("\nfirst {} values: [{:.6g}]", shown, fmt::join(data, data + shown, ", "));
  return text;
}

Tolerance tolerance_for(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf:
      return {1e-2, 1e-2};  // 10 mantissa bits: ~20 units in the last place
    case at::kBFloat16:
      return {5e-2, 5e-2};  // 7 mantissa bits: ~6 units in the last place
    case at::kDouble:
      return {1e-7, 1e-7};
    default:
      return {1e-4, 1e-4};  // float32: the public KernelBench bar (SPEC.md)
  }
}

Comparison compare_to_reference(const at::Tensor& output, const at::Tensor& reference,
                                const Tolerance& tolerance,
                                const std::optional<at::Tensor>& reference_float64) {
  Comparison result;
  result.output_shape = output.sizes().vec();
  result.reference_shape = reference.sizes().vec();
  result.output_dtype = output.scalar_type();
  result.reference_dtype = reference.scalar_type();
  result.shapes_match = output.sizes() == reference.sizes();
  result.dtypes_match = output.scalar_type() == reference.scalar_type();
  result.elements = reference.numel();
  if (!result.shapes_match || result.elements == 0) {
    return result;
  }
  const at::Tensor got = output.detach().to(at::kCPU, at::kDouble);
  const at::Tensor expected = reference.detach().to(at::kCPU, at::kDouble);
  const at::Tensor abs_error = (got - expected).abs();
  const at::Tensor allowed = tolerance.atol + tolerance.rtol * expected.abs();
  // NaN compares false, so a NaN output counts as a mismatch (allclose, equal_nan=False).
  at::Tensor within = abs_error <= allowed;
  if (reference_float64 && reference_float64->sizes() == reference.sizes()) {
    const at::Tensor exact = reference_float64->detach().to(at::kCPU, at::kDouble);
    const at::Tensor near_exact =
        (got - exact).abs() <= tolerance.atol + tolerance.rtol * exact.abs();
    result.within_float64_only = (near_exact & within.logical_not()).sum().item<int64_t>();
    within = within | near_exact;
  }
  result.mismatches = result.elements - within.sum().item<int64_t>();
  result.max_abs_error = abs_error.max().item<double>();
  result.max_rel_error =
      (abs_error / expected.abs().clamp_min(std::numeric_limits<double>::min())).max().item<double>();

  at::Tensor excess = at::where(abs_error.isnan(),
                                at::full({}, std::numeric_limits<double>::infinity(),
                                         abs_error.options()),
                                abs_error - allowed);
  // The worst element is a real mismatch when there is one.
  if (result.mismatches > 0) {
    excess = at::where(within, at::full({}, -std::numeric_limits<double>::infinity(),
                                        excess.options()),
                       excess);
  }
  int64_t flat = excess.flatten().argmax().item<int64_t>();
  result.worst_value = got.flatten()[flat].item<double>();
  result.worst_expected = expected.flatten()[flat].item<double>();
  result.worst_index.assign(static_cast<size_t>(reference.dim()), 0);
  for (int64_t d = reference.dim() - 1; d >= 0; --d) {
    result.worst_index[static_cast<size_t>(d)] = flat % reference.size(d);
    flat /= reference.size(d);
  }
  return result;
}

std::string Comparison::describe(const Tolerance& tolerance) const {
  if (!shapes_match) {
    return fmt::format("output shape {} differs from the reference's {}",
                       shape_text(output_shape), shape_text(reference_shape));
  }
  if (!dtypes_match) {
    return fmt::format("output dtype {} differs from the reference's {}",
                       dtype_name(output_dtype), dtype_name(reference_dtype));
  }
  std::string text = fmt::format("max_abs_err {:.3g}, max_rel_err {:.3g} (atol {:g}, rtol {:g})",
                                 max_abs_error, max_rel_error, tolerance.atol, tolerance.rtol);
  if (mismatches > 0) {
    text += fmt::format("; {} of {} elements outside the tolerance, worst at [{}]: got {:.8g}, "
                        "expected {:.8g}",
                        mismatches, elements, fmt::join(worst_index, ", "), worst_value,
                        worst_expected);
  }
  if (within_float64_only > 0) {
    text += fmt::format("; {} element(s) outside the tolerance of the float32 reference but "
                        "within it of the float64 reference",
                        within_float64_only);
  }
  return text;
}

}  // namespace fusedops_app
