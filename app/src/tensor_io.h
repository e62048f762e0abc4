// Tensors in and out of files, their description for people, and the accuracy comparison
// against a saved reference output.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <optional>
#include <vector>

namespace fusedops_app {

// Reads a tensor written by scripted/export.py (a TorchScript module whose buffer "tensor"
// holds it), by torch.jit.save of any module with exactly one buffer, or by torch.save /
// torch::pickle_save of a plain tensor. The tensor comes back on the CPU.
at::Tensor load_tensor_file(const std::filesystem::path& path);

// Writes with torch::pickle_save, which Python reads back with torch.load(path).
void save_tensor_file(const at::Tensor& tensor, const std::filesystem::path& path);

// The names scripted/export.py writes into fusedops.json ("float32", "bfloat16", ...).
at::ScalarType parse_dtype_name(const std::string& name);
std::string dtype_name(at::ScalarType dtype);

// "[32, 256]"
std::string shape_text(c10::IntArrayRef shape);

// Shape, dtype, device, min/max/mean (over finite values, with a count of the others) and the
// first values, in a few lines.
std::string summarize_tensor(const at::Tensor& tensor, int64_t first_values = 8);

// allclose(out, reference, atol, rtol): |out - reference| <= atol + rtol * |reference|.
struct Tolerance {
  double atol;
  double rtol;
};

// The accuracy contract (SPEC.md): float32 as close as PyTorch's own float32 result, tested as
// allclose(1e-4, 1e-4); float16/bfloat16 results carry that precision's rounding.
Tolerance tolerance_for(at::ScalarType dtype);

struct Comparison {
  std::vector<int64_t> output_shape, reference_shape;
  at::ScalarType output_dtype = at::kFloat, reference_dtype = at::kFloat;
  bool shapes_match = false;
  bool dtypes_match = false;
  int64_t elements = 0;
  int64_t mismatches = 0;       // elements outside the tolerance (NaN never matches)
  // Elements outside the tolerance of the float32 reference but within it of the float64
  // reference (a sum that cancels, where PyTorch's own float32 result is off by more than the
  // tolerance): not counted as mismatches.
  int64_t within_float64_only = 0;
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;
  std::vector<int64_t> worst_index;  // where |out - reference| - tolerance is largest
  double worst_value = 0.0;
  double worst_expected = 0.0;

  bool passed() const { return shapes_match && dtypes_match && mismatches == 0; }
  // One line: the errors, or the worst element and the number outside the tolerance.
  std::string describe(const Tolerance& tolerance) const;
};

// reference_float64, when given, is the same reference computed in float64: an element outside
// the tolerance of `reference` passes if it is within the tolerance of the float64 one (a sum
// that cancels to near zero can leave PyTorch's own float32 result further off than 1e-4).
Comparison compare_to_reference(const at::Tensor& output, const at::Tensor& reference,
                                const Tolerance& tolerance,
                                const std::optional<at::Tensor>& reference_float64 = std::nullopt);

}  // namespace fusedops_app
