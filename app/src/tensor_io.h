// Tensors in and out of files, their description for people, and the accuracy comparison
// against a saved reference output.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <optional>
#include <vector>

#include "file_access.h"  // ExistingFile
#include "fusedops/accuracy.h"
#include "model_metadata.h"  // dtype_name

namespace fusedops_app {

// Tensor files are read whole; a larger one is refused before reading it. The SPEC-size
// sample files are 32 to 64 MiB.
inline constexpr std::uintmax_t kDefaultMaxTensorFileBytes = std::uintmax_t{1} << 30;
inline constexpr const char* kMaxTensorFileOption = "--max-tensor-file-mib";

// A tensor from the bytes of a torch.save(tensor) / torch::pickle_save file, unpickled as
// torch::pickle_load does (libtorch's restricted unpickler, which builds tensors and
// containers and runs no code), its records read with libzip (zip_reader.h: every stated size
// is bounded, and counted before memory of that size is taken). Only one
// dense floating tensor (float32, float16, bfloat16, float64) is accepted, and only once its
// sizes, strides and offset are checked to lie within the storage record the file holds (the
// C++ unpickler does not check that). A TorchScript archive is refused unread. Throws
// UsageError naming source. The tensor comes back as a contiguous copy on the CPU.
at::Tensor tensor_from_bytes(const std::vector<char>& bytes, const std::string& source,
                             std::uintmax_t max_bytes = kDefaultMaxTensorFileBytes);

// tensor_from_bytes of the file, read with that bound on its size.
at::Tensor load_tensor_file(const std::filesystem::path& path,
                            std::uintmax_t max_bytes = kDefaultMaxTensorFileBytes);

// Writes with torch::pickle_save (Python: torch.load(path, weights_only=True)), through a
// temporary file renamed over path (write_file_atomically: what may be replaced, and option
// names path in messages).
void save_tensor_file(const at::Tensor& tensor, const std::filesystem::path& path,
                      ExistingFile existing, const std::string& option);

// "[32, 256]"
std::string shape_text(c10::IntArrayRef shape);

// Shape, dtype, device, min/max/mean (over finite values, with a count of the others) and the
// first values, in a few lines.
std::string summarize_tensor(const at::Tensor& tensor, int64_t first_values = 8);

// docs/MODELS.md's accuracy contract, the one rule the C++ tests use too.
using fusedops::accuracy::Tolerance;
using fusedops::accuracy::tolerance_for;

struct Comparison {
  std::vector<int64_t> output_shape, reference_shape;
  at::ScalarType output_dtype = at::kFloat, reference_dtype = at::kFloat;
  bool shapes_match = false;
  bool dtypes_match = false;
  int64_t elements = 0;
  int64_t mismatches = 0;  // elements fusedops::accuracy::within_tolerance rejects
  // Elements outside the tolerance of the float32 reference but at least as close to the
  // float64 reference as the float32 reference is (a sum that cancels, where PyTorch's own
  // float32 result is off by more than the tolerance): not counted as mismatches.
  int64_t within_float64_only = 0;
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;
  // The quantity the tolerance rule tests: the largest |out - reference| / (atol + rtol *
  // |reference|) over the elements (at most 1 passes, but for within_float64_only ones).
  // max_rel_error alone reads as a failure where an element is near zero (0.288 for a passing
  // model 62), since atol, not rtol, covers it.
  double tolerance_used = 0.0;
  std::vector<int64_t> worst_index;  // where |out - reference| - tolerance is largest
  double worst_value = 0.0;
  double worst_expected = 0.0;

  bool passed() const { return shapes_match && dtypes_match && mismatches == 0; }
  // One line: the errors, or the worst element and the number outside the tolerance.
  std::string describe(const Tolerance& tolerance) const;
};

// fusedops::accuracy::within_tolerance, counted and described. reference_float64, when given,
// is the same reference computed in float64 (a reference_float64 of another shape is ignored).
Comparison compare_to_reference(const at::Tensor& output, const at::Tensor& reference,
                                const Tolerance& tolerance,
                                const std::optional<at::Tensor>& reference_float64 = std::nullopt);

}  // namespace fusedops_app
